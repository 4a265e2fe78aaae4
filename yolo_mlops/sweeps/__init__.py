"""Sweep logic: plan the children, run bookkeeping, collect their step times from MLflow, compare, report.

`flows/sweep.py` only orchestrates (parent run, subflows under a concurrency limit, artifacts); everything
that decides or computes lives here as plain functions, so it is testable without Prefect.

MLflow names (see docs/sweeps.md): parent run tag `yolo_mlops.run_kind=sweep`; children `run_kind=variant`,
`mlflow.parentRunId`, `yolo_mlops.variant`, `yolo_mlops.sweep.repeat`, `yolo_mlops.sweep.position`;
parent artifacts `sweep/comparison.json` (MLflow table), `sweep/comparison.md`, `sweep/speedup.png`;
parent metrics `sweep/speedup_<variant>` (+ `_ci_low`, `_ci_high`), `sweep/images_per_s_<variant>`.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

import numpy as np
import pandas as pd
import yaml

from yolo_mlops import tracking
from yolo_mlops.tracking import names
from yolo_mlops.run import gpu_lock
from yolo_mlops.sweeps import stats, variants
from yolo_mlops.run.config import ConfigError, RunSpec, build_run_spec, deep_merge
from yolo_mlops.run.environment import resolve_device
from yolo_mlops.profiling.step_timer import StepTimes

Order = Literal["interleaved", "blocked"]
T = names.TAG_PREFIX

LOSS_PARTS = ("train/box_loss", "train/cls_loss", "train/dfl_loss")


@dataclass(frozen=True)
class Child:
    position: int  # 0-based place in the execution order
    variant: str  # canonical expression
    repeat: int  # 1-based


@dataclass(frozen=True)
class SweepPlan:
    base: RunSpec
    device: str
    variants: list[str]  # canonical, baseline first, skipped ones included
    skipped: dict[str, str]  # variant -> reason
    children: list[Child]
    repeats: int
    order: str
    warmup_steps: int
    concurrency_limit: str | None
    custom_variants: dict[str, dict[str, Any]] = field(default_factory=dict)

    def child_spec(self, child: Child, parent_run_id: str) -> RunSpec:
        spec = variants.apply_variant(self.base, child.variant, self.custom_variants)
        return build_run_spec(deep_merge(spec.model_dump(mode="json"), {
            "run_kind": "variant", "parent_run_id": parent_run_id,
            "run_name": f"{child.variant} r{child.repeat}",
            "tags": {f"{T}sweep.repeat": str(child.repeat), f"{T}sweep.position": str(child.position)},
        }))


def plan_sweep(base: RunSpec, variant_exprs: list[str], repeats: int = 3, order: Order = "interleaved",
               warmup_steps: int = 1, concurrency_limit: str | None = None,
               custom_variants: dict[str, dict[str, Any]] | None = None) -> SweepPlan:
    """Validate everything a sweep can validate before it starts; raises ConfigError (one line)."""
    if repeats < 1:
        raise ConfigError("repeats must be >= 1")
    if warmup_steps < 0:
        raise ConfigError("warmup_steps must be >= 0")
    if order not in ("interleaved", "blocked"):
        raise ConfigError(f"order must be 'interleaved' or 'blocked', got {order!r}")
    custom = dict(custom_variants or {})
    clash = sorted(set(custom) & {variants.BASELINE})
    if clash:
        raise ConfigError(f"custom variant names may not shadow {clash}")
    device = resolve_device(base.device)
    names: list[str] = [variants.BASELINE]
    for expr in variant_exprs:
        name = variants.canonical(expr, custom)
        if name not in names:
            names.append(name)
    skipped: dict[str, str] = {}
    for name in names:
        reason = variants.skip_reason(name, device, custom)
        if reason:
            skipped[name] = reason
        else:
            variants.apply_variant(base, name, custom)  # invalid combinations fail here, before any run
    runnable = [n for n in names if n not in skipped]
    if order == "interleaved":
        pairs = [(n, r) for r in range(1, repeats + 1) for n in runnable]
    else:
        pairs = [(n, r) for n in runnable for r in range(1, repeats + 1)]
    children = [Child(i, n, r) for i, (n, r) in enumerate(pairs)]
    if concurrency_limit is None:
        concurrency_limit = gpu_lock.limit_name(device)
    return SweepPlan(base=base, device=device, variants=names, skipped=skipped, children=children,
                     repeats=repeats, order=order, warmup_steps=warmup_steps,
                     concurrency_limit=concurrency_limit, custom_variants=custom)


def parent_tags(plan: SweepPlan) -> dict[str, str]:
    return {f"{T}run_kind": "sweep", f"{T}variant": "sweep",
            f"{T}sweep.variants": ",".join(plan.variants), f"{T}sweep.order": plan.order,
            f"{T}sweep.repeats": str(plan.repeats), f"{T}sweep.device": plan.device,
            f"{T}sweep.concurrency_limit": plan.concurrency_limit or "none",
            **({f"{T}sweep.skipped": ",".join(plan.skipped)} if plan.skipped else {})}


def parent_params(plan: SweepPlan) -> dict[str, str]:
    params = {"sweep.variants": ",".join(plan.variants), "sweep.repeats": plan.repeats,
              "sweep.order": plan.order, "sweep.warmup_steps": plan.warmup_steps,
              "sweep.children": len(plan.children), "sweep.concurrency_limit": plan.concurrency_limit}
    params.update({f"base.{k}": v for k, v in plan.base.model_dump(mode="json").items()
                   if k not in ("tags", "variant", "run_kind", "parent_run_id")})
    if plan.custom_variants:
        params["sweep.custom_variants"] = plan.custom_variants
    return {k: "none" if v is None else str(v) for k, v in params.items()}


@contextlib.contextmanager
def disk_cache_guard(spec: RunSpec, dataset_yaml: Path | None) -> Iterator[None]:
    """ultralytics reads existing image .npy files in every cache mode: remove the ones a cache_disk child
    wrote, so children after it are not sped up by its cache. Files that existed before are kept."""
    if spec.train_args.get("cache") != "disk" or dataset_yaml is None:
        yield
        return
    root = dataset_root(dataset_yaml)
    before = set(root.rglob("*.npy"))
    try:
        yield
    finally:
        for path in set(root.rglob("*.npy")) - before:
            path.unlink(missing_ok=True)


def release_device_memory(device: str) -> None:
    """Children share one process: return the previous child's cached CUDA blocks to the driver, so the
    NVML memory figures and torch's peak-memory stats of this child describe this child only."""
    if device == "cpu":
        return
    import gc

    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    gc.collect()
    torch.cuda.empty_cache()
    for index in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(index)


