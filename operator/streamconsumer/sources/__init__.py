"""Stream sources, one module per kind (`kinesis`, `dynamodb_streams`; the way KEDA keeps
one file per scaler), each declaring a `KIND` (`base.StreamKind`: spec model, lister,
reader, worker settings, fan-out support, what its AWS errors mean), registered in one
table (`registry.KINDS`). A new kind: its module, one line in that table, and its field
in `models.resource.Source` (the CRD); `tests/unit/memory_kind.py` is an example.
Nothing here imports the worker or the operator."""
