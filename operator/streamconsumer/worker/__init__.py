"""The slim worker: heartbeats to the operator, reads its shards with boto3, calls the
user's processor and checkpoints through the operator's API. Imports neither kopf nor
the Kubernetes client. Run with `python -m streamconsumer.worker`."""
