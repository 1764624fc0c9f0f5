"""StreamConsumer: consume sharded streams on Kubernetes with leases and checkpoints.

The public surface for processor authors is `streamconsumer.processor`; the models in
`streamconsumer.models` are shared by the operator and the workers."""

# The one version of the package, its images and its chart (Chart.yaml's version and
# appVersion and values.yaml's image tag follow it: tests/unit/test_versions.py).
__version__ = "0.2.0"
