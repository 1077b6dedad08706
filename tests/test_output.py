"""Safe names, folder layout, atomic writes and the journal."""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from PIL import Image

from actviz.errors import ExitCode, OutputError
from actviz.output import (
    TMP_MARK,
    Journal,
    atomic_path,
    image_dirs,
    layer_filename,
    prepare_out_dir,
    safe_name,
    whole,
    write_bytes,
    write_json,
)
from actviz.render.png import picture_png
from actviz.run.records import RunRecords


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
        ("lpt².txt", "_lpt².txt"),
        ("čaj mlíko", "čaj_mlíko"),
        ("ünï cödé", "ünï_cödé"),
        (unicodedata.normalize("NFD", "ünï cödé"), "ünï_cödé"),  # as macOS spells it
        ("狗", "狗"),
        ("猫 (2)", "猫_2"),
        ("हिन्दी फ़ाइल", "हिन्दी_फ़ाइल"),  # combining vowel signs stay with their letters
        ("Ωμέγα/ζ", "Ωμέγα_ζ"),
        ("ｆｕｌｌ／ｗｉｄｔｈ", "ｆｕｌｌ_ｗｉｄｔｈ"),  # a fullwidth solidus is a separator too
        ("a\u200bb\u202ec\x00d\te\nf", "a_b_c_d_e_f"),  # format and control characters
        ("x\udcff y", "x_y"),  # an undecodable byte of a POSIX file name
        ("。.jpg", "_jpg"),  # an ideographic full stop is no letter, and no hidden name
        ("", "_"),
    ],
)
def test_safe_name(raw: str, expected: str) -> None:
    assert safe_name(raw) == expected


def test_safe_name_keeps_underscores_of_the_name() -> None:
    assert safe_name("sub__dog") == "sub__dog"
    assert safe_name("_private_") == "private"


def test_safe_name_caps_bytes_not_characters() -> None:
    # 200 CJK characters are 600 UTF-8 bytes: over the 255 a file system allows in a name.
    a, b = safe_name("猫" * 200 + "a"), safe_name("猫" * 200 + "b")
    assert len(a.encode()) <= 120 and len(b.encode()) <= 120
    assert a != b and a.startswith("猫" * 30)
    digest = hashlib.sha1(("猫" * 200 + "a").encode()).hexdigest()[:8]
    assert a.endswith("-" + digest)
    assert len(safe_name("é" * 100, max_len=100).encode()) <= 100


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


def test_image_dirs_keep_non_latin_names() -> None:
    rels = [PurePosixPath(n) for n in ("狗.jpg", "猫.jpg", "鸟.png", "ünï cödé.jpg", "照片/猫.jpg")]
    assert [str(d) for d in image_dirs(rels)] == ["狗", "猫", "鸟", "ünï_cödé", "照片/猫"]


def test_image_dirs_fold_case_in_every_script() -> None:
    names = [
        "Straße.jpg",
        "STRASSE.png",  # folds to strasse
        "ΟΔΟΣ.jpg",
        "οδος.jpg",  # final sigma folds to σ
        "οδοσ.jpg",
        "Кот.jpg",
        "кот.png",
        "cat.jpg",
        "саt.jpg",  # Cyrillic с and а: another name, only looks the same
        "é.jpg",
        unicodedata.normalize("NFD", "é.jpg"),  # the same name, decomposed
        "ǅ.jpg",  # titlecase digraph: folds like Ǆ and ǆ
        "Ǆ.jpg",
    ]
    dirs = [str(d) for d in image_dirs([PurePosixPath(n) for n in names])]
    assert dirs == [
        "Straße",
        "STRASSE_png",
        "ΟΔΟΣ",
        "οδος_jpg",
        "οδοσ-2",
        "Кот",
        "кот_png",
        "cat",
        "саt",
        "é",
        "é_jpg",
        "ǅ",
        "Ǆ_jpg",
    ]
    assert all(d == unicodedata.normalize("NFC", d) for d in dirs)
    assert len({d.casefold() for d in dirs}) == len(dirs)


