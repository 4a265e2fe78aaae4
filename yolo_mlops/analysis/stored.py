"""A stored `trace_analysis.json` (a run's `analysis/` artifact) read back into `TraceAnalysis`.

Files of older runs lack fields the model gained since. A missing field whose type admits None decodes as
None ("not measured"), a missing list or dict as empty; any other missing field, or a value of the wrong
type, makes the file unreadable (`StoredAnalysisError`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache

import msgspec

from yolo_mlops.analysis.model import TraceAnalysis


class StoredAnalysisError(ValueError):
    """The text is not a trace analysis this model can read."""


def trace_analysis_from_json(text: str | bytes) -> TraceAnalysis:
    try:
        raw = msgspec.json.decode(text)
        # strict=False: JSON object keys are strings, RankSpread's are rank numbers
        return msgspec.convert(_fill_missing(raw, TraceAnalysis), TraceAnalysis, strict=False)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StoredAnalysisError(f"not a readable trace analysis: {exc}") from None


@cache
def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _fill_missing(value: object, tp: object) -> object:
    """`value` (decoded JSON) with the fields older files lack added as None / empty, recursively."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _fill_missing(value, inner[0]) if len(inner) == 1 else value
    # tp is a type hint: a dataclass here is a class, never an instance
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(value, dict):
        hints, out = _hints(tp), dict(value)
        for f in dataclasses.fields(tp):
            if f.name in out:
                out[f.name] = _fill_missing(out[f.name], hints[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                empty = _empty(hints[f.name])
                if empty is not _NO_EMPTY:
                    out[f.name] = empty
        return out
    if origin is list and isinstance(value, list):
        return [_fill_missing(v, args[0]) for v in value]
    if origin is dict and isinstance(value, dict):
        return {k: _fill_missing(v, args[1]) for k, v in value.items()}
    return value


_NO_EMPTY = object()


def _empty(tp: object) -> object:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
        return None
    if origin is list:
        return []
    if origin is dict:
        return {}
    return _NO_EMPTY
