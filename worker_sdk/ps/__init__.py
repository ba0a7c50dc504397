"""The worker's model side: talking to the PS set.

`client` (`PSClient`, `ElasticEmbedding`: what a training loop calls), `pipeline` (pushes and
prefetches in flight), `data_client` (`DataClient`: the partitioned data-plane API),
`steps` (one Step per PS), `exchange` (sending to every PS, retrying, re-routing), `routes`
(where each PS index's primary listens, from the master). The wire format, the partitioning
and the specs are the contract's (`pswire`), shared with the PS. Records become trained
through the `worker_sdk.data.ack` ledger a client is given.
"""