SETTINGS: dict[str, Any] = {
    "model": "resnet18",
    "weights": "random",
    "selector": "layer4.*",
    "capture": "output",
    "draw": {"max_channels": 64, "norm": "channel", "clip": None},
    "input_size": (224, 224),
}


def _record(out: Path, name: str) -> dict[str, Any]:
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "00_fc.png").write_bytes(b"png")
    return {"path": f"/in/{name}.jpg", "out_dir": name, "status": "ok",
            "layers": [{"name": "fc", "file": f"{name}/00_fc.png"}]}  # fmt: skip


def _refusal(out: Path, settings: dict[str, Any]) -> str:
    with pytest.raises(OutputError) as info:
        RunRecords(out, settings).completed()
    assert info.value.exit_code == ExitCode.USAGE
    return str(info.value)


def test_records_resume_with_the_same_settings(tmp_path: Path) -> None:
    records = RunRecords(tmp_path, SETTINGS)
    records.add(_record(tmp_path, "cat"))
    records.add(_record(tmp_path, "dog"))
    (tmp_path / "dog" / "00_fc.png").unlink()  # gone: done again
    line = json.loads((tmp_path / RunRecords.FILE).read_text().splitlines()[0])
    assert line["settings"]["draw"] == {"max_channels": 64, "norm": "channel", "clip": None}
    assert line["settings"]["input_size"] == [224, 224]
    again = RunRecords(tmp_path, {**SETTINGS, "input_size": [224, 224]})  # a list is a tuple
    assert list(again.completed()) == [("/in/cat.jpg", "cat")]


def test_records_name_only_the_settings_that_differ(tmp_path: Path) -> None:
    RunRecords(tmp_path, SETTINGS).add(_record(tmp_path, "cat"))
    now = {**SETTINGS, "selector": "conv", "draw": {**SETTINGS["draw"], "max_channels": 16}}
    assert _refusal(tmp_path, now) == (
        f"resume=True: {tmp_path} was written with selector=layer4.* (now conv) and "
        "draw.max_channels=64 (now 16); use overwrite=True or another out"
    )
    message = _refusal(tmp_path, {**SETTINGS, "weights": "default", "input_size": (160, 160)})
    assert "weights=random (now default) and input_size=[224, 224] (now [160, 160]);" in message
    message = _refusal(tmp_path, {**SETTINGS, "draw": {**SETTINGS["draw"], "clip": [1, 99]}})
    assert "draw.clip=null (now [1, 99]);" in message
    assert "resnet18" not in message and "max_channels" not in message
    three = {k: v for k, v in SETTINGS.items() if k != "capture"} | {"grads": [True], "model": "x"}
    assert _refusal(tmp_path, three).endswith(
        "was written with model=resnet18 (now x), grads not set (now [true]) and "
        "capture=output (now not set); use overwrite=True or another out"
    )


def _layer(name: str, channels: list[int] | None, **extra: Any) -> dict[str, Any]:
    stats = {"count": 4096, "mean": 0.1234567, "min": -1.5, "max": 2.25, "dead_indices": [3]}
    return {"name": name, "module": name, "shape": [1, 64, 8, 8], "min": -1.5, "max": 2.25,
            "channels": channels, "file": f"cat/{name}.png", "overlay": None, "stats": stats,
            **extra}  # fmt: skip


def test_a_records_line_writes_what_every_layer_repeats_once(tmp_path: Path) -> None:
    layers = [_layer(f"layer{i}", list(range(64))) for i in range(20)]
    layers[3] = _layer("layer3", [5, 1, 2])  # sorted channels are kept as they are
    layers[4] = _layer("layer4", None, prefix_tokens=1)  # other keys: kept whole
    layers[5]["stats"] = None
    layers[6]["stats"] = {"count": 1}  # other statistics: kept whole
    layers[7]["channels"] = []
    record = {"path": "/in/cat.jpg", "out_dir": "cat", "status": "ok", "layers": layers}
    records = RunRecords(tmp_path, SETTINGS)
    offset = records.add(json.loads(json.dumps(record)))
    back = records.read(offset)
    assert back == record
    assert [list(x) for x in back["layers"]] == [list(x) for x in layers]  # keys in order
    assert list(back) == list(record)
    line = (tmp_path / RunRecords.FILE).read_bytes().splitlines()[1]
    assert len(line) < len(json.dumps(record)) / 2
    assert line.count(b'"dead_indices"') == 2 and line.count(b"[0,1,2,3,4,5,6,7") == 0


