"""MLflow tracking: `names` (every tag, param, metric and artifact name, the naming contract of
docs/mlflow.md) and `store` (the only module that calls the MLflow client).

`tracking.<function>` forwards to `store` lazily, so importing the names does not import MLflow.
"""

from __future__ import annotations

import importlib
from typing import Any

from yolo_mlops.tracking import names


def __getattr__(attr: str) -> Any:
    store = importlib.import_module("yolo_mlops.tracking.store")
    try:
        return getattr(store, attr)
    except AttributeError:
        raise AttributeError(f"module 'yolo_mlops.tracking' has no attribute {attr!r}") from None


__all__ = ["names"]