def dataset_root(dataset_yaml: Path) -> Path:
    spec = yaml.safe_load(Path(dataset_yaml).read_text()) or {}
    root = Path(spec.get("path") or Path(dataset_yaml).parent)
    return root if root.is_absolute() else (Path(dataset_yaml).parent / root).resolve()


# outcome of each child -----------------------------------------------------------------------------------------

@dataclass
class ChildOutcome:
    child: Child
    status: str  # "ok" | "failed"
    run_id: str | None = None
    error: str | None = None
    flow_run_id: str | None = None
    wall_s: float = 0.0  # the subflow call, slot held (training + orchestration)
    acquire_s: float = 0.0  # waiting for / acquiring the concurrency slot
    started: float = 0.0
    ended: float = 0.0


@dataclass
class ChildRecord:
    """A child as MLflow holds it, with its steady steps (None when it failed or has none)."""

    outcome: ChildOutcome
    repeat: stats.Repeat | None
    problem: str | None  # why the child does not count (failed, no steady steps, variant not effective)


def child_runs(mlflow, parent_run_id: str) -> list:
    """All child runs of a sweep, by the parent tag (works for any store, any process)."""
    experiment = mlflow.get_run(parent_run_id).info.experiment_id
    return mlflow.search_runs([experiment], filter_string=f"tags.`{names.PARENT_RUN_TAG}` = '{parent_run_id}'",
                              max_results=5000)