def test_records_of_older_versions_are_still_read(tmp_path: Path) -> None:
    digest = hashlib.sha256(json.dumps(SETTINGS, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]
    older = {"settings": digest, "settings_text": "model=resnet18, ...", **_record(tmp_path, "cat")}
    with (tmp_path / RunRecords.FILE).open("w") as fh:
        fh.write(json.dumps(older) + "\n" + '{"settings": "' + digest + '", "pa')  # cut short
    assert list(RunRecords(tmp_path, SETTINGS).completed()) == [("/in/cat.jpg", "cat")]
    assert _refusal(tmp_path, {**SETTINGS, "selector": "conv"}) == (
        f"resume=True: {tmp_path} was written with other settings (model=resnet18, ...); "
        "use overwrite=True or another out"
    )
    del older["settings_text"]
    (tmp_path / RunRecords.FILE).write_text(json.dumps(older) + "\n")
    assert "written with other settings;" in _refusal(tmp_path, {**SETTINGS, "selector": "conv"})


def test_atomic_write_leaves_nothing_when_the_writer_fails(tmp_path: Path) -> None:
    target = tmp_path / "out" / "file.png"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom")
    assert list((tmp_path / "out").iterdir()) == []


def test_write_png_and_json(tmp_path: Path) -> None:
    image = Image.new("P", (4, 3), 5)
    write_bytes(tmp_path / "a" / "x.png", picture_png(image))
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
        with pytest.raises(OutputError, match="writable out"):
            prepare_out_dir(locked / "sub")


def test_a_journal_starts_afresh_after_a_line_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    journal = Journal(path, first=b'{"head":1}\n')
    assert journal.append(b"[1]\n") == len(b'{"head":1}\n')
    journal.close()
    with path.open("ab") as fh:
        fh.write(b"[2")  # a process killed mid-write
    again = Journal(path, first=b"never written\n")
    offset = again.append(b"[3]\n")
    assert again.sync() == path.stat().st_size == offset + 4
    again.close()
    lines = list(Journal(path).lines())
    assert [line for _, line in lines] == [b'{"head":1}\n', b"[1]\n", b"[2\n", b"[3]\n"]
    assert [offset for offset, line in lines if line == b"[3]\n"] == [offset]


def test_a_journal_opened_at_a_covered_length_drops_what_follows(tmp_path: Path) -> None:
    path = tmp_path / "done"
    path.write_bytes(b"[1]\n[2]\n[3")
    journal = Journal(path, keep=4)
    assert journal.covers(4) and journal.covers(10) and not journal.covers(11)
    assert [line for _, line in journal.lines(end=6)] == [b"[1]\n", b"[2"]
    assert [whole(line) for _, line in journal.lines()] == [True, True, False]
    assert journal.size == 4
    journal.append(b"[4]\n")
    journal.close()
    assert path.read_bytes() == b"[1]\n[4]\n"
    assert not Journal(tmp_path / "missing").covers(0)


def test_a_journal_names_the_file_it_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match=r"cannot write .*file.*choose another out"):
        Journal(tmp_path / "file" / "log.jsonl").append(b"[]\n")


def test_a_layers_place_takes_two_digits_or_as_many_as_the_last_place_needs() -> None:
    from actviz.output import layer_filename, order_width

    assert [order_width(n) for n in (1, 10, 100, 101, 1000, 1001)] == [2, 2, 2, 3, 3, 4]
    assert layer_filename(7, "layer1.0", width=order_width(101)) == "007_layer1.0.png"
