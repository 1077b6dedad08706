"""Commands sharing one output folder: each writes under names of its own, and
``--overwrite`` removes only that command's files."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import actviz
from actviz.output import image_dirs

from .conftest import make_image


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3, padding=1))


def _digests(out: Path, files: list[str]) -> dict[str, str]:
    return {f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in files}


def test_run_then_diff_then_run_in_one_folder_keep_each_others_files(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    for i in range(2):
        make_image(photos / f"p{i}.png", size=(32, 32), seed=i)
    out = tmp_path / "out"
    model = _net()
    other = copy.deepcopy(model)
    with torch.no_grad():
        other[2].weight.mul_(0.5)
    common = {"input_size": (32, 32), "device": "cpu", "layers": "Conv2d"}
    run = actviz.run(model, [photos], out=out, **common)
    grids = [layer.file for image in run.images for layer in image.layers if layer.file]
    assert len(grids) == 4
    run_files = [*grids, "manifest.json", "stats.json"]
    before = _digests(out, run_files)

    result = actviz.diff(model, [photos], against_model=other, out=out, overwrite=True, **common)
    pictures = [p.file for p in result.pictures]
    assert len(pictures) == 4 and all(p.startswith("diff/") for p in pictures)
    assert not set(pictures) & set(grids)
    # The run's grids and records are byte-identical; its report still shows its own grids.
    assert _digests(out, run_files) == before
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "diff.html" in page  # and now links the diff
    pages = "".join(
        (out / "report" / "images" / f"{stem}.html").read_text(encoding="utf-8")
        for stem in ("p0", "p1")
    )
    assert all(f'src="../../{grid}"' in pages for grid in grids)
    assert not any(p in pages for p in pictures)

    diff_files = [*pictures, "diff.json", "similarity.png", "diff.html"]
    diff_before = _digests(out, diff_files)
    again = actviz.run(model, [photos], out=out, overwrite=True, **common)
    assert [r.status for r in again.images] == ["ok", "ok"]
    assert _digests(out, diff_files) == diff_before
    assert _digests(out, grids) == {g: before[g] for g in grids}

    # A second diff with --overwrite replaces its own pictures only.
    actviz.diff(model, [photos], against_model=other, out=out, overwrite=True, **common)
    assert _digests(out, grids) == {g: before[g] for g in grids}
    record = json.loads((out / "diff.json").read_text(encoding="utf-8"))
    assert sorted(p["file"] for p in record["pictures"]) == sorted(pictures)


def test_image_folders_never_take_a_command_folder_name() -> None:
    from pathlib import PurePosixPath as P

    dirs = image_dirs([P("diff.jpg"), P("report/a.jpg"), P("Top-Images.png"), P("cat.jpg")])
    assert [d.as_posix() for d in dirs] == ["diff_jpg", "report_/a", "Top-Images_png", "cat"]


def test_an_interrupted_diff_leaves_nothing_half_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actviz.diff.stream as stream

    photos = tmp_path / "photos"
    for i in range(8):
        make_image(photos / f"p{i}.png", size=(32, 32), seed=i)
    out = tmp_path / "out"
    common = {"input_size": (32, 32), "device": "cpu", "layers": "Conv2d"}
    actviz.run(_net(), [photos], out=out, **common)
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    measure = stream._measure

    def interrupted(state: Any, *args: Any) -> None:
        if state.pictures:  # the first batch's pictures are written: Ctrl-C now
            raise KeyboardInterrupt
        measure(state, *args)

    monkeypatch.setattr(stream, "_measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        actviz.diff(
            _net(),
            [photos],
            against_model=_net(),
            out=out,
            overwrite=True,
            batch_size=4,
            images=2,
            **common,
        )
    # The run's files only: no picture, no folder, no summary of the diff.
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
