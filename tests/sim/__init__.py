"""A deterministic simulation of the whole protocol (docs/simulation.md), in the FoundationDB /
TigerBeetle spirit: the real lease engine, coordinator, consumer loop, status writer,
worker core and shard machines, driven on one simulated clock with a simulated stream,
network and apiserver, while faults are injected in any order. Every invariant of
docs/design.md#invariants is checked after every event (`ledger.py`)."""
