"""Real ultralytics YOLO11 training with the step timer, torch.profiler window and phase labels attached.

`train(plan)` is the only entry point. Ultralytics' loop calls our callbacks at batch start/end; a trainer
subclass adds `record_function` labels around preprocessing and the optimizer step, and forward hooks on
the model label forward+loss and backward. Outside the profiler window the labels are skipped entirely and the
hooks are off the model.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from yolo_mlops import names
from yolo_mlops.compat import torch as torch_compat
from yolo_mlops.compat import ultralytics as ultralytics_compat
from yolo_mlops.config import AppliedSettings, DdpSettings, RunSpec, TorchSettings, device_list
from yolo_mlops.labels import CHECKPOINT_LABEL, EPOCH_END_LABEL, VALIDATION_LABEL
from yolo_mlops.nvml import NullNvmlBackend, NvmlSampler, Timeline, make_backend
from yolo_mlops.profiling.cuda_memory import CudaMemorySnapshot
from yolo_mlops.profiling.memory_holders import MemoryByHolder
from yolo_mlops.profiling.step_timer import StepTimer, StepTimes
from yolo_mlops.profiling.torch_profiler import KeyAveragesTable, TrainingProfiler, cuda_profiling_possible, phase
from yolo_mlops.run.datasets import ImageCounts, loader_image_counts
from yolo_mlops.run.environment import cuda_indices


@dataclass(frozen=True)
class TrainingPlan:
    spec: RunSpec
    data_yaml: Path
    device: str
    output_dir: Path  # per-run scratch folder: traces, tables, ultralytics' save_dir
    steps_expected: int
    epochs: int | None = None  # resolved by preflight (config.resolve_steps); None: spec.epochs, else 1
    rank: int | None = None  # a data-parallel job's rank this process trains as; None: a single-process run

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    @property
    def own_device(self) -> str:
        """The device this process trains on: its rank's GPU of a multi-GPU job, else the plan's device."""
        devices = device_list(self.device)
        if self.rank is None or devices == ["cpu"] or len(devices) < 2:
            return self.device
        return devices[self.rank % len(devices)]

    def rank_path(self, folder: str) -> Path:
        """`output_dir/<folder>`, and a rank's own subfolder of it in a data-parallel job."""
        path = self.output_dir / folder
        return path if self.rank is None else path / names.rank_folder(self.rank)


@dataclass
class TrainingOutcome:
    steps: StepTimes
    step_losses: dict[str, list[float]]  # metric name -> one value per step
    val_metrics: dict[str, float]
    trace_files: list[Path]
    tables: list[KeyAveragesTable]
    profiler_export_s: float
    nvml: Timeline  # empty (backend "none") without a GPU: nothing is logged as if measured
    applied: AppliedSettings
    memory_snapshot: str = ""  # CudaMemorySnapshot.status: "recorded" or "skipped: <why>"
    memory_by_holder_status: str = ""  # MemoryByHolderRecorder.status: "recorded" or "skipped: <why>"
    memory_by_holder: MemoryByHolder | None = None  # peak memory split by holder, when recorded
    train_images: ImageCounts | None = None  # images the train loader kept / skipped
    rank: int | None = None  # the data-parallel rank that trained (None: a single-process run)
    gradient_bytes: int | None = None  # bytes of the gradients DDP all-reduces on every synchronised backward
    ddp_applied: dict[str, Any] | None = None  # the DistributedDataParallel arguments the model was wrapped with
    ranks: list[TrainingOutcome] = field(default_factory=list)  # a data-parallel job: every rank's own outcome
    slowest_rank: int | None = None  # a data-parallel job: the rank whose step times `steps` holds


