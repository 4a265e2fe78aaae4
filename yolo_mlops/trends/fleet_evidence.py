"""The evidence beside a slow machine: what its runs recorded, against its peers' medians.

From NVML the SM clock (mean, lowest, and the GPU's maximum), the enforced power limit and the power drawn,
the clock-event (throttle) reasons seen, the hottest temperature and the PCIe link generation and width; on
every machine the CPU model (CPU runs), clock and core count. A figure that differs from the peers' by
`STANDS_OUT` or more stands out; a figure a run did not record is said to be not recorded, never shown as
zero. Pure functions over `HistoryRun`s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from yolo_mlops import names
from yolo_mlops.render import fmt
from yolo_mlops.trends.history import HistoryRun

STANDS_OUT = 0.05  # a figure this far from its peers' (relative, or in points for shares of time) stands out
NOT_EXPLAINED = "nothing recorded explains it"


# (name, metric, unit, kind): NVML figures that can explain a slow GPU machine. kind "share": a % of the
# training time, compared in points; "level": compared as a ratio.
GPU_EVIDENCE = (
    ("SM clock mean", names.GPU_SM_CLOCK_MEAN, "MHz", "level"),
    ("SM clock max", names.GPU_SM_CLOCK_MAX, "MHz", "level"),
    ("SM clock lowest", names.GPU_SM_CLOCK_MIN, "MHz", "level"),
    ("power limit", names.GPU_POWER_LIMIT, "W", "level"),
    ("power draw mean", names.GPU_POWER_MEAN, "W", "level"),
    ("temperature max", names.GPU_TEMP_MAX, "C", "level"),
    ("power-capped clocks", names.GPU_CLOCKS_EVENT_POWER, "% of time", "share"),
    ("thermal-slowed clocks", names.GPU_CLOCKS_EVENT_THERMAL, "% of time", "share"),
    ("PCIe generation", names.GPU_PCIE_GEN, "", "level"),
    ("PCIe width", names.GPU_PCIE_WIDTH, "lanes", "level"),
)
CPU_EVIDENCE = (("CPU clock", "cpu_mhz", "MHz"), ("CPU cores", "cpu_count", ""))
CLOCKS_EVENT_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)  # nvml.backend.CLOCKS_EVENT_REASONS, without importing nvml


@dataclass(frozen=True)
class Evidence:
    name: str
    unit: str
    machine: float | str | None  # the machine's median over its runs; None: not recorded on its runs
    peers: float | str | None  # the median of its peers' medians; None: not recorded on theirs
    stands_out: bool  # differs from the peers by more than STANDS_OUT
    text: str


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _machine_value(runs: list[HistoryRun], read) -> float | None:
    return _median([v for v in (read(r) for r in runs) if v is not None and math.isfinite(v)])


def _peers_value(per_machine: dict[str, list[HistoryRun]], machine: str, read) -> float | None:
    """The median of the peers' medians (only peers whose runs recorded the figure)."""
    return _median(
        [
            v
            for other, rs in per_machine.items()
            if other != machine
            for v in [_machine_value(rs, read)]
            if v is not None
        ]
    )


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "none") else None
    except ValueError:
        return None


def _reason_share(reason: str):
    """A run's share of time with a clock-event reason: 0 when it measured reasons and did not see this one."""

    def read(r: HistoryRun) -> float | None:
        if names.GPU_CLOCKS_EVENT_POWER not in r.metrics:
            return None  # reasons not measured on this run
        return r.metrics.get(names.clocks_event_metric(reason), 0.0)

    return read


def _item(name: str, unit: str, machine_median: float | None, peers: float | None, kind: str, machine: str) -> Evidence:
    u = f" {unit}" if unit else ""
    if machine_median is None:
        text = f"{name}: not recorded on {machine}'s runs" + (f" (peers {fmt(peers)}{u})" if peers is not None else "")
        return Evidence(name, unit, None, peers, False, text)
    if peers is None:
        return Evidence(
            name,
            unit,
            machine_median,
            None,
            False,
            f"{name}: {fmt(machine_median)}{u}; not recorded on its peers' runs",
        )
    if kind == "share":
        out = abs(machine_median - peers) >= 100 * STANDS_OUT
    else:
        out = peers != 0 and abs(machine_median / peers - 1) >= STANDS_OUT
    return Evidence(
        name, unit, machine_median, peers, out, f"{name}: {fmt(machine_median)}{u} vs peers {fmt(peers)}{u}"
    )


def evidence(per_machine: dict[str, list[HistoryRun]], machine: str) -> tuple[Evidence, ...]:
    """The machine's recorded figures against its peers' medians, the ones that stand out first; a figure
    its runs did not record is said to be not recorded (never zero)."""
    own = per_machine[machine]
    everyone = [r for rs in per_machine.values() for r in rs]
    items: list[Evidence] = []
    if any(k.startswith(names.GPU) for r in everyone for k in r.metrics):
        for name, metric, unit, kind in GPU_EVIDENCE:

            def read(r: HistoryRun, metric=metric) -> float | None:
                return r.metrics.get(metric)

            items.append(
                _item(name, unit, _machine_value(own, read), _peers_value(per_machine, machine, read), kind, machine)
            )
        clock_share = _machine_value(own, lambda r: _share_of_max(r))
        peers_share = _peers_value(per_machine, machine, _share_of_max)
        items.append(_item("SM clock mean / max", "%", clock_share, peers_share, "share", machine))
        seen = {}
        for reason in CLOCKS_EVENT_REASONS:
            machine_share = _machine_value(own, _reason_share(reason))
            peers = _peers_value(per_machine, machine, _reason_share(reason))
            if (machine_share or 0) > 0 or (peers or 0) > 0:
                seen[reason] = _item(f"clocks event {reason}", "% of time", machine_share, peers, "share", machine)
        if not seen and _machine_value(own, _reason_share("sw_power_cap")) is not None:
            items.append(
                Evidence(
                    "clocks events", "", "none", "none", False, "clocks events: none seen on this machine or its peers"
                )
            )
        items += seen.values()
    else:
        items.append(
            Evidence(
                "NVML", "", None, None, False, "NVML figures: not recorded (CPU runs, or runs without a GPU sampler)"
            )
        )
    models = sorted({r.host["cpu_model"] for r in own if r.host.get("cpu_model")})
    peer_models = sorted(
        {
            r.host["cpu_model"]
            for other, rs in per_machine.items()
            if other != machine
            for r in rs
            if r.host.get("cpu_model")
        }
    )
    if models or peer_models:
        mine_text, peers_text = ", ".join(models) or None, ", ".join(peer_models) or None
        items.append(
            Evidence(
                "CPU model",
                "",
                mine_text,
                peers_text,
                bool(models and models != peer_models),
                f"CPU model: {mine_text or 'not recorded'} vs peers {peers_text or 'not recorded'}",
            )
        )
    for name, key, unit in CPU_EVIDENCE:

        def read_host(r: HistoryRun, key=key) -> float | None:
            return _float(r.host.get(key))

        items.append(
            _item(
                name,
                unit,
                _machine_value(own, read_host),
                _peers_value(per_machine, machine, read_host),
                "level",
                machine,
            )
        )
    return tuple(sorted(items, key=lambda e: not e.stands_out))


def _share_of_max(r: HistoryRun) -> float | None:
    mean, top = r.metrics.get(names.GPU_SM_CLOCK_MEAN), r.metrics.get(names.GPU_SM_CLOCK_MAX)
    return 100.0 * mean / top if mean is not None and top else None
