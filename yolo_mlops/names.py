"""Every MLflow name the project writes: tags, param prefixes, metric names and prefixes, artifact paths.

UI comparisons, sweeps and trend queries depend on these names, so they live in one place and
`docs/mlflow.md` (the naming contract) is checked against this module by a test. A name that must change
needs a migration or a reader of both names.
"""

from __future__ import annotations

# experiments ----------------------------------------------------------------------------------------------------
BENCHMARK_EXPERIMENT = "yolo-mlops-benchmark"  # the nightly benchmark's runs: trends, fleet and bisect read it
BISECT_EXPERIMENT = "yolo-mlops-bisect"  # a bisection's parent run and its profiled runs

# tags ---------------------------------------------------------------------------------------------------------
TAG_PREFIX = "yolo_mlops."
GIT_COMMIT_TAG = "mlflow.source.git.commit"  # set explicitly: MLflow would guess it from sys.argv[0]
PARENT_RUN_TAG = "mlflow.parentRunId"
# experiment tag: MLflow 3's UI opens an experiment without it in the GenAI view ("Evaluation runs")
EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND_TRAINING = "custom_model_development"  # the model-training view (runs, metrics, charts)
# MLflow 3.17's UI picks the view from its GenAI / Model training switch, which a link sets with this query
UI_TRAINING_VIEW_QUERY = "workflowType=machine_learning"

RUN_KIND = TAG_PREFIX + "run_kind"
VARIANT = TAG_PREFIX + "variant"
SERIES = TAG_PREFIX + "series"  # series key: workload + hardware, no software versions
SERIES_KEY = TAG_PREFIX + "series_key"  # older runs only (hash included versions); read, never written
DEVICE_TYPE = TAG_PREFIX + "device_type"
PROFILER_ACTIVITIES = TAG_PREFIX + "profiler_activities"
# where the profiler window lies against the epochs: inside one (moved later than asked when that was needed), or
# the steps that hold an epoch boundary when no placement fits the run (run/pipeline.place_window)
PROFILER_WINDOW = TAG_PREFIX + "profiler_window"
DATASET = TAG_PREFIX + "dataset"
APPLIED_PREFIX = TAG_PREFIX + "applied."  # + setting name: effective settings after ultralytics resolved them
ERROR = TAG_PREFIX + "error"
NVML_BACKEND = TAG_PREFIX + "nvml_backend"
NVML_REASON = TAG_PREFIX + "nvml_reason"
ANALYSIS_STATUS = TAG_PREFIX + "analysis_status"
ANALYSIS_ERROR = TAG_PREFIX + "analysis_error"
ANALYSIS_WARNINGS = TAG_PREFIX + "analysis_warnings"  # what the trace analysis left out, and why
CUDA_MEMORY_SNAPSHOT = TAG_PREFIX + "cuda_memory_snapshot"  # "recorded" or "skipped: <why>"
MEMORY_BY_HOLDER = TAG_PREFIX + "memory_by_holder"  # "recorded" or "skipped: <why>"
DATA_WARNINGS = TAG_PREFIX + "data_warnings"  # ultralytics' scan warnings when it skipped training images
TREND = TAG_PREFIX + "trend"
TREND_PREFIX = TAG_PREFIX + "trend."  # + metric short name
BENCHMARK_NIGHT = TAG_PREFIX + "benchmark.night"  # id of the benchmark flow run (one night) that made the run
TREND_CHANGE_RUN = TAG_PREFIX + "trend.change_run"  # benchmark runs: first run of the newest change point judged
TREND_EVIDENCE = TAG_PREFIX + "trend.evidence"  # benchmark runs: what their confirmation runs showed
BENCHMARK_CONFIRMATION = TAG_PREFIX + "benchmark.confirmation"  # confirmation runs: id of the night they re-measure
OPTIMIZE = TAG_PREFIX + "optimize"
OPTIMIZE_PROFILE_RUN_ID = TAG_PREFIX + "optimize.profile_run_id"
OPTIMIZE_RECOMMENDED = TAG_PREFIX + "optimize.recommended"
SWEEP_PREFIX = TAG_PREFIX + "sweep."  # + plan field (variants, order, repeats, device, ...)
SWEEP_REPEAT = SWEEP_PREFIX + "repeat"
SWEEP_POSITION = SWEEP_PREFIX + "position"
SWEEP_BLOCK = SWEEP_PREFIX + "block"  # child over lanes: its block (one repeat of every variant, on one lane)
SWEEP_LANE = SWEEP_PREFIX + "lane"  # child over lanes: the device ("0") or machine/device ("m1/0") it ran on
SWEEP_LANES = SWEEP_PREFIX + "lanes"  # parent over lanes: its lanes, comma-separated
SWEEP_ISOLATION = SWEEP_PREFIX + "isolation"  # parent over lanes: side-by-side | exclusive
SWEEP_POOL = SWEEP_PREFIX + "pool"  # parent: the Prefect work pool whose machines ran the children
SWEEP_CONCURRENCY_SLOTS = SWEEP_PREFIX + "concurrency_slots"
SWEEP_VARIANTS = SWEEP_PREFIX + "variants"  # parent: the plan's variants, baseline first, comma-separated
SWEEP_ORDER = SWEEP_PREFIX + "order"
SWEEP_REPEATS = SWEEP_PREFIX + "repeats"
SWEEP_DEVICE = SWEEP_PREFIX + "device"
SWEEP_CONCURRENCY_LIMIT = SWEEP_PREFIX + "concurrency_limit"
SWEEP_SKIPPED = SWEEP_PREFIX + "skipped"  # only when a variant was skipped (reasons in the comparison table)
SWEEP_BEST_VARIANT = SWEEP_PREFIX + "best_variant"
SWEEP_BEST_EVIDENCE = SWEEP_PREFIX + "best_evidence"
SWEEP_FAILED_CHILDREN = SWEEP_PREFIX + "failed_children"