class _Instrumentation:
    """State shared by the callbacks and hooks of one training run.

    Everything a step outside the profiler window does here is timing and bookkeeping that cannot wait: three
    clock reads, the step's row, a reference to its losses. The forward hooks are on the model only while labels
    are on (the window's steps), torch's profiler is no longer stepped once its schedule has ended, and what can
    be derived later (the losses' names, their values as floats) is derived once, after training."""

    def __init__(self, profiler: TrainingProfiler, max_steps: int | None, pin_memory: bool | None) -> None:
        self.profiler = profiler
        self.timer = StepTimer()
        self.max_steps = max_steps
        self.pin_memory = pin_memory  # train-loader pin_memory override (None = ultralytics' choice)
        # each step's losses as ultralytics returned them (detached device tensors: no sync per step), turned into
        # step_losses when asked for
        self._loss_rows: list[dict[str, Any]] = []
        # True: ultralytics' dicts hold detached tensors and are kept as they come; False: each row is detached on
        # arrival (_loss_dict); None: no dict seen yet
        self._loss_rows_detached: bool | None = None
        self._open: list[Any] = []  # currently open phase labels (innermost last)
        self._labels = False  # labels on for the current step
        self._in_step = False
        self._model: Any = None  # the model the forward hooks go on while labels are on
        self._hooks: tuple[Any, ...] = ()  # their handles while registered
        self.effective: dict[str, bool] = {}  # what the trainer really built (compiled? channels_last?)
        self.snapshot: CudaMemorySnapshot | None = None  # follows the profiler window
        self.train_images: ImageCounts | None = None
        self.steps_csv: Path | None = None  # where step times are appended between epochs and at the end
        self.gradient_bytes: int | None = None

    @property
    def step_losses(self) -> dict[str, list[Any]]:
        """Metric name (`train/<loss>`) -> one value per step that had losses (detached tensors)."""
        out: dict[str, list[Any]] = {}
        metric_names: dict[str, str] = {}
        for row in self._loss_rows:
            for name, value in row.items():
                metric = metric_names.get(name)
                if metric is None:
                    metric = metric_names[name] = names.train_metric(name)
                out.setdefault(metric, []).append(value)
        return out

    # phase labels -------------------------------------------------------------------------------------------
    def open(self, name: str) -> None:
        if self._labels:
            label = phase(name)
            label.__enter__()
            self._open.append(label)

    def label(self, name: str) -> contextlib.AbstractContextManager:
        """A phase label around one piece of work (validation, a checkpoint) while labels are on; else nothing."""
        return phase(name) if self._labels else contextlib.nullcontext()

    def close_all(self) -> None:
        while self._open:
            self._open.pop().__exit__(None, None, None)

    def _set_labels(self, on: bool) -> None:
        """Labels on or off for the steps to come; the forward hooks that label them are on the model only while on
        (a module with hooks takes nn.Module's slower call path)."""
        self._labels = on
        if on and not self._hooks and self._model is not None:
            self._hooks = (
                self._model.register_forward_pre_hook(self._forward_start),
                self._model.register_forward_hook(self._forward_end),
            )
        elif not on and self._hooks:
            for handle in self._hooks:
                handle.remove()
            self._hooks = ()

    # ultralytics callbacks ------------------------------------------------------------------------------------
    def on_train_start(self, trainer) -> None:
        model = trainer.model
        self.effective = _effective_model_settings(model)
        self.gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        self.train_images = loader_image_counts(trainer.train_loader.dataset)
        self._model = model
        self.profiler.__enter__()
        if self.snapshot is not None:
            self.snapshot.follow(self.profiler.recording)

    def on_train_epoch_start(self, trainer) -> None:
        self.close_all()
        self.timer.iteration_start()
        self._set_labels(self.profiler.recording)
        self.open("data_wait")

    def on_train_batch_start(self, trainer) -> None:
        if self._open:
            self.close_all()  # ends data_wait
        self.timer.batch_start()
        self._in_step = True

    def on_train_batch_end(self, trainer) -> None:
        if self._open:
            self.close_all()  # ends backward (or optimizer_step when it ran last)
        self._in_step = False
        timer = self.timer
        labels = self._labels
        timer.batch_end(labels, trainer.last_batch_images or trainer.batch_size)
        items = trainer.loss_items
        if items is not None:
            self._keep_losses(trainer, items)
        profiler = self.profiler
        profiler.step()
        recording = profiler.recording
        if recording != labels:
            self._set_labels(recording)
        snapshot = self.snapshot
        if snapshot is not None:
            snapshot.follow(recording)
        if self.max_steps is not None and timer.steps >= self.max_steps:
            trainer.stop = True  # ultralytics checks this right after the callback and ends training cleanly
        timer.iteration_start()  # after profiler.step(): trace export time is not training time
        if recording:
            self.open("data_wait")

    def _keep_losses(self, trainer, items) -> None:
        """This step's losses, kept as detached tensors: float() here would add a device sync to every step.
        ultralytics hands them over as a dict of detached tensors, kept as they are; any other shape (older
        releases: a tensor beside `loss_names`), or values that still need detaching, as `_loss_dict` makes them."""
        if type(items) is dict:
            detached = self._loss_rows_detached
            if detached is None:
                detached = self._loss_rows_detached = all(
                    isinstance(v, torch.Tensor) and not v.requires_grad for v in items.values()
                )
            if detached:
                self._loss_rows.append(items.copy())  # the dict, not its tensors: as the views detach() made
                return
        self._loss_rows.append(_loss_dict(trainer))

    def on_train_epoch_end(self, trainer) -> None:
        self.close_all()  # the data_wait opened after the epoch's last step would otherwise span validation
        # the work up to the next epoch's start (EMA, validation, the checkpoint, DDP's stop broadcast) falls in the
        # profiler step of the next epoch's first batch: labelled so the analysis sees that step held a boundary
        self.open(EPOCH_END_LABEL)
        if self.steps_csv is not None:  # step times so far survive a kill (SIGKILL, OOM) of a later epoch
            self.timer.flush_csv(self.steps_csv)

    def on_train_end(self, trainer) -> None:
        self.close_all()
        self._set_labels(False)
        self.profiler.__exit__(None, None, None)

    # forward hooks on the model while labels are on: forward+loss, then backward until the step ends ------------
    def _forward_start(self, module, args) -> None:
        if self._in_step:
            self.close_all()
            self.open("forward_loss")

    def _forward_end(self, module, args, output) -> None:
        if self._in_step:
            self.close_all()
            self.open("backward")


