"""The worker's model side: talking to the PS set.

`client` (`PSClient`, `ElasticEmbedding`: what a training loop calls), `pipeline` (pushes and
prefetches in flight), `data_client` (`DataClient`: the data-plane API, routed by the slot layout),
`steps` (one Step per PS), `parts` (a call's content split by the slot layout), `reroute`
(a part sent on when its slot moved), `exchange` (sending to every PS, retrying, re-routing to
a new primary), `routes` (the layout and where each PS index's primary listens, from the
master). The wire format, the slot layout and the specs are the contract's (`pswire`), shared
with the PS. Records become trained
through the `worker_sdk.data.ack` ledger a client is given.
"""