def collect(mlflow, plan: SweepPlan, parent_run_id: str, outcomes: list[ChildOutcome]) -> list[ChildRecord]:
    runs = {(r.data.tags.get(f"{T}variant"), r.data.tags.get(f"{T}sweep.repeat")): r
            for r in child_runs(mlflow, parent_run_id)}
    records = []
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        for outcome in outcomes:
            run = runs.get((outcome.child.variant, str(outcome.child.repeat)))
            if run is not None:
                outcome.run_id = run.info.run_id
                if run.info.status != "FINISHED":
                    outcome.status = "failed"
                    outcome.error = outcome.error or run.data.tags.get(f"{T}error", run.info.status)
            if outcome.status != "ok" or run is None:
                records.append(ChildRecord(outcome, None, f"failed: {outcome.error or 'no MLflow run'}"))
                continue
            problem = ineffective(outcome.child.variant, run.data.tags, plan.custom_variants)
            repeat = None
            if problem is None:
                repeat, problem = _steady_steps(mlflow, run, plan.warmup_steps, Path(tmp))
            records.append(ChildRecord(outcome, repeat, problem))
    return records


def ineffective(expr: str, tags: dict[str, str], custom: dict[str, dict[str, Any]] | None = None) -> str | None:
    """A child that ran as something other than its variant (ultralytics' silent fallbacks) does not count."""
    names = {p.name for p in variants.parse(expr, custom)}
    if any(n == "compile" or n.startswith("compile_") for n in names) \
            and tags.get(f"{T}applied.compiled") == "False":
        return "not effective: ultralytics fell back to eager (torch.compile unavailable or failed)"
    if "channels_last" in names and tags.get(f"{T}applied.channels_last_effective") == "False":
        return "not effective: the model was not in channels_last memory format"
    return None


def _steady_steps(mlflow, run, warmup_steps: int, tmp: Path) -> tuple[stats.Repeat | None, str | None]:
    try:
        local = mlflow.download_artifacts(run.info.run_id, "analysis/step_times.csv", str(tmp / run.info.run_id))
    except Exception as exc:  # noqa: BLE001 - a child without step times cannot be compared, say why
        return None, f"no step times: {type(exc).__name__}: {exc}"
    steps = StepTimes.load_csv(Path(local))
    mask = steps.steady(warmup_steps)
    if not mask.any():
        return None, (f"no steady steps: {len(steps)} steps, {warmup_steps} discarded as warm-up, "
                      f"{int(steps.profiled.sum())} in the profiler window (raise max_steps)")
    metrics = dict(run.data.metrics)
    parts = [metrics[k] for k in LOSS_PARTS if k in metrics]
    if len(parts) == len(LOSS_PARTS):
        metrics["train/loss_total"] = float(sum(parts))
    return stats.Repeat(step_ms=steps.step_ms[mask], images=steps.images[mask], metrics=metrics), None


# comparison ------------------------------------------------------------------------------------------------------

@dataclass
class SweepReport:
    table: pd.DataFrame
    best: str
    best_evidence: str
    failed_children: int
    total_children: int
    markdown: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


def _gpu_metric(metrics: dict[str, float], kind: str) -> str | None:
    if kind == "util":
        for key in ("gpu/sm_util_pct_mean", "gpu/gpu_util_pct_mean"):
            if key in metrics:
                return key
        return next((k for k in sorted(metrics) if k.startswith("gpu/") and "util_pct" in k
                     and k.endswith("_mean")), None)
    for key in ("gpu/mem_used_gib_max", "gpu/torch_peak_mem_gib"):
        if key in metrics:
            return key
    return next((k for k in sorted(metrics) if k.startswith("gpu/") and "peak" in k and k.endswith("gib")), None)


