"""compat.torch against fakes of the older and the newer shape of each API it bridges, and the installed torch."""

from __future__ import annotations

import sys
import types

import pytest

from yolo_mlops.compat import torch as torch_compat


class _NewEvent:
    self_device_time_total = 7.0
    device_time_total = 9.0
    self_device_memory_usage = 64


class _OldEvent:
    self_cuda_time_total = 7.0
    cuda_time_total = 9.0
    self_cuda_memory_usage = 64


@pytest.mark.parametrize("event", [_NewEvent(), _OldEvent()], ids=["device_fields", "cuda_fields"])
def test_event_fields_read_under_either_name(event):
    assert torch_compat.event_value(event, "self_device_time_total") == 7.0
    assert torch_compat.event_value(event, "device_time_total") == 9.0
    assert torch_compat.event_value(event, "self_device_memory_usage") == 64


def test_profile_arguments_keep_what_the_installed_profiler_takes():
    kept, dropped = torch_compat.profile_arguments(record_shapes=True, acc_events=True, no_such_argument=1)
    assert dropped == ["no_such_argument"]
    assert kept == {"record_shapes": True, "acc_events": True}


def test_profile_arguments_drop_acc_events_where_the_profiler_lacks_it(monkeypatch):
    """The older shape: a profile() without acc_events (it keeps the last cycle's events only)."""
    monkeypatch.setattr(torch_compat, "_profile_parameters", lambda: frozenset({"self", "activities", "schedule"}))
    kept, dropped = torch_compat.profile_arguments(activities=[], acc_events=True)
    assert kept == {"activities": []}
    assert dropped == ["acc_events"]


def test_wait_for_exports_only_where_the_profiler_has_it():
    waited = []

    class Deferring:
        def wait_for_exports(self):
            waited.append(True)

    torch_compat.wait_for_exports(Deferring())
    torch_compat.wait_for_exports(object())  # a release without deferred exports: nothing to wait for
    assert waited == [True]


def test_is_compiled_by_the_original_module_it_wraps():
    import torch

    plain = torch.nn.Linear(2, 2)
    wrapped = types.SimpleNamespace(_orig_mod=plain)
    assert torch_compat.is_compiled(wrapped) and not torch_compat.is_compiled(plain)


def test_memory_categories_of_the_installed_torch():
    index, category = torch_compat.memory_categories()
    assert sorted(index.values()) == list(range(len(index)))
    assert {c.name.lower() for c in index if c is not None} >= {"parameter", "gradient", "activation"}
    assert isinstance(category, type)


def test_a_torch_without_memory_categories_is_a_layout_error(monkeypatch):
    """The older shape: a memory profiler module without the category table; the holder split says why and
    measures nothing."""
    from yolo_mlops.profiling import memory_holders

    monkeypatch.setitem(sys.modules, "torch.profiler._memory_profiler", types.ModuleType("_memory_profiler"))
    with pytest.raises(memory_holders.LayoutError, match="no memory-profiler categories"):
        memory_holders.column_labels()


def test_memory_history_missing_names_the_torch_release(monkeypatch):
    import torch

    assert torch_compat.memory_history_missing() is None
    monkeypatch.delattr(torch.cuda.memory, "_dump_snapshot")
    assert torch_compat.memory_history_missing() == f"torch {torch.__version__} has no memory-history API"


def test_ddp_buffers_keyword_from_the_installed_torch(monkeypatch):
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    expected = (
        "forward_sync_buffers"
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
        else "broadcast_buffers"
    )
    assert torch_compat.ddp_buffers_keyword() == expected


def test_ddp_buffers_keyword_of_an_older_torch(monkeypatch):
    """Before 2.13 DDP has only broadcast_buffers."""
    import torch.nn.parallel

    class OldDistributedDataParallel:
        def __init__(self, module, device_ids=None, broadcast_buffers=True, bucket_cap_mb=None):
            pass

    torch_compat.ddp_buffers_keyword.cache_clear()
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", OldDistributedDataParallel)
    try:
        assert torch_compat.ddp_buffers_keyword() == "broadcast_buffers"
    finally:
        torch_compat.ddp_buffers_keyword.cache_clear()
