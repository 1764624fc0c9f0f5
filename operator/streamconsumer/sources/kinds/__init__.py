"""The stream kinds, one module each, each declaring its `KIND` (`sources/kind.py`):
`sources/registry.py` finds every module here. A kind's reader may live in a module of
its own in `sources/` (imported when a stream is read, not when the CRD is built)."""