def compare(plan: SweepPlan, records: list[ChildRecord], seed: int = stats.DEFAULT_SEED) -> SweepReport:
    groups: dict[str, list[ChildRecord]] = {n: [] for n in plan.variants}
    for rec in records:
        groups[rec.outcome.child.variant].append(rec)
    usable = {n: [r.repeat for r in recs if r.repeat is not None] for n, recs in groups.items()}
    base = usable.get(variants.BASELINE, [])
    rows = []
    for name in plan.variants:
        recs = groups[name]
        reps = usable[name]
        row: dict[str, Any] = {
            "variant": name, "status": "", "repeats_ok": len(reps),
            "repeats_failed": sum(r.outcome.status == "failed" for r in recs),
            "steps": sum(len(r.step_ms) for r in reps),
            "median_step_ms": math.nan, "images_per_s": math.nan, "speedup": math.nan,
            "ci_low": math.nan, "ci_high": math.nan, "step_time_ratio": math.nan, "verdict": "",
            "loss_delta": math.nan, "loss_flag": False, "map_delta": math.nan, "map_flag": False,
            "gpu_util_delta_pct": math.nan, "peak_mem_delta_gib": math.nan,
            "reason": "", "note": variants.notes(name, plan.custom_variants) if name not in plan.skipped else "",
        }
        problems = sorted({r.problem for r in recs if r.problem})
        if name in plan.skipped:
            row.update(status="skipped", reason=plan.skipped[name])
        elif not reps:
            row.update(status="failed", reason="; ".join(problems) or "no child finished")
        else:
            row["status"] = "ok" if not problems else "partial"
            row["reason"] = "; ".join(problems)
            summary = stats.summarise(reps)
            row.update(median_step_ms=summary.median_step_ms, images_per_s=summary.images_per_s)
            if name == variants.BASELINE:
                row.update(speedup=1.0, verdict="reference")
            elif base:
                cmp = stats.compare(base, reps, seed=seed)
                row.update(speedup=cmp.speedup, ci_low=cmp.ci_low, ci_high=cmp.ci_high,
                           step_time_ratio=cmp.step_time_ratio, verdict=cmp.verdict)
                _accuracy(row, base, reps)
                _gpu_deltas(row, base, reps)
            else:
                row["verdict"] = "no baseline to compare with"
        rows.append(row)
    table = pd.DataFrame(rows)
    best, evidence = pick_best(table, plan.repeats)
    failed = sum(1 for r in records if r.outcome.status == "failed")
    report = SweepReport(table=table, best=best, best_evidence=evidence, failed_children=failed,
                         total_children=len(records))
    report.metrics = sweep_metrics(table, failed, len(records))
    report.markdown = markdown(plan, report)
    return report


def _values(reps: list[stats.Repeat], key: str) -> list[float]:
    return [r.metrics[key] for r in reps if key in r.metrics]


def _accuracy(row: dict[str, Any], base: list[stats.Repeat], reps: list[stats.Repeat]) -> None:
    for metric, col in (("train/loss_total", "loss"), ("val/mAP50-95", "map")):
        check = stats.accuracy_check(metric, _values(base, metric), _values(reps, metric))
        if check is not None:
            row[f"{col}_delta"] = check.delta
            row[f"{col}_flag"] = check.flagged


def _gpu_deltas(row: dict[str, Any], base: list[stats.Repeat], reps: list[stats.Repeat]) -> None:
    for kind, col in (("util", "gpu_util_delta_pct"), ("mem", "peak_mem_delta_gib")):
        key = _gpu_metric(base[0].metrics, kind)
        if key is not None:
            delta = stats.median_delta(_values(base, key), _values(reps, key))
            if delta is not None:
                row[col] = delta


def pick_best(table: pd.DataFrame, repeats: int) -> tuple[str, str]:
    candidates = table[(table["verdict"] == stats.FASTER) & ~table["loss_flag"].astype(bool)
                       & ~table["map_flag"].astype(bool)]
    if candidates.empty:
        slower = ", ".join(table.loc[table["verdict"] == stats.SLOWER, "variant"]) or "none"
        return variants.BASELINE, ("no variant was measurably faster without changing accuracy "
                                   f"(measurably slower: {slower})")
    row = candidates.sort_values("speedup", ascending=False).iloc[0]
    return str(row["variant"]), (
        f"{row['variant']}: {row['speedup']:.3f}x images/s vs baseline "
        f"(95% CI {row['ci_low']:.3f}-{row['ci_high']:.3f}, {int(row['repeats_ok'])} repeats, "
        f"{row['images_per_s']:.1f} images/s, median step {row['median_step_ms']:.1f} ms); "
        "accuracy within the baseline spread")


