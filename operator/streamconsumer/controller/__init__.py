"""The operator, one package per concern: `election` (who leads), `leases` (one consumer's
lease table, its protocol and its status), `consumer` (the loop and driver per consumer),
`worker_api` (what workers call), `workloads` (the workers' objects), `aws` (the calls to
AWS) and `certificates` (the API's TLS). Here: the process (`__main__`), kopf's handlers
(`handlers`, `essence`, `requests`), what they share (`context`, `config`, `metrics`,
`executors`, `names`). Run it with `python -m streamconsumer.controller`
(docs/architecture.md lists every module)."""
