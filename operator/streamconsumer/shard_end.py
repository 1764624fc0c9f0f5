"""`SHARD_END`: the checkpoint of a closed shard whose every record has been processed.

Its one definition, in a module without dependencies: the processor SDK (which has
none), the models and the cores all name it, and none of them imports another layer
for it (`core.lineage`, `models.api` and `processor` re-export it)."""

SHARD_END = "SHARD_END"