TAG_MAX_CHARS = 5000  # MLflow's tag value limit is 8000; error texts are cut well below it

# tag values
ANALYSIS_OK, ANALYSIS_FAILED = "ok", "failed"

# params (prefixes) ------------------------------------------------------------------------------------------
TRAIN_PARAM = "train."
TORCH_PARAM = "train.torch."
PROFILER_PARAM = "profiler."
SAMPLER_PARAM = "sampler."
ENV_PARAM = "env."
ENV_MACHINE = "env.machine"  # YOLO_MLOPS_MACHINE or the host name; part of the series key
ENV_CPU_MHZ = "env.cpu_mhz"  # mean CPU clock when the run started (/proc/cpuinfo, else psutil); 'none' if unknown
SAMPLER_EFFECTIVE_INTERVAL = "sampler.effective_interval_ms"
SWEEP_PARAM = "sweep."  # sweep parent: variants, repeats, order, warmup_steps, children, concurrency_limit, ...
BASE_PARAM = "base."  # sweep parent: the base RunSpec's fields
DDP_PARAM = "ddp."  # data-parallel jobs: the DdpSettings fields, world_size, backend, gradient_bytes
DDP_WORLD_SIZE = DDP_PARAM + "world_size"
DDP_BACKEND_PARAM = DDP_PARAM + "backend_used"  # nccl | gloo: what the process group really ran
DDP_APPLIED_PREFIX = DDP_PARAM + "applied."  # + DistributedDataParallel argument the model was wrapped with

