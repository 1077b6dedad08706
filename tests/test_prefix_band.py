"""A token layer's prefix tokens (class, register) drawn in a band above each grid tile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from actviz.cli import app
from actviz.layouts import LayerContext, to_drawable
from actviz.render.grid import render_grid
from actviz.render.palette import BACKGROUND, N_LEVELS, NONFINITE
from actviz.render.tiling import GAP, PREFIX_CELL
from tests.conftest import make_image, run_images

CTX = LayerContext("Block", 6, token_grid=(4, 4), prefix_tokens=5)


def _tokens() -> np.ndarray:
    rng = np.random.default_rng(3)
    tokens = rng.uniform(1.0, 2.0, size=(5 + 16, 6)).astype(np.float32)
    # Prefix token 0 sits at each channel's patch maximum, token 1 at its minimum, token 2
    # far below it (clamped to the bottom), token 3 far above (clamped to the top).
    tokens[0] = tokens[5:].max(axis=0)
    tokens[1] = tokens[5:].min(axis=0)
    tokens[2] = -100.0
    tokens[3] = 100.0
    tokens[4] = np.nan
    return tokens


def test_layout_keeps_the_prefix_tokens_apart_from_the_maps() -> None:
    tokens = _tokens()
    d = to_drawable(tokens, CTX)
    assert d.kind == "maps" and d.drawn_shape == (6, 4, 4)
    assert d.prefix is not None and d.prefix.shape == (6, 5)
    np.testing.assert_array_equal(d.prefix, tokens[:5].T)
    assert d.note == "5 prefix tokens dropped; 16 patch tokens as 4 x 4"
    assert d.prefix_note == "5 prefix tokens shown in the band above each tile; " + (
        "16 patch tokens as 4 x 4"
    )
    one = to_drawable(np.ones((17, 6), np.float32), LayerContext("Block", 6, (4, 4), 1))
    assert one.prefix is not None and one.prefix.shape == (6, 1)
    assert one.prefix_note is not None and one.prefix_note.startswith("class token shown")
    # Patch tokens alone (no prefix) carry no band.
    assert to_drawable(tokens[5:], CTX).prefix is None


def test_band_shows_prefix_values_on_each_tiles_scale() -> None:
    d = to_drawable(_tokens(), CTX)
    assert d.array is not None and d.prefix is not None
    plain = render_grid(d.array, title="blocks.0", cmap="viridis")
    banded = render_grid(d.array, title="blocks.0", cmap="viridis", prefix=d.prefix)
    # The tiles keep their size; only the band above them is added.
    assert banded.tile_shape == plain.tile_shape == (32, 32)
    assert banded.label_height == plain.label_height + PREFIX_CELL + 1
    assert banded.pitch[0] == plain.pitch[0] + PREFIX_CELL + 1
    top_level = N_LEVELS - 1
    columns = banded.grid_shape[1]
    for position in range(6):
        row, column = divmod(position, columns)
        y0 = banded.header_height + GAP + row * banded.pitch[0]
        x0 = GAP + column * banded.pitch[1]
        band_top = y0 + banded.label_height - PREFIX_CELL - 1
        band = banded.indices[band_top : band_top + PREFIX_CELL, x0 : x0 + 5 * PREFIX_CELL]
        squares = band.reshape(PREFIX_CELL, 5, PREFIX_CELL)
        assert (squares == squares[:1, :, :1]).all()  # each token one solid square
        levels = squares[0, :, 0]
        assert levels[0] == top_level and levels[3] == top_level  # channel max, above it
        assert levels[1] == 0 and levels[2] == 0  # channel min, below it
        assert levels[4] == NONFINITE  # NaN in its own colour
        # One background row between the band and the tile, whose pixels match the plain
        # picture's tile exactly.
        assert (banded.indices[band_top + PREFIX_CELL, x0 : x0 + 32] == BACKGROUND).all()
        tile_y = y0 + banded.label_height
        plain_y = plain.header_height + GAP + row * plain.pitch[0] + plain.label_height
        np.testing.assert_array_equal(
            banded.indices[tile_y : tile_y + 32, x0 : x0 + 32],
            plain.indices[plain_y : plain_y + 32, GAP + column * plain.pitch[1] :][:, :32],
        )


def test_band_rejects_a_prefix_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="prefix must be a"):
        render_grid(np.ones((3, 4, 4)), title="t", prefix=np.ones((2, 1)))


def test_a_run_shows_the_class_token_and_records_it(tmp_path: Path) -> None:
    pytest.importorskip("timm")
    image = make_image(tmp_path / "in" / "x.png", size=(40, 30))
    out = tmp_path / "out"
    args = ["run", "timm/test_vit", str(image), "-w", "none", "-o", str(out)]
    result = CliRunner().invoke(app, [*args, "-l", "blocks.0,head", "--no-report", "-q"])
    assert result.exit_code == 0, result.output
    layers = run_images(out)[0]["layers"]
    block = next(x for x in layers if x["name"] == "blocks.0")
    assert block["prefix_tokens"] == 1 and block["layout"] == "tokens"
    head = next(x for x in layers if x["name"] == "head")
    assert "prefix_tokens" not in head
