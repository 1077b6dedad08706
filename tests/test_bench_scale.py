"""The scale benchmark's own parts: its folders, its count of images, its model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from PIL import Image

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_scale.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scale_under_test", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_folder_has_count_distinct_names_over_pool_pictures(
    bench: ModuleType, tmp_path: Path
) -> None:
    pool = bench.build_pool(tmp_path / "pool", 5)
    pixels = {Image.open(p).tobytes() for p in pool}
    assert len(pixels) == 5  # distinct pictures
    folder = bench.build_folder(tmp_path / "f", 1003, pool)
    files = sorted(p for p in folder.rglob("*.png"))
    assert len(files) == 1003
    assert len({p.stem for p in files}) == 1003  # distinct names, so distinct output folders
    assert sorted({p.parent.name for p in files}) == ["d000", "d001"]
    with Image.open(files[7]) as im:
        assert im.size == (bench.SIZE, bench.SIZE)
        assert im.tobytes() == Image.open(pool[7 % 5]).tobytes()
    # Complete folders are reused as they are; a different count rebuilds.
    files[0].unlink()
    assert bench.build_folder(tmp_path / "f", 1003, pool) == folder
    assert len(list(folder.rglob("*.png"))) == 1002
    bench.build_folder(tmp_path / "f", 10, pool)
    assert len(list(folder.rglob("*.png"))) == 10


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("stats.json", {"format": 2, "images": {"count": 7, "table": "stats.parquet"}}, 7),
        ("stats.json", {"images": {"a/x": {}, "a/y": {}}}, 2),
        ("manifest.json", {"images": [{"path": "x"}] * 3}, 3),
        ("top-images.json", {"images": 11}, 11),
        ("other.json", {"images": 1}, None),
    ],
)
def test_counted_images_reads_each_format(
    bench: ModuleType, tmp_path: Path, name: str, data: object, expected: int | None
) -> None:
    (tmp_path / name).write_text(json.dumps(data))
    assert bench.counted_images(tmp_path) == expected


def test_tiny_net_takes_the_benchmark_input(bench: ModuleType) -> None:
    import torch

    model = bench.tiny_net()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 8
    assert model(torch.zeros(2, 3, bench.SIZE, bench.SIZE)).shape == (2, 10)


def test_difference_tolerates_last_bits_only(bench: ModuleType) -> None:
    def stats(mean: float, n: int = 3) -> dict[str, object]:
        return {"run": {"layers": [{"mean": mean, "dead_indices": [2, 9]}]}, "n": n}

    assert bench._difference(stats(0.1234567), stats(0.1234568)) is None
    assert bench._difference(stats(0.1234567), stats(0.2)) == "/run/layers[0]/mean"
    assert bench._difference(stats(0.1234567), stats(0.1234567, 4)) == "/n"
