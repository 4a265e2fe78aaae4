"""One profiled run: its config (RunSpec), input checks, the pipeline steps, the ultralytics trainer with
its instrumentation, datasets, environment fingerprint, offline setup and the GPU concurrency lock."""
