"""What kopf remembers of a StreamConsumer it handled (its "essence", to diff the next
change against), kept in an annotation of the object itself (`last-handled-configuration`).
All annotations of an object share 256 KiB: kopf's copy of every other annotation would
let any large one (a requester annotation, written by anyone without the admission
policy, or a tool's) leave no room for it, and then no handling of that object could
finish (a 422 at each attempt; a pause never applied nor recorded). So the essence keeps
only the annotations our handlers follow, each as a digest of its value: a change still
shows, whatever the size. The handlers read the values from the body, never from the diff."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import kopf

from streamconsumer.models.resource import REQUESTED_BY, RESET_ANNOTATION

FOLLOWED = (RESET_ANNOTATION, REQUESTED_BY)  # the annotations handlers.py reacts to


def digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


class Essence(kopf.AnnotationsDiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> Any:
        essence: Any = super().build(body=body, extra_fields=extra_fields)
        metadata = essence.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        followed = {k: digest(str(v)) for k, v in annotations.items() if k in FOLLOWED}
        if followed:
            metadata["annotations"] = followed
        else:
            metadata.pop("annotations", None)
        if not metadata:
            essence.pop("metadata", None)
        return essence