# metrics ----------------------------------------------------------------------------------------------------
PERF = "perf/"
GPU = "gpu/"
TRACE = "trace/"
TRAIN = "train/"
VAL = "val/"
SWEEP = "sweep/"
POWER_METRIC = "power/"  # benchmark runs: detection power of their series (min_detectable_shift_metric)
STEP_TIME_MS = "perf/step_time_ms"  # per-step history
DATA_WAIT_MS = "perf/data_wait_ms"  # per-step history
STEP_TIME_P50 = "perf/step_time_ms_p50"
STEP_TIME_P90 = "perf/step_time_ms_p90"
STEP_TIME_MEAN = "perf/step_time_ms_mean"
STEP_TIME_P50_PROFILED = "perf/step_time_ms_p50_profiled"  # median step time inside the profiler window
IMAGES_PER_S = "perf/images_per_s"
DATA_WAIT_PCT = "perf/data_wait_pct"
DATA_WAIT_P50 = "perf/data_wait_ms_p50"
STEPS_MEASURED = "perf/steps_measured"  # steady steps the perf/* summary is over
STEPS_TOTAL = "perf/steps_total"  # all steps run
PROFILER_EXPORT_S = "perf/profiler_export_s"
SLOWEST_RANK = "perf/slowest_rank"  # a data-parallel job: the rank whose median step time the perf/* headline is
FINDINGS_COUNT = "analysis/findings"
# trace/*: trace analysis of the last profiler cycle (means over ranks unless said otherwise)
TRACE_STEP_TIME_MEAN = "trace/step_time_ms_mean"
TRACE_STEP_TIME_MEDIAN = "trace/step_time_ms_median"
TRACE_STEP_TIME_MAX = "trace/step_time_ms_max"  # slowest profiled step of any rank
TRACE_PROFILED_STEPS = "trace/profiled_steps_count"  # fewest profiled steps of any rank
# profiled steps that held an epoch boundary (the work between two epochs falls in the step of the next one's first
# batch), most of any rank; 0 when the window lies inside an epoch
TRACE_EPOCH_BOUNDARY_STEPS = "trace/epoch_boundary_steps_count"
TRACE_STEP_TIME_SPREAD_MS = "trace/step_time_spread_ms"  # slowest minus fastest rank's step time
TRACE_STEP_TIME_SPREAD_PCT = "trace/step_time_spread_pct"
TRACE_GPU_IDLE = "trace/gpu_idle_pct"
TRACE_GPU_COMPUTE = "trace/gpu_compute_pct"
TRACE_GPU_NON_COMPUTE = "trace/gpu_non_compute_pct"
TRACE_GPU_KERNEL_TIME_MS = "trace/gpu_kernel_time_ms"
TRACE_GPU_COMMUNICATION = "trace/gpu_communication_pct"
TRACE_GPU_COMMUNICATION_EXPOSED = "trace/gpu_communication_exposed_pct"  # not overlapped by compute
TRACE_GPU_IDLE_HOST_WAIT = "trace/gpu_idle_host_wait_pct"  # share of GPU idle the host spent waiting
TRACE_GPU_REDUCED_PRECISION = "trace/gpu_reduced_precision_kernel_pct"
GPU_SM_UTIL_MEAN = "gpu/sm_util_pct_mean"  # GPM (Hopper+)
GPU_UTIL_MEAN = "gpu/gpu_util_pct_mean"  # older GPUs: NVML's coarse utilisation
GPU_MEM_USED_MAX = "gpu/mem_used_gib_max"
GPU_DRAM_BW_UTIL_MEAN = "gpu/dram_bw_util_pct_mean"  # GPM (Hopper+)
GPU_ENERGY = "gpu/energy_j"  # all watched GPUs over the training span
GPU_ENERGY_PER_IMAGE = "gpu/energy_per_image_j"
# what explains one machine being slower than its peers (the fleet view): NVML clocks, limits, link, heat
GPU_SM_CLOCK_MEAN = "gpu/sm_clock_mhz_mean"
GPU_SM_CLOCK_MIN = "gpu/sm_clock_mhz_min"
GPU_SM_CLOCK_MAX = "gpu/sm_clock_max_mhz"  # the GPU's maximum SM clock (nvmlDeviceGetMaxClockInfo)
GPU_POWER_MEAN = "gpu/power_w_mean"
GPU_POWER_LIMIT = "gpu/power_limit_w"  # lowest enforced power limit seen while training
GPU_TEMP_MAX = "gpu/temp_c_max"
GPU_PCIE_GEN = "gpu/pcie_gen"  # lowest current PCIe link generation seen while training
GPU_PCIE_WIDTH = "gpu/pcie_width"  # lowest current PCIe link width (lanes) seen while training
GPU_CLOCKS_EVENT_POWER = "gpu/clocks_event_power_pct"
GPU_CLOCKS_EVENT_THERMAL = "gpu/clocks_event_thermal_pct"
LOSS_PARTS = ("train/box_loss", "train/cls_loss", "train/dfl_loss")  # ultralytics' detection losses
VAL_MAP50_95 = "val/mAP50-95"
OPTIMIZE_METRIC = "optimize/"
SWEEP_CHILDREN_FAILED = "sweep/children_failed"
SWEEP_CHILDREN_TOTAL = "sweep/children_total"
TRAIN_IMAGES_USED = "data/train_images_used"  # images the train loader kept
TRAIN_IMAGES_SKIPPED = "data/train_images_skipped"  # dropped by ultralytics: corrupt image or label
MEMORY = "memory/"  # peak memory of the training device by holder (torch's memory profiler)
MEMORY_PEAK_TOTAL = "memory/peak_total_mib"
HEADLINE_PREFIXES = (PERF, TRACE, GPU, VAL, TRAIN)  # what a run summary shows
# op/*: the operators that make up most of a profiled step (analysis/operators.py), the series trends judge
OP_PREFIX = "op/"  # the MLflow UI shows them under a section of their own
OP_HOST_PREFIX = OP_PREFIX + "cpu/"  # + operator: its self CPU time, ms per profiled step (key_averages_self_cpu)
OP_DEVICE_PREFIX = OP_PREFIX + "device/"  # + operator or kernel: self device time, ms per profiled step (GPU runs)
OP_STEP_MS = OP_PREFIX + "step_ms"  # the profiled step (the ProfilerStep* row's time per call), ms
OP_FLOOR_MS = OP_PREFIX + "floor_ms"  # operators below it (ms per profiled step) were not logged by this run
METRIC_NAME_MAX = 250  # MLflow's limit on a metric name (MAX_ENTITY_KEY_LENGTH)

