"""bench_resize: the PS set resized 2 -> 4 -> 2 while a worker trains, live against
stop-the-world (issue 25). `worker` (the training process, every push counted and checked),
`run` (the processes and the resizes), `report` (the numbers and the table), `cli`."""
