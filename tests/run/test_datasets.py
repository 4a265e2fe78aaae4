import hashlib
from pathlib import Path

import pytest
import yaml

from yolo_mlops.errors import ConfigError
from yolo_mlops.run.datasets import inspect_dataset, synthetic_dataset


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in {".png", ".txt"}):
        h.update(path.relative_to(folder).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def test_synthetic_dataset_is_deterministic_and_valid(tmp_path: Path):
    a = synthetic_dataset(tmp_path / "a", train_images=8, image_size=64, seed=3)
    b = synthetic_dataset(tmp_path / "b", train_images=8, image_size=64, seed=3)
    assert _digest(a.yaml_path.parent) == _digest(b.yaml_path.parent)
    info = inspect_dataset(a.yaml_path)
    assert (info.train_images, info.val_images) == (8, 4)
    assert info.class_names == ("circle", "rectangle", "triangle")
    for label in (a.yaml_path.parent / "labels" / "train").glob("*.txt"):
        for row in label.read_text().split("\n"):
            if row:
                cls, *box = row.split()
                assert int(cls) in (0, 1, 2)
                assert all(0.0 < float(v) <= 1.0 for v in box)
    other_seed = synthetic_dataset(tmp_path / "a", train_images=8, image_size=64, seed=4)
    assert other_seed.yaml_path != a.yaml_path


def test_dataset_yaml_errors_name_the_problem(tmp_path: Path):
    with pytest.raises(ConfigError, match="dataset YAML not found"):
        inspect_dataset(tmp_path / "missing.yaml")
    data = tmp_path / "data.yaml"
    data.write_text(
        yaml.safe_dump({"path": str(tmp_path), "train": "images/train", "val": "images/val", "names": {0: "a"}})
    )
    with pytest.raises(ConfigError, match="train path does not exist"):
        inspect_dataset(data)
    (tmp_path / "images" / "train").mkdir(parents=True)
    (tmp_path / "images" / "val").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no images found for train"):
        inspect_dataset(data)
    data.write_text(yaml.safe_dump({"train": "images/train"}))
    with pytest.raises(ConfigError, match="lacks"):
        inspect_dataset(data)


def test_concurrent_builders_share_one_complete_dataset(tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        infos = list(pool.map(lambda _: synthetic_dataset(tmp_path, train_images=8, image_size=64), range(4)))
    assert len({info.yaml_path for info in infos}) == 1
    assert inspect_dataset(infos[0].yaml_path).train_images == 8
    assert [p.name for p in tmp_path.iterdir()] == [infos[0].yaml_path.parent.name]  # no staging left behind