# artifacts --------------------------------------------------------------------------------------------------
# Every artifact constant is its path from the run's artifact root. A data-parallel job writes each rank's copy
# of a file of profiler/, analysis/ or nvml/ in that folder's rank<r>/ (`rank_path`); code that writes a file
# into a folder it was given takes the constant's `file_name`.
PROFILER_DIR = "profiler"  # Chrome traces (tensorboard_trace_handler names) and key_averages tables
NVML_DIR = "nvml"
ANALYSIS_DIR = "analysis"
ULTRALYTICS_DIR = "ultralytics"
RUN_FOLDERS = (PROFILER_DIR, NVML_DIR, ANALYSIS_DIR)  # uploaded as folders, in this layout
ENV_JSON = "env.json"
RUN_SPEC_YAML = "run_spec.yaml"
ULTRALYTICS_FILES = ("results.csv", "args.yaml")
STEP_TIMES_CSV = "analysis/step_times.csv"
METRICS_JSON = "analysis/metrics.json"
TRACE_ANALYSIS_JSON = "analysis/trace_analysis.json"
FINDINGS_JSON = "analysis/findings.json"
REPORT_MD = "analysis/report.md"
REPORT_HTML = "analysis/report.html"
NVML_TIMELINE_CSV = "nvml/nvml_timeline.csv"
NVML_TIMELINE_PNG = "nvml/nvml_timeline.png"
NVML_META_JSON = "nvml/nvml_meta.json"
# key_averages tables of PROFILER_DIR, each as <name>.txt (torch's text table) and <name>.json (MLflow table)
KEY_AVERAGES_SELF_DEVICE = "key_averages_self_device"
KEY_AVERAGES_SELF_CPU = "key_averages_self_cpu"
KEY_AVERAGES_MEMORY = "key_averages_memory"
KEY_AVERAGES_BY_SHAPE = "key_averages_by_shape"
KEY_AVERAGES_TABLES = (KEY_AVERAGES_SELF_DEVICE, KEY_AVERAGES_SELF_CPU, KEY_AVERAGES_MEMORY, KEY_AVERAGES_BY_SHAPE)
SWEEP_DIR = "sweep"
CUDA_MEMORY_SNAPSHOT_PICKLE = "profiler/cuda_memory_snapshot.pickle"  # PyTorch memory visualiser input
# gzipped JSON [times, sizes by holder]; not *.json.gz, so the profiler folder stays a trace folder
MEMORY_TIMELINE_GZ = "profiler/memory_timeline.gz"
SWEEP_COMPARISON_TABLE = "sweep/comparison.json"
SWEEP_COMPARISON_MD = "sweep/comparison.md"
SWEEP_COMPARISON_CSV = "sweep/comparison.csv"
SWEEP_SPEEDUP_PNG = "sweep/speedup.png"
SWEEP_RECOMMENDATIONS_MD = "sweep/recommendations.md"
TRENDS_DIR = "trends"
TRENDS_PLOT_PNG = "trends/series.png"  # benchmark runs: their series' history, segments, change points
TRENDS_REPORT_MD = "trends/report.md"  # benchmark runs: the series' change points, what changed, attribution
COMPARE_TABLE = "compare/diff.json"  # run B of `yolo-mlops compare A B`: per-step operator/kernel/phase diff


