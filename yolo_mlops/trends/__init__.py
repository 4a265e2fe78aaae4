"""Long-term performance history: series, change points, what changed, and which operators moved.

- `history`: every FINISHED run as a typed record, grouped by series (the `yolo_mlops.series` tag, or
  the identity rebuilt from the params of runs logged before it).
- `changepoint`: change-point detection over one metric (E-divisive means + Student's t).
- `trend`: per series and watched metric: segments, change points, what changed, the nightly verdict.
- `attribution`: per-step operator / kernel / phase deltas between the runs on each side of a change.
- `trend_report`: text tables and the picture.
- `fleet`: one workload on several machines and the machines slower than their peers beyond noise, with the
  figures that explain them (`fleet_stats`: the test; `fleet_evidence`: NVML and host figures; `fleet_moved`:
  phases and operators; `fleet_render`: Markdown, JSON and the picture).
- `drift`: slow drifts (Mann-Kendall, Theil-Sen) kept apart from steps.
- `candidates`: every version boundary tested directly (Welch's t, no search penalty).
- `confirm`: confirmation runs tested against the level before a new regression.
- `power`: the smallest step the detector finds within one night (minimum detectable shift).
- `nightly`: one night of the benchmark suite judged, logged on its runs, and its artifact.
- `commit_range`: the commit range of a regression, for `yolo-mlops bisect`.
- `bounds`: the shared rule for p-value bounds and smallest effects of the commands.
"""
