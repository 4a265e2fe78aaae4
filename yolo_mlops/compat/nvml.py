"""NVML bindings (nvidia-ml-py, imported as `pynvml`): functions older releases, and the legacy `pynvml` package,
lack or name differently.

Checked against nvidia-ml-py 13.615.71 (run) and the sources of the releases in the declared range:
- GPM (GPU Performance Monitoring, Hopper and newer: `nvmlGpmQueryDeviceSupport`, `nvmlGpmSampleAlloc`, ...,
  `c_nvmlGpmMetricsGet_t`) is missing from older bindings: a missing name raises AttributeError, not NVMLError,
  so `gpm_missing` is asked before any GPM call;
- a function missing by name (a clock or PCIe query of a newer driver API) is looked up under its older names and
  otherwise answers FUNCTION_NOT_FOUND, as NVML itself does for a function the driver lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ERR_FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND
GPM_NAMES = (
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleGet",
    "nvmlGpmSampleFree",
    "nvmlGpmMetricsGet",
    "c_nvmlGpmMetricsGet_t",
)


def gpm_missing(bindings: Any) -> list[str]:
    """The GPM names these bindings lack ([] when they have the whole API)."""
    return [name for name in GPM_NAMES if not hasattr(bindings, name)]


def function(bindings: Any, name: str, *older_names: str) -> Callable[..., Any]:
    """`bindings.<name>` (or an older name of it), looked up at call time; raises the bindings' NVMLError with
    FUNCTION_NOT_FOUND when they have none, so a caller drops that metric as unsupported."""
    for candidate in (name, *older_names):
        found = getattr(bindings, candidate, None)
        if found is not None:
            return found
    raise bindings.NVMLError(ERR_FUNCTION_NOT_FOUND)
