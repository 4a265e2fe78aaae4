"""Datasets: the deterministic synthetic demo dataset, and checking a user's ultralytics dataset YAML.

The synthetic dataset lets the demo, the tests and CPU CI train real YOLO11 with no download: images
with drawn shapes (circle, rectangle, triangle) and their exact boxes as YOLO txt labels.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from yolo_mlops.config import yaml_error_line
from yolo_mlops.errors import ConfigError

SHAPES = ("circle", "rectangle", "triangle")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
_SYNTHETIC_VERSION = 1  # bump when the generator changes, so cached datasets are rebuilt


@dataclass(frozen=True)
class DatasetInfo:
    yaml_path: Path
    train_images: int
    val_images: int
    class_names: tuple[str, ...]
    synthetic: bool


@dataclass(frozen=True)
class ImageCounts:
    """What ultralytics made of a split: it drops a corrupt image, or one whose label is broken (a class index
    beyond `nc`, bad coordinates), with a warning, and trains on the rest."""

    found: int  # images ultralytics scanned
    used: int  # images it kept
    messages: tuple[str, ...] = ()  # its scan warnings, one per dropped (or repaired) image

    @property
    def skipped(self) -> int:
        return self.found - self.used


def loader_image_counts(dataset) -> ImageCounts | None:
    """Counts of an ultralytics YOLODataset after it was built (its label scan done); None for other datasets."""
    label_files, labels = getattr(dataset, "label_files", None), getattr(dataset, "labels", None)
    if label_files is None or labels is None:
        return None
    messages: tuple[str, ...] = ()
    # the scan's warnings live only in ultralytics' label cache (labels/<split>.cache), when it could write one
    cache = Path(label_files[0]).parent.with_suffix(".cache") if label_files else None
    if cache is not None and cache.is_file():
        from ultralytics.data.utils import load_dataset_cache_file

        try:
            messages = tuple(
                re.sub(r"\x1b\[[0-9;]*m", "", str(m))  # without ultralytics' colour codes
                for m in load_dataset_cache_file(cache).get("msgs", ())
            )
        except Exception:  # an unreadable cache costs the reasons, never the counts
            messages = ()
    return ImageCounts(found=len(label_files), used=len(labels), messages=messages)


def synthetic_dataset(
    root: Path, train_images: int = 64, val_images: int | None = None, image_size: int = 160, seed: int = 0
) -> DatasetInfo:
    """Build (or reuse) the synthetic dataset under `root`; same arguments give byte-identical files."""
    val_images = val_images if val_images is not None else max(4, train_images // 4)
    key = json.dumps([_SYNTHETIC_VERSION, train_images, val_images, image_size, seed])
    folder = root / f"synthetic-{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    yaml_path = folder / "data.yaml"
    if not (folder / ".complete").exists():
        # Build beside the final folder and rename it into place: concurrent builders (parallel sweeps,
        # test workers) never see a half-written dataset, and a crash leaves only a stray temp folder.
        staging = folder.with_name(f"{folder.name}.building-{uuid.uuid4().hex[:8]}")
        rng = random.Random(seed)
        for split, count in (("train", train_images), ("val", val_images)):
            _write_split(staging, split, count, image_size, rng)
        (staging / "data.yaml").write_text(
            yaml.safe_dump(
                {
                    "path": str(folder),
                    "train": "images/train",
                    "val": "images/val",
                    "names": dict(enumerate(SHAPES)),
                },
                sort_keys=False,
            )
        )
        (staging / ".complete").touch()
        try:
            staging.rename(folder)
        except OSError:  # another process finished first: its dataset is byte-identical to ours
            shutil.rmtree(staging, ignore_errors=True)
    return DatasetInfo(yaml_path, train_images, val_images, SHAPES, synthetic=True)


def _write_split(folder: Path, split: str, count: int, size: int, rng: random.Random) -> None:
    from PIL import Image, ImageDraw

    images, labels = folder / "images" / split, folder / "labels" / split
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        background = tuple(rng.randrange(0, 90) for _ in range(3))
        image = Image.new("RGB", (size, size), background)
        draw = ImageDraw.Draw(image)
        rows = []
        for _ in range(rng.randint(1, 3)):
            cls = rng.randrange(len(SHAPES))
            w, h = rng.randint(size // 8, size // 3), rng.randint(size // 8, size // 3)
            x0, y0 = rng.randint(0, size - w), rng.randint(0, size - h)
            box = (x0, y0, x0 + w, y0 + h)
            colour = tuple(rng.randrange(140, 256) for _ in range(3))
            if SHAPES[cls] == "circle":
                draw.ellipse(box, fill=colour)
            elif SHAPES[cls] == "rectangle":
                draw.rectangle(box, fill=colour)
            else:
                draw.polygon([(x0, y0 + h), (x0 + w / 2, y0), (x0 + w, y0 + h)], fill=colour)
            rows.append(f"{cls} {(x0 + w / 2) / size:.6f} {(y0 + h / 2) / size:.6f} {w / size:.6f} {h / size:.6f}")
        image.save(images / f"{index:05d}.png")
        (labels / f"{index:05d}.txt").write_text("\n".join(rows) + "\n")


def inspect_dataset(yaml_path: Path) -> DatasetInfo:
    """Check an ultralytics detection dataset YAML the way ultralytics will read it, without downloading.

    Raises ConfigError naming the missing piece, so bad input fails before any training or MLflow run.
    """
    yaml_path = Path(yaml_path)
    if not yaml_path.is_file():
        raise ConfigError(f"dataset YAML not found: {yaml_path}")
    try:
        spec = yaml.safe_load(yaml_path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"dataset YAML {yaml_path} is not valid YAML: {yaml_error_line(exc)}") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"dataset YAML {yaml_path} must be a mapping with train/val/names")
    missing = [key for key in ("train", "val") if not spec.get(key)]
    if missing or not (spec.get("names") or spec.get("nc")):
        raise ConfigError(f"dataset YAML {yaml_path} lacks {missing or ['names']}")
    root = Path(spec.get("path") or yaml_path.parent)
    if not root.is_absolute():
        # ultralytics resolves a relative `path` against the YAML's folder first (our users' common case)
        root = (yaml_path.parent / root).resolve()
    counts = {split: _count_images(root, spec[split], yaml_path, split) for split in ("train", "val")}
    names = spec.get("names") or {i: str(i) for i in range(int(spec["nc"]))}
    names = tuple(names.values()) if isinstance(names, dict) else tuple(names)
    return DatasetInfo(yaml_path.resolve(), counts["train"], counts["val"], names, synthetic=False)


def _count_images(root: Path, entry: str | list[str], yaml_path: Path, split: str) -> int:
    total = 0
    for item in entry if isinstance(entry, list) else [entry]:
        path = Path(item) if Path(item).is_absolute() else root / item
        if path.is_dir():
            total += sum(1 for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.is_file() and path.suffix == ".txt":
            total += sum(1 for line in path.read_text().splitlines() if line.strip())
        else:
            raise ConfigError(f"dataset YAML {yaml_path}: {split} path does not exist: {path}")
    if total == 0:
        raise ConfigError(f"dataset YAML {yaml_path}: no images found for {split} under {root}")
    return total