# data-parallel jobs: collectives and cross-rank waits (trace analysis of every rank's last profiler cycle)
# the job's value is the largest of any rank (rank<r>/comm/* holds each rank's)
COMM_COLLECTIVE_PCT = "comm/collective_pct"  # collective time, % of step time
COMM_EXPOSED_PCT = "comm/exposed_pct"  # collective time not overlapped with the rank's compute, % of step time
COMM_WAIT_PCT = "comm/wait_pct"  # time waiting inside collectives for the other ranks, % of step time
# gradient all-reduces (DDP's buckets, issued in the backward phase) per optimizer step
COMM_CALLS_PER_OPTIMIZER_STEP = "comm/calls_per_optimizer_step"
COMM_CALLS_PER_STEP = "comm/calls_per_step"  # collectives per profiled step, every kind
COMM_OTHER_CALLS_PER_STEP = "comm/other_calls_per_step"  # collectives that are not gradient all-reduces, per step
# input-message MiB of the step's collectives (record_param_comms: elements x dtype size), every collective
COMM_MESSAGE_MIB_PER_STEP = "comm/message_mib_per_step"
COMM_WAIT_SPREAD_PCT = "comm/wait_spread_pct"  # most minus least waiting rank over steady steps, % of the mean step
# the straggler, judged step by step (analysis/stragglers.judge_steps; logged only when there is one): its rank,
# its median lead over the steady steps (how much longer the others waited for it, per step) and the share of
# steady steps in which the others waited for it
COMM_WAITED_FOR_RANK = "comm/waited_for_rank"
COMM_STRAGGLER_LEAD_MS = "comm/straggler_lead_ms"
COMM_STRAGGLER_STEPS_PCT = "comm/straggler_steps_pct"
# steps of the window the others waited for one rank once (and boundary steps so held), reported apart from a
# straggler: how many, and the longest such wait
COMM_STALLS = "comm/stalls"
COMM_STALL_LEAD_MS_MAX = "comm/stall_lead_ms_max"
COMM_GRADIENT_MIB = "comm/gradient_mib"  # what one synchronised backward all-reduces: every gradient once
# comm/gradient_mib x the window's steps that all-reduced / its optimizer steps (rank 0's; every rank's is the same)
COMM_ALLREDUCE_MIB_PER_OPTIMIZER_STEP = "comm/allreduce_mib_per_optimizer_step"


def rank_folder(rank: int) -> str:
    """`rank<r>`: a data-parallel job's folder of one rank under profiler/, analysis/ and nvml/."""
    return f"rank{rank}"


def rank_path(path: str, rank: int) -> str:
    """One rank's copy of a file of profiler/, analysis/ or nvml/: `analysis/rank1/step_times.csv`."""
    folder, _, name = path.rpartition("/")
    return f"{folder}/{rank_folder(rank)}/{name}"


def file_name(path: str) -> str:
    """The file name of an artifact path, for code that writes into a folder it was given."""
    return path.rpartition("/")[2]


def rank_metric(rank: int, metric: str) -> str:
    """`rank<r>/<metric>`: one rank's value of a job metric (`rank1/perf/step_time_ms_p50`); the MLflow UI
    groups each rank's metrics under its own section."""
    return f"{rank_folder(rank)}/{metric}"


def trend_metric_tag(metric: str) -> str:
    """`yolo_mlops.trend.<short>`: on benchmark runs, the night's verdict for one watched metric `<group>/<short>`;
    `yolo_mlops.trend.op/<kind>/<operator>` for an operator series (written only when it is not `stable`)."""
    return TREND_PREFIX + (metric if metric.startswith(OP_PREFIX) else metric.split("/", 1)[1])