def _effective_model_settings(model) -> dict[str, bool]:
    """What the trainer really built: ultralytics falls back to eager silently when torch.compile fails,
    and applies channels_last only on CUDA, so the requested args alone do not say what ran."""
    first = next((p for p in model.parameters() if p.dim() == 4), None)
    return {
        "compiled": torch_compat.is_compiled(model),
        "channels_last_effective": bool(
            first is not None and first.is_contiguous(memory_format=torch.channels_last) and not first.is_contiguous()
        ),
    }


def _loss_dict(trainer) -> dict[str, Any]:
    """This step's losses by ultralytics' loss name, as detached tensors (any shape of `loss_items`)."""
    items = trainer.loss_items
    pairs = (
        items.items()
        if isinstance(items, dict)
        else zip(trainer.loss_names or [f"loss{i}" for i in range(len(items))], items, strict=False)
    )
    return {name: v.detach() if isinstance(v, torch.Tensor) else v for name, v in pairs}


def _make_trainer_class():
    base: Any = ultralytics_compat.trainer_base()

    class ProfiledDetectionTrainer(base):
        """DetectionTrainer with phase labels around preprocessing and the optimizer step, the job's DDP switches,
        and `val: false` as no validation pass at all."""

        instrumentation: _Instrumentation
        model: Any  # ultralytics' model, wrapped in DistributedDataParallel on a data-parallel rank
        ddp_settings: DdpSettings | None = None  # set on a data-parallel rank
        ddp_applied: dict[str, Any] | None = None
        last_batch_images = 0  # images in the batch preprocessed last
        micro_batches = 0  # micro-batches since the last optimizer step (no_sync accumulation)

        def join_cpu_process_group(self) -> bool:
            if self.args.device != "cpu":
                return False  # ultralytics' own: the rank's GPU, NCCL
            # CPU ranks, the gloo twin of a GPU job: ultralytics' DDP path is CUDA-only (a CPU device counts as
            # world size 0), so the process group is joined here and the rest of its path runs unchanged
            self.device = torch.device("cpu")
            _join_process_group("gloo", self.world_size)
            return True

        def setup_train(self, original):
            if self.ddp_settings is None:
                return original()
            return _setup_ddp_train(self, self.ddp_settings, original)

        def preprocess_batch(self, batch):
            inst = self.instrumentation
            self.last_batch_images = int(batch["img"].shape[0])
            if self.ddp_settings is not None and self.ddp_settings.no_sync_accumulation:
                _sync_on_last_micro_batch(self)
            inst.open("preprocess")  # host-to-device copy, normalisation
            try:
                return super().preprocess_batch(batch)
            finally:
                inst.close_all()

        def get_dataloader(self, dataset_path, batch_size=16, rank=0, mode="train"):
            pin = self.instrumentation.pin_memory
            if pin is None or mode != "train":
                return super().get_dataloader(dataset_path, batch_size, rank, mode)
            with ultralytics_compat.train_loader_pin_memory(pin):
                return super().get_dataloader(dataset_path, batch_size, rank, mode)

        # `val: false` is no validation pass at all: ultralytics' own val=False still validates after the last epoch
        # (a max_steps stop included) and best.pt once more, val/* numbers the run was asked not to measure; it
        # takes a None fitness as "no validation" (its EarlyStopping says so).
        def validate(self):
            if self.args.val:
                with self.instrumentation.label(VALIDATION_LABEL):
                    return super().validate()
            return {}, None

        def save_model(self):
            with self.instrumentation.label(CHECKPOINT_LABEL):
                return super().save_model()

        def final_eval(self):
            from ultralytics.utils import RANK

            # ultralytics validates best.pt on a rank's CUDA device; CPU ranks keep the last epoch's validation
            if self.args.val and not (RANK != -1 and self.args.device == "cpu"):
                return super().final_eval()
            if RANK in {-1, 0}:  # rank 0 owns the checkpoints
                _strip_checkpoints(self.last, self.best)
            return None

        def optimizer_step(self):
            inst = self.instrumentation
            inst.close_all()  # ends backward
            inst.open("optimizer_step")
            self.micro_batches = 0
            try:
                super().optimizer_step()
            finally:
                inst.close_all()

    return ProfiledDetectionTrainer


