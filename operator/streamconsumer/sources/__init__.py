"""Stream sources: the kinds (`kinds/`, one module each, the way KEDA keeps one file per
scaler), each declaring a `KIND` (`kind.StreamKind`: spec model, lister, reader, worker
settings, access-policy names and endpoint hosts, fan-out support, what its AWS errors
mean), found by `registry`; the readers that need boto3 beside them. A new kind is its
module in `kinds/`; `tests/unit/memory_kind.py` is an example. Nothing here imports the
worker or the operator."""
