"""The master's PS health checks against a real TLS gRPC server: a master given the wrong CA
is told so (once), instead of seeing a PS that looks down."""
from __future__ import annotations

import logging

from cluster.certs import make_tls_files
from master.ps.monitor import PSMonitor
from rpckit import auth
from rpckit.server import build_server


def test_a_health_check_that_fails_on_tls_says_which_setting_to_fix(tmp_path, caplog):
    ps_certs = make_tls_files(tmp_path / "ps")
    other = make_tls_files(tmp_path / "other", "another CA")
    server, port, _ = build_server("127.0.0.1", 0, 2, [], [],
                                   credentials=auth.server_credentials(ps_certs.cert,
                                                                       ps_certs.key))
    server.start()
    address = f"127.0.0.1:{port}"
    try:
        assert PSMonitor(None, None, tls_ca=ps_certs.ca)._check(address) == ""
        wrong = PSMonitor(None, None, tls_ca=other.ca)
        with caplog.at_level(logging.ERROR, logger="master.ps.monitor"):
            problem = wrong._check(address)
            assert wrong._check(address) == problem  # told once, remembered
        assert "not signed by the CA" in problem and "--tls-ca" in problem
        assert len([r for r in caplog.records if "cannot health-check" in r.getMessage()]) == 1
        assert "serves TLS" in PSMonitor(None, None, tls_ca="")._check(address)  # plaintext
    finally:
        server.stop(0)