def _setup_ddp_train(trainer: Any, settings: DdpSettings, original: Callable[[], Any]) -> Any:
    """ultralytics' train setup on a data-parallel rank, its model wrapped in DDP with the job's switches; a job of
    one rank joins its process group and wraps the model here (ultralytics does both only above one rank)."""
    if trainer.world_size == 1:
        _join_process_group("nccl" if trainer.device.type == "cuda" else "gloo", 1)
    wrap = _ddp_wrapper(trainer, settings)
    with ultralytics_compat.ddp_wrap(wrap):
        result = original()
    if trainer.world_size == 1:
        import torch.nn.parallel as parallel

        index = trainer.device.index if trainer.device.type == "cuda" else None
        trainer.model = wrap(
            parallel.DistributedDataParallel,
            trainer.model,
            None if index is None else [index],
            find_unused_parameters=not bool(trainer.args.compile),
        )
    return result


def _sync_on_last_micro_batch(trainer: Any) -> None:
    """no_sync accumulation: ultralytics steps the optimizer once `accumulate` micro-batches have run; only that
    one's backward needs the all-reduce (what DDP's no_sync() context sets, for the forward that follows)."""
    trainer.micro_batches += 1
    wrapped: Any = trainer.model  # the DDP wrapper by now; ultralytics annotates the attribute as a path
    wrapped.require_backward_grad_sync = trainer.micro_batches >= trainer.accumulate


