"""The typed event every decoder produces: only the fields the analyses read, built by msgspec straight from the
JSON text, or from a parsed dict by the other decoders (`event_from_dict`)."""

from __future__ import annotations

from typing import Any

import msgspec


class Args(
    msgspec.Struct,
    gc=False,  # never part of a reference cycle: untracked objects make decoding cheaper for the collector
    frozen=True,  # shared default of every event without args
    rename={
        "device_type": "Device Type",
        "total_allocated": "Total Allocated",
        "total_reserved": "Total Reserved",
        "collective": "Collective name",
        "in_nelems": "In msg nelems",
        "group_size": "Group size",
    },
):
    """The args we read (Kineto's key spelling); msgspec skips every other key without building it."""

    stream: int = -1  # typed: a non-integer stream or correlation sends the file to the ijson fallback
    correlation: int = -1
    device_type: Any = -1
    total_allocated: Any = None
    total_reserved: Any = None
    # record_param_comms only (COLLECTIVE_RECORD_NAME): what the collective was and its message
    collective: Any = None
    in_nelems: Any = None
    dtype: Any = None
    group_size: Any = None


NO_ARGS = Args()


class TypedEvent(msgspec.Struct, gc=False):
    """One trace event, only the fields we use; values of unexpected type fall back to ijson."""

    ph: Any = None
    cat: Any = ""
    name: Any = ""
    pid: Any = ""
    tid: Any = ""
    ts: float | None = None
    dur: float | None = None
    args: Args = NO_ARGS


def event_from_dict(event) -> TypedEvent:
    """A parsed event of any value types as the typed event (what cannot be read, read as absent)."""
    if not isinstance(event, dict):
        return TypedEvent()  # counted as seen, read as nothing
    args = event.get("args")
    if isinstance(args, dict):
        args = Args(
            stream=as_int(args.get("stream", -1)),
            correlation=as_int(args.get("correlation", -1)),
            device_type=args.get("Device Type", -1),
            total_allocated=args.get("Total Allocated"),
            total_reserved=args.get("Total Reserved"),
            collective=args.get("Collective name"),
            in_nelems=args.get("In msg nelems"),
            dtype=args.get("dtype"),
            group_size=args.get("Group size"),
        )
    else:
        args = NO_ARGS
    ts, dur = as_float(event.get("ts")), as_float(event.get("dur"))
    return TypedEvent(
        ph=event.get("ph"),
        cat=_hashable(event.get("cat", "")),
        name=_hashable(event.get("name", "")),
        pid=_hashable(event.get("pid", "")),
        tid=_hashable(event.get("tid", "")),
        ts=None if ts != ts else ts,  # NaN (missing or unreadable) -> None
        dur=None if dur != dur else dur,
        args=args,
    )


def _hashable(value):
    return value if isinstance(value, (str, int, float)) else str(value)


def as_int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        return -1


def as_float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
