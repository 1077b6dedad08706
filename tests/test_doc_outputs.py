"""docs/outputs.md names every file a run writes for a layer, so it cannot fall behind a new
picture kind."""

from __future__ import annotations

from pathlib import Path

from actviz.run.pictures import PICTURE_KINDS

DOC = Path(__file__).resolve().parent.parent / "docs" / "outputs.md"


def test_every_picture_kinds_file_and_record_key_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for kind in PICTURE_KINDS:
        assert f"`<NN>_<layer>{kind.suffix}.png`" in text, kind.name
        assert f"`{kind.record_key}`" in text, kind.name
