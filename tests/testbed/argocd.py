"""The Argo CD health check in docs/argocd, run as Argo CD runs it: in a Lua 5.1 (Argo CD
uses gopher-lua), on the object as a table."""

from __future__ import annotations

from pathlib import Path

from lupa import lua51

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "argocd" / "health.lua"


def health(obj: dict[str, object]) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    function = runtime.eval("function(obj) " + SCRIPT.read_text() + " end")
    result = function(_to_lua(runtime, obj))
    return {"status": result["status"], "message": result["message"]}


def _to_lua(runtime: lua51.LuaRuntime, value: object) -> object:
    if isinstance(value, dict):
        return runtime.table_from({k: _to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    return value