def _strip_checkpoints(last: Path, best: Path) -> None:
    """The checkpoints as ultralytics' final evaluation leaves them: without the optimizer state."""
    from ultralytics.utils.torch_utils import strip_optimizer

    results = strip_optimizer(last) if last.exists() else {}
    if best.exists():
        strip_optimizer(best, updates={"train_results": results.get("train_results")})


DDP_TIMEOUT_S = 600  # a collective waiting longer than this for a rank fails the job (torchrun also stops it)


def _join_process_group(backend: str, world_size: int) -> None:
    import os
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group(
        backend=backend, timeout=timedelta(seconds=DDP_TIMEOUT_S), rank=int(os.environ["RANK"]), world_size=world_size
    )


def _ddp_wrapper(trainer, settings: DdpSettings):
    """How the model is wrapped in DistributedDataParallel: with the job's DDP switches (and no device_ids on CPU,
    which DDP refuses for CPU modules); what was passed is kept on the trainer."""

    def wrap(ddp_class, module, device_ids=None, **kwargs):
        if trainer.device.type == "cpu":
            device_ids = None
        # the keyword ultralytics passed, else the one this torch's DDP takes
        buffers_key = next(
            (k for k in ("forward_sync_buffers", "broadcast_buffers") if k in kwargs),
            torch_compat.ddp_buffers_keyword(),
        )
        chosen = {
            "bucket_cap_mb": settings.bucket_cap_mb,
            "gradient_as_bucket_view": settings.gradient_as_bucket_view,
            "static_graph": settings.static_graph,
            buffers_key: settings.broadcast_buffers,
        }
        kwargs.update({k: v for k, v in chosen.items() if v is not None})
        trainer.ddp_applied = dict(kwargs)
        return ddp_class(module, device_ids=device_ids, **kwargs)

    return wrap


def ultralytics_args(plan: TrainingPlan) -> dict[str, Any]:
    spec = plan.spec
    args = {
        "model": spec.model,
        "data": str(plan.data_yaml),
        "imgsz": spec.imgsz,
        "batch": spec.batch,
        "epochs": plan.epochs or spec.epochs or 1,
        "device": plan.device,
        "workers": spec.workers,
        "seed": spec.seed,
        "val": spec.val,
        "project": str(plan.output_dir),  # absolute: ultralytics otherwise nests it under its runs dir
        "name": "ultralytics",
        "exist_ok": True,
        "plots": False,
        "verbose": False,
    }
    if plan.device == "cpu":
        args["amp"] = False  # AMP is GPU-only; saying so keeps the recorded params honest
    args.update(spec.train_args)
    return args


def _torch_flags() -> dict[str, bool]:
    return {
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
    }


