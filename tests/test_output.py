"""Safe names, folder layout and atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

import pytest
from PIL import Image

from actviz.errors import OutputError
from actviz.output import (
    TMP_MARK,
    atomic_path,
    image_dirs,
    layer_filename,
    prepare_out_dir,
    safe_name,
    write_json,
    write_png,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("layer1.0.relu:2", "layer1.0.relu_2"),
        ("features.3[0]", "features.3_0"),
        ("heads[out]", "heads_out"),
        ("../../etc/passwd", "__.._etc_passwd"),
        ("..", "_"),
        (".hidden", "_hidden"),
        ("a/b\\c", "a_b_c"),
        ("CON", "_CON"),
        ("čaj mlíko", "aj_ml_ko"),
        ("", "_"),
    ],
)
def test_safe_name(raw: str, expected: str) -> None:
    assert safe_name(raw) == expected


def test_safe_name_shortens_long_names_keeping_them_distinct() -> None:
    a, b = safe_name("x" * 300 + "a"), safe_name("x" * 300 + "b")
    assert len(a) <= 120 and len(b) <= 120
    assert a != b


def test_layer_filename_pads_capture_order() -> None:
    assert layer_filename(3, "layer1.0.relu:2") == "03_layer1.0.relu_2.png"
    assert layer_filename(7, "fc", width=3) == "007_fc.png"


def test_image_dirs_are_unique_even_ignoring_case() -> None:
    rels = [
        PurePosixPath("cat.jpg"),
        PurePosixPath("cat.png"),
        PurePosixPath("Cat.jpg"),
        PurePosixPath("a/x.jpg"),
        PurePosixPath("b/x.jpg"),
        PurePosixPath("../up.jpg"),
    ]
    dirs = [str(d) for d in image_dirs(rels)]
    assert dirs[:5] == ["cat", "cat_png", "Cat_jpg", "a/x", "b/x"]
    assert ".." not in dirs[5]
    assert len({d.lower() for d in dirs}) == len(dirs)


def test_atomic_write_leaves_nothing_when_the_writer_fails(tmp_path: Path) -> None:
    target = tmp_path / "out" / "file.png"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom")
    assert list((tmp_path / "out").iterdir()) == []


def test_write_png_and_json(tmp_path: Path) -> None:
    image = Image.new("P", (4, 3), 5)
    write_png(tmp_path / "a" / "x.png", image)
    with Image.open(tmp_path / "a" / "x.png") as back:
        assert back.size == (4, 3) and back.mode == "P"
    write_json(tmp_path / "m.json", {"a": [1, 2]})
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": [1, 2]}
    assert not [p for p in tmp_path.rglob("*") if TMP_MARK in p.name]


def test_prepare_out_dir_errors(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        prepare_out_dir(a_file)
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(OutputError, match="writable --out"):
            prepare_out_dir(locked / "sub")
