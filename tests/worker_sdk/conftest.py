import pytest

from worker_sdk import ack


@pytest.fixture(autouse=True)
def fresh_ack_mode():
    """The ack ledger's mode is process-wide: a PSClient made by an earlier test must not
    switch later tests' datasets to push acknowledgements."""
    ack.use_push_acks(False)
    yield
    ack.use_push_acks(False)