def _restore_torch_flags(flags: dict[str, bool]) -> None:
    """These switches are process-global: a sweep runs many variants in one process, so each run puts
    them back as it found them (otherwise a cudnn_benchmark child would leak into the next baseline)."""
    torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    torch.backends.cuda.matmul.allow_tf32 = flags["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = flags["cudnn_tf32"]


def _apply_torch_settings(settings: TorchSettings) -> None:
    # pin_memory is not a torch switch: the trainer subclass passes it to its train loader (get_dataloader)
    if settings.cudnn_benchmark is not None:
        torch.backends.cudnn.benchmark = settings.cudnn_benchmark
    if settings.tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = settings.tf32
        torch.backends.cudnn.allow_tf32 = settings.tf32


def train(plan: TrainingPlan) -> TrainingOutcome:
    """Run ultralytics training with instrumentation; traces and tables land in `plan.output_dir`."""
    flags_before = _torch_flags()
    _apply_torch_settings(plan.spec.torch)
    applied_flags = _torch_flags()
    device = plan.own_device
    profiler = TrainingProfiler(
        plan.spec.profiler, plan.rank_path(names.PROFILER_DIR), with_cuda=cuda_profiling_possible(device), device=device
    )
    inst = _Instrumentation(profiler, plan.spec.max_steps, plan.spec.torch.pin_memory)
    inst.steps_csv = plan.rank_path(names.ANALYSIS_DIR) / names.file_name(names.STEP_TIMES_CSV)
    inst.steps_csv.parent.mkdir(parents=True, exist_ok=True)
    trainer = _make_trainer_class()(overrides=ultralytics_args(plan))
    trainer.instrumentation = inst
    if plan.rank is not None:
        trainer.ddp_settings = plan.spec.ddp
        trainer.world_size = plan.world_size  # CPU ranks: ultralytics counts a CPU device as world size 0
    inst.snapshot = CudaMemorySnapshot(profiler.trace_dir, device)  # beside the traces: uploaded with them
    for event in (
        "on_train_start",
        "on_train_epoch_start",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_train_epoch_end",
        "on_train_end",
    ):
        trainer.add_callback(event, getattr(inst, event))
    sampler = NvmlSampler(_nvml_backend(plan), interval_s=plan.spec.nvml.interval_ms / 1000)
    try:
        # the sampler: a background thread that never raises into training; ultralytics' AMP check downloads
        # weights, and the run decides AMP itself (variants)
        with sampler, ultralytics_compat.amp_check_skipped():
            trainer.train()
    except BaseException:
        try:  # a failure or a signal must not lose the steps timed so far; the original error is the news
            inst.timer.flush_csv(inst.steps_csv)
        except Exception:
            pass
        raise
    else:
        inst.timer.flush_csv(inst.steps_csv)
    finally:
        inst.close_all()
        inst.snapshot.close()
        profiler.__exit__(None, None, None)  # idempotent: a crash mid-window still flushes what was recorded
        _restore_torch_flags(flags_before)
    steps = inst.timer.result()
    return TrainingOutcome(
        steps=steps,
        step_losses={name: [float(v) for v in values] for name, values in inst.step_losses.items()},
        val_metrics=_val_metrics(trainer.metrics or {}),
        trace_files=profiler.trace_files(),
        tables=profiler.tables(),
        profiler_export_s=profiler.export_s,
        nvml=sampler.timeline(),
        applied=AppliedSettings(
            **applied_flags,
            amp=trainer.args.amp,
            channels_last=trainer.args.channels_last,
            compile=trainer.args.compile,
            compiled=inst.effective.get("compiled", False),
            channels_last_effective=inst.effective.get("channels_last_effective", False),
            pin_memory=plan.spec.torch.pin_memory,
        ),
        memory_snapshot=inst.snapshot.status or "skipped: the profiler window never opened",
        memory_by_holder_status=profiler.memory.status or "skipped: no profiler cycle completed",
        memory_by_holder=profiler.memory.result,
        train_images=inst.train_images,
        rank=plan.rank,
        gradient_bytes=inst.gradient_bytes,
        ddp_applied=trainer.ddp_applied,
    )


def _nvml_backend(plan: TrainingPlan):
    """The NVML backend for the GPUs this run trains on (the null backend, with its reason, on CPU)."""
    settings = plan.spec.nvml
    if plan.device == "cpu" and settings.backend == "auto":
        return NullNvmlBackend("training on CPU: no GPU to sample")
    # a data-parallel rank samples its own GPU only; its peers sample theirs
    return make_backend(settings.backend, settings.devices or cuda_indices(plan.own_device) or None)[0]


def _val_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """ultralytics' 'metrics/mAP50-95(B)' -> 'val/mAP50-95'; keeps val losses as 'val/box_loss'."""
    out = {}
    for key, value in metrics.items():
        name = key.split("/", 1)[-1]
        name = re.sub(r"\(B\)$", "", name)
        name = re.sub(r"[^A-Za-z0-9_.\-/ ]", "_", name)
        try:
            out[names.val_metric(name)] = float(value)
        except (TypeError, ValueError):
            continue
    return out
