"""Engines: the local engine never needs Ray; the Ray engine writes what the local one writes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from actviz.cli import app
from tests.conftest import run_images, same_up_to_batching, write_photos
from tests.oracles import read_table_rows

runner = CliRunner()


def _folder(root: Path, count: int) -> Path:
    sizes = [(48 + i % 5, 40) for i in range(count)]
    return write_photos(root, sizes, name=lambda i: f"set{i % 3}/img{i:02d}.png")


def _close(a: Any, b: Any, path: str = "") -> None:
    """Equal JSON documents, floats within float32 tolerance."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, set(a) ^ set(b))
        for key in a:
            _close(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_without_the_extra_the_ray_engine_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    folder = _folder(tmp_path / "in", 2)
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["stats", "resnet18", str(folder), "-w", "none", "-o", str(out), "--engine", "ray"]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "error: --engine ray needs Ray, which is not installed: pip install 'actviz[ray]'"
    ]
    assert not out.exists()


def test_ray_address_without_the_ray_engine_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["stats", "resnet18", str(tmp_path), "--ray-address", "auto", "-o", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--ray-address needs --engine ray" in result.stderr


def test_the_local_engine_never_imports_ray(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "in", 2)
    code = (
        "import sys, actviz\n"
        f"actviz.run('resnet18', [{str(folder)!r}], out={str(tmp_path / 'out')!r},"
        " weights='none', layers='layer4', grids=False, report=False)\n"
        "print('ray' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.ray
@pytest.mark.slow
def test_ray_stats_equal_the_local_engines(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    folder = _folder(tmp_path / "in", 40)
    (folder / "set1" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    common = ["stats", "resnet18", str(folder), "-w", "none", "-l", "conv,fc", "-b", "6"]
    local = runner.invoke(app, [*common, "-o", str(tmp_path / "local")])
    ray = runner.invoke(
        app, [*common, "-o", str(tmp_path / "ray"), "--engine", "ray", "--workers", "2"]
    )
    # One unreadable image: named, skipped, exit 3, by both engines alike.
    assert local.exit_code == ray.exit_code == 3, (local.output, ray.output)
    assert "broken.png" in ray.stderr and "Traceback" not in ray.output
    stats = [json.loads((tmp_path / n / "stats.json").read_text()) for n in ("local", "ray")]
    assert stats[0]["images"]["count"] == 40 and stats[0]["run"]["layers"]
    # Ray's actors run their own thread counts: a value near zero may round to the other sign,
    # so counted fractions may differ by one element (as between batch sizes).
    assert same_up_to_batching(stats[0], stats[1])
    # Every image's statistics, as the table holds them (rows in whatever order they finished).
    tables = [
        {(r["image"], r["layer"]): r for r in read_table_rows(tmp_path / n / "stats.parquet")}
        for n in ("local", "ray")
    ]
    assert len({image for image, _ in tables[0]}) == 40
    assert same_up_to_batching(tables[0], tables[1])
    manifests = [json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("local", "ray")]
    for key in ("layers", "selector", "weights"):
        assert manifests[0][key] == manifests[1][key]
    images = [{i["path"]: i for i in run_images(tmp_path / n)} for n in ("local", "ray")]
    assert images[0].keys() == images[1].keys()
    failed = [p for p, i in images[1].items() if i["status"] == "failed"]
    assert [Path(p).name for p in failed] == ["broken.png"]
    for path, image in images[0].items():
        _close(image["predictions"], images[1][path]["predictions"])
        assert image["size"] == images[1][path]["size"]
    assert manifests[1]["options"]["engine"] == "ray"


@pytest.mark.ray
@pytest.mark.slow
def test_ray_top_images_equal_the_local_engines(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    folder = _folder(tmp_path / "in", 40)
    (folder / "set2" / "broken.png").write_bytes(b"not an image")
    common = ["top-images", "resnet18", str(folder), "-w", "none", "-l", "layer4", "-k", "4"]
    # The same batches (a convolution's last bit may depend on the batch size), merged in
    # whatever order the two actors return them.
    local = runner.invoke(app, [*common, "-b", "6", "-o", str(tmp_path / "local"), "--no-report"])
    ray = runner.invoke(
        app,
        [*common, "-b", "6", "-o", str(tmp_path / "ray"), "--no-report"]
        + ["--engine", "ray", "--workers", "2"],
    )
    assert local.exit_code == ray.exit_code == 3, (local.output, ray.output)
    assert "broken.png" in ray.stderr
    docs = [json.loads((tmp_path / n / "top-images.json").read_text()) for n in ("local", "ray")]
    assert docs[0]["layers"] and docs[0]["layers"] == docs[1]["layers"]  # identical, not close
    top = docs[0]["layers"][0]["channels"][0]["top"]
    assert len(top) == 4 and [e["score"] for e in top] == sorted(
        (e["score"] for e in top), reverse=True
    )
    sheets = [sorted((tmp_path / n / "top-images").rglob("*.png")) for n in ("local", "ray")]
    assert len(sheets[0]) == len(sheets[1]) > 512
    assert sheets[0][0].read_bytes() == sheets[1][0].read_bytes()  # the same crops, pixel for pixel
