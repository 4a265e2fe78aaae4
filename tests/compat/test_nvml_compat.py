"""compat.nvml against bindings with and without the GPM API (the legacy `pynvml` package and older nvidia-ml-py
releases have none), and the real backend's choice of path when it is missing."""

from __future__ import annotations

import types

import pytest

from yolo_mlops.compat import nvml as nvml_compat


class _NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _bindings(*names):
    module = types.SimpleNamespace(NVMLError=_NVMLError)
    for name in names:
        setattr(module, name, lambda *args, called=name: called)
    return module


def test_gpm_missing_lists_what_old_bindings_lack():
    assert nvml_compat.gpm_missing(_bindings(*nvml_compat.GPM_NAMES)) == []
    old = _bindings("nvmlInit", "nvmlDeviceGetUtilizationRates")
    assert nvml_compat.gpm_missing(old) == list(nvml_compat.GPM_NAMES)


def test_function_falls_back_to_older_names_then_not_found():
    bindings = _bindings("nvmlDeviceGetMaxClockInfo_v1")
    assert nvml_compat.function(bindings, "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMaxClockInfo_v1")() == (
        "nvmlDeviceGetMaxClockInfo_v1"
    )
    with pytest.raises(_NVMLError) as caught:
        nvml_compat.function(bindings, "nvmlDeviceGetCurrPcieLinkWidth")
    assert caught.value.value == nvml_compat.ERR_FUNCTION_NOT_FOUND


def test_the_real_backend_does_not_call_gpm_on_bindings_without_it(monkeypatch):
    """Before, a binding without nvmlGpmQueryDeviceSupport raised AttributeError out of the backend's open()."""
    from yolo_mlops.nvml import real

    monkeypatch.setattr(real, "pynvml", _bindings("nvmlInit"))
    assert real._gpm_supported(object()) is False
