"""The worker's data side: leases from the master, the records they cover, the ack rule.

`master_client` (a registered worker's calls to the master), `leases` (the lease table of one
dataset), `ack` (the acknowledgement ledger the training side reports trained records to),
`lease_stream` (one dataset's leases as pieces, hand-back), `record_order`, `readers` (range
reads), `dataset` (`ElasticDataset`), `loader` (the DataLoader adapter), `preempt` (SIGTERM
and Ctrl-C), `simworker`. Nothing here imports the model side (`worker_sdk.ps`).
"""