def sweep_metrics(table: pd.DataFrame, failed: int, total: int) -> dict[str, float]:
    metrics: dict[str, float] = {"sweep/children_failed": float(failed), "sweep/children_total": float(total)}
    for row in table.to_dict("records"):
        suffix = variants.metric_suffix(row["variant"])
        for col, name in (("speedup", "speedup"), ("ci_low", "speedup_ci_low"), ("ci_high", "speedup_ci_high"),
                          ("images_per_s", "images_per_s"), ("median_step_ms", "step_time_ms_p50")):
            if not _missing(row[col]):
                metrics[f"sweep/{name}_{suffix}"] = float(row[col])
    return metrics


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value: Any, spec: str = ".3f") -> str:
    if _missing(value):
        return "-"
    return format(value, spec)


def markdown(plan: SweepPlan, report: SweepReport) -> str:
    records = report.table.to_dict("records")
    base_ok = next((r["repeats_ok"] for r in records if r["variant"] == variants.BASELINE), 0)
    methods = sorted({stats.method_label(base_ok, r["repeats_ok"]) for r in records if not _missing(r["ci_low"])})
    lines = [f"# Sweep: {len(plan.variants)} variants x {plan.repeats} repeats ({plan.order})", "",
             f"Model `{plan.base.model}`, imgsz {plan.base.imgsz}, batch {plan.base.batch}, "
             f"device `{plan.device}`, first {plan.warmup_steps} step(s) and the profiler window discarded.", "",
             f"**Best: `{report.best}`** - {report.best_evidence}", "",
             "| variant | status | repeats | images/s | median step ms | speed-up | 95% CI | verdict "
             "| loss delta | mAP delta | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in records:
        ci = f"{_fmt(row['ci_low'])}-{_fmt(row['ci_high'])}" if not _missing(row["ci_low"]) else "-"
        loss = _fmt(row["loss_delta"], "+.4f") + (" (outside baseline spread)" if row["loss_flag"] else "")
        mp = _fmt(row["map_delta"], "+.4f") + (" (outside baseline spread)" if row["map_flag"] else "")
        note = "; ".join(x for x in (row["reason"], row["note"]) if x)
        lines.append(f"| `{row['variant']}` | {row['status']} | {row['repeats_ok']} ok / {row['repeats_failed']} "
                     f"failed | {_fmt(row['images_per_s'], '.1f')} | {_fmt(row['median_step_ms'], '.1f')} | "
                     f"{_fmt(row['speedup'])} | {ci} | {row['verdict']} | {loss} | {mp} | {note} |")
    lines += ["", f"Children: {report.total_children}, failed: {report.failed_children}. "
              "Speed-up = median images/s of the variant's repeats / baseline's; CI: "
              f"{'; '.join(methods) or 'none computed'}, {stats.DEFAULT_RESAMPLES} resamples, seeded. "
              "Verdict 'faster'/'slower' only when the CI excludes 1.0."]
    return "\n".join(lines)


def chart(report: SweepReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report.table[report.table["speedup"].notna()]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(rows) + 2), 4))
    x = np.arange(len(rows))
    speed = rows["speedup"].to_numpy(float)
    low = np.nan_to_num(speed - rows["ci_low"].to_numpy(float), nan=0.0)
    high = np.nan_to_num(rows["ci_high"].to_numpy(float) - speed, nan=0.0)
    colors = ["#2e7d32" if v == stats.FASTER else "#c62828" if v == stats.SLOWER else "#9e9e9e"
              for v in rows["verdict"]]
    ax.bar(x, speed, color=colors, yerr=np.vstack([low, high]), capsize=4)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [v.replace("+", "+\n") for v in rows["variant"]], rotation=0, fontsize=8)
    ax.set_ylabel("speed-up vs baseline (images/s ratio)")
    ax.set_title("Sweep: speed-up with bootstrap 95% CI")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def log_report(mlflow, parent_run_id: str, plan: SweepPlan, report: SweepReport) -> None:
    tracking.log_values(mlflow, parent_run_id, metrics=report.metrics, tags={
        f"{T}sweep.best_variant": report.best,
        f"{T}sweep.best_evidence": report.best_evidence[:5000],
        f"{T}sweep.failed_children": str(report.failed_children),
    })
    tracking.log_table(mlflow, parent_run_id, report.table, "sweep/comparison.json")
    with tempfile.TemporaryDirectory(prefix="sweep-report-") as tmp:
        folder = Path(tmp)
        (folder / "comparison.md").write_text(report.markdown)
        report.table.to_csv(folder / "comparison.csv", index=False)
        chart(report, folder / "speedup.png")
        tracking.log_folder(mlflow, parent_run_id, folder, "sweep")