def operator_metric(kind: str, operator: str) -> str:
    """`op/cpu/<operator>` (kind "operator": self CPU time) or `op/device/<operator>` (kind "device": self device
    time), ms per profiled step. MLflow takes letters, digits, `_ - . / :` and spaces in a name, so every other
    character becomes `_` (`enumerate(DataLoader)#...` reads `enumerate_DataLoader__...`), a path part `.` or
    `..` becomes `_`, and a name longer than MLflow's limit keeps its start and gains a hash of the whole name
    (device kernels' template names). Two names that differ only in such characters share one metric."""
    prefix = OP_DEVICE_PREFIX if kind == "device" else OP_HOST_PREFIX
    allowed = "_-.: /"  # besides ASCII letters and digits, what MLflow takes in a metric name
    clean = "".join(c if (c.isascii() and c.isalnum()) or c in allowed else "_" for c in operator)
    parts = [("_" if p in (".", "..") else p) for p in clean.split("/") if p]
    name = "/".join(parts).strip() or "_"
    room = METRIC_NAME_MAX - len(prefix)
    if len(name) > room:
        name = name[: room - 17].rstrip("/ ") + "_" + _fnv1a(operator)
    return prefix + name


def _fnv1a(text: str) -> str:
    """A stable 64-bit FNV-1a hash of the text, 16 hex digits (names.py imports nothing, hashlib included)."""
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def operator_of_metric(metric: str) -> tuple[str, str] | None:
    """(kind, operator as the metric names it) of an `op/cpu/...` or `op/device/...` metric; None for others."""
    for kind, prefix in (("operator", OP_HOST_PREFIX), ("device", OP_DEVICE_PREFIX)):
        if metric.startswith(prefix):
            return kind, metric[len(prefix) :]
    return None


def min_detectable_shift_metric(metric: str) -> str:
    """`power/min_detectable_shift_pct_<short>`: on benchmark runs, the smallest step (% of the level) in the
    watched metric `<group>/<short>` that the change-point detector finds within one night with probability
    `power` (0.9), given the series' recent noise and the night's repeats."""
    return f"{POWER_METRIC}min_detectable_shift_pct_{metric.split('/', 1)[-1]}"


def gpu_idle_cause_metric(cause: str) -> str:
    """`trace/gpu_idle_<cause>_pct`: GPU idle attributed to one host cause, % of the GPU's kernel-time span."""
    return f"{TRACE}gpu_idle_{cause}_pct"


def clocks_event_metric(reason: str) -> str:
    """`gpu/clocks_event_<reason>_pct`: % of the training time NVML reported that clock-event reason
    (`sw_power_cap`, `hw_slowdown`, `sw_thermal_slowdown`, ...); logged only for reasons seen."""
    return f"{GPU}clocks_event_{reason}_pct"


def memory_peak_metric(holder: str) -> str:
    """`memory/peak_<holder>_mib`: bytes one holder (parameter, gradient, ...) kept at the peak, in MiB."""
    return f"{MEMORY}peak_{holder}_mib"


def gpu_metric(column: str, statistic: str = "") -> str:
    """`gpu/<column>_<statistic>`: one statistic (`mean`, `p95`, `max`, `min`, `mean_profiled`,
    `mean_unprofiled`) of an NVML timeline column over the training span; without a statistic
    `gpu/<column>`: the per-step history, or the single value of a limit or capacity column
    (`power_limit_w`, `pcie_gen`, `mem_total_gib`, ...)."""
    return f"{GPU}{column}_{statistic}" if statistic else f"{GPU}{column}"


def trace_host_metric(category: str) -> str:
    """`trace/host_<category>_pct`: share of the step the host spent in one category (data loader, a
    training phase, optimizer, cuda_sync); `<category>` is already a metric token (no `/`)."""
    return f"{TRACE}host_{category}_pct"


def trace_memory_metric(device: str, statistic: str) -> str:
    """`trace/<device>_memory_<statistic>`: the profiler's memory events on `gpu` or `cpu`:
    `peak_allocated_gib`, `peak_reserved_gib`, `growth_mib_per_step`."""
    return f"{TRACE}{device}_memory_{statistic}"


