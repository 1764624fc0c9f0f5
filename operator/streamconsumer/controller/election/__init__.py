"""Who leads: the election driven against a `coordination.k8s.io` Lease (`leadership`,
around the pure `core.election`) and what the process does as it wins and loses it
(`lifecycle`)."""
