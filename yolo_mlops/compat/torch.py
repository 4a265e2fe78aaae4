"""torch: the profiler and allocator APIs that differ between the releases of the declared range, and the private
parts of torch the project reads.

Checked against torch 2.5.1, 2.11.0, 2.14.1 and 2.15.0 (run on CPU), and the sources of every release from 2.5 to
2.15. Only `wait_for_exports` (2.14 on) and DDP's buffers switch differ inside that range; the rest is one shape
throughout and is here because it is private:
- `profile.wait_for_exports()` (2.14 on): waits for an export an experimental backend may defer; elsewhere
  `export_chrome_trace` has written the file when it returns;
- `profile(acc_events=...)` keeps every cycle's events for `key_averages` (`profile_arguments` drops any argument
  a torch does not take, should one appear or go);
- `FunctionEventAvg.self_device_time_total` / `device_time_total` (`self_cuda_time_total` / `cuda_time_total`
  before 2.4, read by `event_value` should a torch lack the new names);
- the memory profiler's categories (`torch.profiler._memory_profiler`, private);
- the CUDA allocator's history (`torch.cuda.memory._record_memory_history`, `_dump_snapshot`, private);
- a compiled module's original (`_orig_mod`, set by `torch.compile`'s OptimizedModule);
- DistributedDataParallel's `forward_sync_buffers` (2.13 on; `broadcast_buffers` is deprecated there).
"""

from __future__ import annotations

import inspect
from functools import cache
from pathlib import Path
from typing import Any

# FunctionEventAvg time fields by their current name -> their name in older releases
_EVENT_FIELD_FALLBACK = {
    "self_device_time_total": "self_cuda_time_total",
    "device_time_total": "cuda_time_total",
    "self_device_memory_usage": "self_cuda_memory_usage",
}


@cache
def _profile_parameters() -> frozenset[str]:
    from torch.profiler import profile

    return frozenset(inspect.signature(profile.__init__).parameters)


def profile_arguments(**arguments: Any) -> tuple[dict[str, Any], list[str]]:
    """The keyword arguments this torch's `torch.profiler.profile` takes, and the names of those it does not."""
    accepted = _profile_parameters()
    return {k: v for k, v in arguments.items() if k in accepted}, [k for k in arguments if k not in accepted]


def wait_for_exports(prof: Any) -> None:
    """Wait for a deferred trace export where this torch can defer one; a no-op elsewhere."""
    wait = getattr(prof, "wait_for_exports", None)
    if callable(wait):
        wait()


def event_value(event: Any, field: str) -> Any:
    """A `FunctionEventAvg` field by its current name, read under its older name on releases that lack it."""
    if hasattr(event, field):
        return getattr(event, field)
    return getattr(event, _EVENT_FIELD_FALLBACK.get(field, field), 0)


def memory_categories() -> tuple[dict[Any, int], Any]:
    """torch's memory-profiler categories: (category -> column index, the Category enum). ImportError when this
    torch has none."""
    from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, Category

    return dict(_CATEGORY_TO_INDEX), Category


def memory_history_missing() -> str | None:
    """Why this torch cannot record the CUDA allocator's history; None when it can."""
    import torch

    memory = torch.cuda.memory
    if not (hasattr(memory, "_record_memory_history") and hasattr(memory, "_dump_snapshot")):
        return f"torch {torch.__version__} has no memory-history API"
    return None


def start_memory_history(max_entries: int) -> None:
    import torch

    torch.cuda.memory._record_memory_history(max_entries=max_entries)


def stop_memory_history() -> None:
    import torch

    torch.cuda.memory._record_memory_history(enabled=None)


def dump_memory_snapshot(path: Path) -> None:
    import torch

    torch.cuda.memory._dump_snapshot(str(path))


def is_compiled(module: Any) -> bool:
    """True for the module `torch.compile` returned (an OptimizedModule wrapping the original)."""
    return hasattr(module, "_orig_mod")


@cache
def ddp_buffers_keyword() -> str:
    """DistributedDataParallel's switch for syncing buffers on forward: `forward_sync_buffers` where it exists,
    else `broadcast_buffers`."""
    from torch.nn.parallel import DistributedDataParallel

    parameters = inspect.signature(DistributedDataParallel.__init__).parameters
    return "forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers"
