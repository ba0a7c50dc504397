"""Bounded embedding tables: the row index, admission, eviction and the table itself.

`index` maps ids to row places at a cost per request independent of the table's size,
`admission` counts sightings of ids that hold no row yet in bounded memory, `eviction`
decides which rows leave (TTL, the cap with LRU or LFU), and `table` holds the rows with
their count and last-touched step and records what changed since the last checkpoint file.
"""
