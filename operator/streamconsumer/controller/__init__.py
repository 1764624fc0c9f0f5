"""The operator: kopf's handlers (`handlers`, decorators only), the process and its
election (`__main__`, `leadership`, `lifecycle`), one driver per StreamConsumer over its
loop and lease coordinator (`consumers`, `driver`, `loop`, `lease_coordinator`), the
status writer (`status`) and the worker API (`answers`, `api`, `auth`). Run it with
`python -m streamconsumer.controller` (docs/architecture.md lists every module)."""
