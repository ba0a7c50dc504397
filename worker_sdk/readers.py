"""`worker_sdk.readers`, the documented home of the range readers: they live in
`worker_sdk.data.readers`; this name is kept for the code that imports it from here."""
from .data.readers import ArrayReader, ParquetReader, RangeRead, RecordReader, as_reader  # noqa: F401
