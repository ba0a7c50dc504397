"""The scaling policy: a pure function from (spec, signals, state, clock) to decisions, each with
a reason; the master's driver applies them through an engine (DESIGN, round 4)."""
