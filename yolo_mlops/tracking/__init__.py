"""MLflow tracking, the only package that calls the MLflow client:

    names       every tag, param, metric and artifact name (the naming contract of docs/mlflow.md)
    connection  the tracking URI, the client, whether the store can be used and the server still answers
    writes      experiments, runs, batched params/metrics/tags, artifact uploads
    run_end     how a run ends (FINISHED, FAILED, KILLED) and the reason that travels with its exception
    queries     run lookups, sweep children, paginated searches, artifacts read back, MLflow UI links
    upload      a run folder as the record of its run, and `yolo-mlops upload` to send it later

Importing the package or `names` does not import MLflow; `connection` and `run_end` import it only inside the
functions that call it.
"""

from __future__ import annotations

from yolo_mlops.tracking import names

__all__ = ["names"]