def train_metric(name: str) -> str:
    """`train/<name>`: one of ultralytics' training losses (`box_loss`, ...), per step."""
    return f"{TRAIN}{name}"


def val_metric(name: str) -> str:
    """`val/<name>`: one of ultralytics' validation metrics (`mAP50-95`, `precision`, `box_loss`, ...)."""
    return f"{VAL}{name}"


def profiler_table(name: str) -> str:
    """Artifact path of a key_averages table logged as an MLflow table."""
    return f"{PROFILER_DIR}/{name}.json"


def profiler_file(name: str) -> str:
    return f"{PROFILER_DIR}/{name}"


def optimize_saving_metrics(variant_suffix: str) -> dict[str, str]:
    """Optimize's sweep parent, per swept recommendation: the diagnosis' estimated saving and the saving the
    sweep measured, both in % of step time, so estimates can be judged over time."""
    return {
        "estimated": f"{OPTIMIZE_METRIC}{variant_suffix}_saving_pct_estimated",
        "measured": f"{OPTIMIZE_METRIC}{variant_suffix}_saving_pct_measured",
    }


def sweep_variant_metrics(variant_suffix: str) -> dict[str, str]:
    """Per-variant metrics of a sweep parent, keyed by the comparison column they hold: `sweep/speedup_<v>`,
    `sweep/speedup_ci_low_<v>`, `sweep/speedup_ci_high_<v>`, `sweep/images_per_s_<v>`,
    `sweep/step_time_ms_p50_<v>` (`<v>`: the variant's metric suffix, `+` written `__`)."""
    return {
        "speedup": f"{SWEEP}speedup_{variant_suffix}",
        "ci_low": f"{SWEEP}speedup_ci_low_{variant_suffix}",
        "ci_high": f"{SWEEP}speedup_ci_high_{variant_suffix}",
        "images_per_s": f"{SWEEP}images_per_s_{variant_suffix}",
        "median_step_ms": f"{SWEEP}step_time_ms_p50_{variant_suffix}",
    }


# bisect (yolo-mlops bisect, flows/bisection.py): a parent run per bisection, a child per profiled run ----------
RUN_KIND_BISECT = "bisect"  # run_kind of a bisection's parent run
RUN_KIND_BISECT_RUN = "bisect_run"  # run_kind of its profiled runs
BISECT_PREFIX = TAG_PREFIX + "bisect."
BISECT_GOOD = BISECT_PREFIX + "good"  # parent: the good commit (40 hex)
BISECT_BAD = BISECT_PREFIX + "bad"  # parent: the bad commit
BISECT_RESULT = BISECT_PREFIX + "result"  # parent: first_bad | no_regression | inconclusive
BISECT_FIRST_BAD = BISECT_PREFIX + "first_bad"  # parent: the first bad commit, when found
BISECT_RANGE = BISECT_PREFIX + "range"  # parent: last known good..first known bad commit
BISECT_STEPS = BISECT_PREFIX + "steps"  # parent: steps taken, the premise (step 0) included
BISECT_WORKLOAD_RUN = BISECT_PREFIX + "workload_run"  # parent: the run whose RunSpec every child ran
BISECT_REPO = BISECT_PREFIX + "repo"  # parent: the repository the commits came from
BISECT_COMMIT = BISECT_PREFIX + "commit"  # child: the commit whose code ran
BISECT_STEP = BISECT_PREFIX + "step"  # child: its step (0 = premise: bad vs good)
BISECT_ROLE = BISECT_PREFIX + "role"  # child: candidate | good
BISECT_PARAM = "bisect."  # parent params: repeats, max_repeats, alpha, min_effect, metric, commits
BISECT_SHIFT_PCT = "bisect/shift_pct"  # the metric's change from good to the first bad commit, %
BISECT_SHIFT_CI_LOW = "bisect/shift_pct_ci_low"  # its 95% confidence interval
BISECT_SHIFT_CI_HIGH = "bisect/shift_pct_ci_high"
BISECT_RUNS_METRIC = "bisect/runs"  # profiled runs made
BISECT_STEPS_METRIC = "bisect/steps"
BISECT_REPORT_MD = "bisect/report.md"  # parent: the report the command prints
