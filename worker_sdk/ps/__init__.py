"""The worker's model side: talking to the PS set.

`client` (`PSClient`, `ElasticEmbedding`: what a training loop calls), `pipeline` (pushes and
prefetches in flight), `data_client` (`DataClient`: the data-plane API, routed by the slot layout),
`steps` (one Step per PS), `router` (the layout a call is routed by and its split), `parts`
(a call's content split by the slot layout), `reroute` (`RoutedCall`: a call sent, collected
and carried on as its retry owner decides), `retry` (`CallRetry`: what every answer means, the
one retry owner), `exchange` (connections to every PS: sending and collecting, nothing
decided), `routes` (the layout and where each PS index's primary listens, from the master). The wire format, the slot layout and the specs are the contract's (`pswire`), shared
with the PS. Records become trained
through the `worker_sdk.data.ack` ledger a client is given.
"""