def prefect_table(report: SweepReport) -> list[dict[str, Any]]:
    """Rows for a Prefect table artifact (JSON-safe: NaN -> None)."""
    out = []
    for row in report.table.to_dict("records"):
        out.append({k: (None if _missing(v) else round(v, 4) if isinstance(v, float) else v)
                    for k, v in row.items()})
    return out


# optimize: diagnosis findings -> recommended variants -> did they hold? ---------------------------------------

@dataclass(frozen=True)
class Recommendations:
    variants: list[str]  # canonical expressions to sweep, in first-recommended order
    sources: dict[str, list[str]]  # variant -> rules of the findings that recommended it
    rejected: dict[str, str]  # recommended expression -> why it is not swept (unknown, conflicting, rejected)


def recommendations(findings: list[Any]) -> Recommendations:
    """Collect `recommended_variants` from diagnosis findings (dicts with rule, severity, title, evidence,
    recommended_variants). Entries that are not such dicts carry no recommendation and are ignored."""
    out: list[str] = []
    sources: dict[str, list[str]] = {}
    rejected: dict[str, str] = {}
    for finding in findings:
        if not isinstance(finding, dict):
            continue
        rule = str(finding.get("rule", "?"))
        for expr in finding.get("recommended_variants") or []:
            try:
                name = variants.canonical(str(expr))
            except ConfigError as exc:
                rejected[str(expr)] = str(exc)
                continue
            if name == variants.BASELINE:
                continue
            if name not in out:
                out.append(name)
            sources.setdefault(name, [])
            if rule not in sources[name]:
                sources[name].append(rule)
    return Recommendations(out, sources, rejected)


def recommendation_report(recs: Recommendations, table: list[dict[str, Any]] | None,
                          profile_run_id: str) -> tuple[list[dict[str, Any]], str]:
    """Which recommendations held (measurably faster) and by how much; rows + markdown."""
    by_variant = {row["variant"]: row for row in (table or [])}
    rows = []
    for name in recs.variants:
        row = by_variant.get(name, {})
        verdict = row.get("verdict") or row.get("status") or "not run"
        if row.get("status") == "skipped":
            held = "skipped"
        elif row.get("status") == "failed":
            held = "failed"
        elif verdict == stats.FASTER and not (row.get("loss_flag") or row.get("map_flag")):
            held = "held"
        elif verdict == stats.FASTER:
            held = "faster but accuracy changed"
        elif verdict in (stats.SLOWER, stats.SAME):
            held = "did not hold"
        else:
            held = verdict
        rows.append({"variant": name, "recommended_by": ",".join(recs.sources.get(name, [])), "outcome": held,
                     "speedup": row.get("speedup"), "ci_low": row.get("ci_low"), "ci_high": row.get("ci_high"),
                     "verdict": verdict, "reason": row.get("reason") or ""})
    for expr, why in recs.rejected.items():
        rows.append({"variant": expr, "recommended_by": "", "outcome": "not swept", "speedup": None,
                     "ci_low": None, "ci_high": None, "verdict": "", "reason": why})
    lines = [f"# Optimize: recommendations from profile run `{profile_run_id}`", ""]
    if not rows:
        lines.append("The diagnosis of the baseline run recommended no variants: nothing to sweep.")
    else:
        lines += ["| variant | recommended by | outcome | speed-up | 95% CI | note |", "|---|---|---|---|---|---|"]
        for r in rows:
            ci = f"{_fmt(r['ci_low'])}-{_fmt(r['ci_high'])}" if r["ci_low"] is not None else "-"
            lines.append(f"| `{r['variant']}` | {r['recommended_by'] or '-'} | {r['outcome']} | "
                         f"{_fmt(r['speedup'])} | {ci} | {r['reason']} |")
        held = [r for r in rows if r["outcome"] == "held"]
        lines += ["", f"{len(held)} of {len(recs.variants)} swept recommendations held"
                  + (": " + ", ".join(f"`{r['variant']}` {r['speedup']:.3f}x" for r in held) if held else ".")]
    return rows, "\n".join(lines)
