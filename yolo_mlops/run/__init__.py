"""One profiled run of a RunSpec (yolo_mlops.config), from its checks to its MLflow record:

- `preflight`: everything checkable before training and before an MLflow run exists.
- `pipeline`: the run's steps (prepare, train, analyze, track) as plain functions; `flows/` wraps each in a task.
- `training`: real ultralytics YOLO11 training with the step timer, profiler window and phase labels attached.
- `ddp`, `ddp_rank`: data-parallel training, one process per rank through torchrun, and one rank's entry point.
- `datasets`: the synthetic dataset, and the check of a user's dataset YAML.
- `environment`: versions, device, the code's git commit and the series identity of a run.
- `gpu_lock`: one GPU, one profiled run (Prefect global concurrency limits `gpu-<machine>-<index>`).
- `offline`: ultralytics without a network.
- `prefect_server`: the temporary Prefect server a command starts when none is configured.
"""
