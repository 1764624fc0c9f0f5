"""StreamConsumer: consume sharded streams on Kubernetes with leases and checkpoints.

The public surface for processor authors is `streamconsumer.processor`; the models in
`streamconsumer.models` are shared by the operator and the workers."""

__version__ = "0.1.0"
