"""One compatibility module per outside library: every difference between its releases, every feature check and
every reach into its private parts lives here, nowhere else.

- `versions`: the ranges the package declares (its installed metadata) and the check of what is installed;
- `torch`: the profiler, the CUDA allocator's history, compiled modules;
- `ultralytics`: the trainer's private methods the project overrides, arguments older releases lack, patches;
- `mlflow`: search filters and environment variables older servers and clients lack;
- `prefect`: the temporary server's process, the process pool of a sweep's lanes;
- `prefect_client`: Prefect's public API as the library calls it (settings, limits, pools, deployment runs):
  with `prefect`, the only Prefect imports outside flows/;
- `nvml`: the GPM API older bindings lack.

Each module names the releases it was checked against; tests/compat tests every branch against fakes of the old
and the new shape, and tests/test_private_api.py fails when a private attribute of one of these libraries is
touched anywhere else. The modules import their library only inside functions, so importing one is free.
"""
