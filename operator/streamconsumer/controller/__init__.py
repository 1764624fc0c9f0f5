"""The operator: kopf handlers (`main`), one coordinator per StreamConsumer (`state`),
the worker API (`api`, `auth`), the per-consumer loop (`loop`) and the status writer
(`status`). Run it with `kopf run -m streamconsumer.controller.main`."""
