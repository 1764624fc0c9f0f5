"""The worker's processor, named by `processor.entrypoint` ("package.module:Name"): a
class or a function, either of them async. Apart from `processor` because it chooses
between the synchronous API and `awaiting`, which builds on it."""

from __future__ import annotations

import importlib
from typing import cast

from streamconsumer import awaiting, kclpy
from streamconsumer.processor import LIFECYCLE, FunctionProcessor, ProcessorFactory


def load_processor(entrypoint: str) -> ProcessorFactory:
    """Resolves "package.module:Name" to a factory of per-shard processors.

    `Name` may be a processor class (one instance per shard) or a plain function, either
    of them async (`streamconsumer.awaiting`), or a class written for kclpy
    (`streamconsumer.kclpy`)."""
    module_name, sep, attribute = entrypoint.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f'entrypoint {entrypoint!r} must look like "package.module:Name"')
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"entrypoint {entrypoint!r}: cannot import {module_name}: {error}"
        ) from None
    target = getattr(module, attribute, None)
    if target is None:
        raise ValueError(f"entrypoint {entrypoint!r}: {module_name} has no {attribute}")
    if isinstance(target, type) and kclpy.is_kclpy_processor(target):
        return kclpy.adapted(target)  # written for KCL's MultiLangDaemon, run as it stands
    if isinstance(target, type):
        missing = [m for m in LIFECYCLE if not callable(getattr(target, m, None))]
        if missing:
            raise ValueError(
                f"entrypoint {entrypoint!r}: class lacks {', '.join(missing)}; "
                "subclass streamconsumer.processor.BaseRecordProcessor (or "
                "streamconsumer.awaiting.AsyncBaseRecordProcessor)"
            )
        if awaiting.is_async(target):
            return awaiting.AsyncFactory(target)
        return cast(ProcessorFactory, target)
    if callable(target):
        function = target
        if awaiting.is_async(function):
            return lambda: awaiting.synchronous(function)
        return lambda: FunctionProcessor(function)
    raise ValueError(f"entrypoint {entrypoint!r} is neither a processor class nor a function")
