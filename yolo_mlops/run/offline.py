"""Make ultralytics run with no network: call `configure_ultralytics()` before anything imports ultralytics.

Ultralytics reaches the internet from several places: the online check, the Arial font download used by
its plotting, weight downloads, settings sync/telemetry, and its logger integrations (its MLflow callback
would open a second MLflow run next to ours). Everything here is idempotent.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Integrations ultralytics turns on when their package is importable; the pipeline owns tracking.
_LOGGER_SETTINGS = (
    "mlflow",
    "wandb",
    "clearml",
    "comet",
    "dvc",
    "neptune",
    "raytune",
    "tensorboard",
    "hub",
    "vscode_msg",
    "openvino_msg",
)


def configure_ultralytics(home: Path) -> Path:
    """Point ultralytics at an isolated, offline config dir under `home`; return its settings dir."""
    os.environ.setdefault("YOLO_CONFIG_DIR", str(home / "ultralytics"))
    os.environ["YOLO_OFFLINE"] = "1"
    from ultralytics.utils import USER_CONFIG_DIR  # import reads YOLO_CONFIG_DIR once, so set it first

    # Ultralytics checks for these fonts even with plots off and downloads them when missing.
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        font = Path(USER_CONFIG_DIR) / name
        if not font.exists():
            font.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_bundled_ttf(), font)
    _disable_integrations(home)
    return Path(USER_CONFIG_DIR)


def _disable_integrations(home: Path) -> None:
    from ultralytics.utils import SETTINGS

    wanted = {
        "sync": False,
        **{name: False for name in _LOGGER_SETTINGS},
        # its defaults are relative to the current directory; keep its files in the data home
        "datasets_dir": str(home / "datasets"),
        "weights_dir": str(home / "weights"),
        "runs_dir": str(home / "runs"),
    }
    # settings differ between ultralytics releases: only touch the keys this one knows
    changes = {k: v for k, v in wanted.items() if k in SETTINGS and SETTINGS[k] != v}
    if changes:
        SETTINGS.update(changes)


def _bundled_ttf() -> Path:
    """A TTF font that ships with matplotlib (a dependency), so no font needs downloading."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
