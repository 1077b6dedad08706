"""Tests of actviz.render.grid: geometry, colour mapping, header, and input checks."""

from __future__ import annotations

import itertools
import math
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from actviz.render import (
    BACKGROUND,
    CENTER_LEVEL,
    GAP,
    HEADER_MIN_WIDTH,
    LABEL,
    N_LEVELS,
    NONFINITE,
    SPARE,
    TEXT,
    TILE_LABEL_SIZE,
    GridImage,
    colormap_lut,
    digit_rows,
    line_height,
    paste_text,
    range_is_signed,
)
from actviz.render.grid import render_grid, render_vector

U8 = npt.NDArray[np.uint8]


def tile(grid: GridImage, position: int) -> U8:
    """The pixels of the tile at ``position`` in display order (under its label band)."""
    _, columns = grid.grid_shape
    tile_h, tile_w = grid.tile_shape
    pitch_h, pitch_w = grid.pitch
    row, column = divmod(position, columns)
    top = grid.header_height + GAP + grid.label_height + row * pitch_h
    left = GAP + column * pitch_w
    return grid.indices[top : top + tile_h, left : left + tile_w]


def label_band(grid: GridImage, position: int) -> U8:
    """The pixels of the channel-label band above the tile at ``position``."""
    _, columns = grid.grid_shape
    pitch_h, pitch_w = grid.pitch
    row, column = divmod(position, columns)
    top = grid.header_height + GAP + row * pitch_h
    left = GAP + column * pitch_w
    return grid.indices[top : top + grid.label_height, left : left + pitch_w - GAP]


def body(grid: GridImage) -> U8:
    return grid.indices[grid.header_height :]


def gradient(height: int = 8, width: int = 8) -> npt.NDArray[np.float32]:
    return np.arange(height * width, dtype=np.float32).reshape(height, width)


# --------------------------------------------------------------------------- basics


def test_palette_layout() -> None:
    assert N_LEVELS % 2 == 1
    assert CENTER_LEVEL == (N_LEVELS - 1) // 2
    reserved = {BACKGROUND, TEXT, NONFINITE, SPARE}
    assert len(reserved) == 4
    assert min(reserved) == N_LEVELS
    assert max(reserved) <= 255


def test_output_types_and_conversions() -> None:
    grid = render_grid(np.random.default_rng(0).random((4, 10, 10)), title="conv")
    assert grid.indices.dtype == np.uint8 and grid.indices.ndim == 2
    assert grid.palette.shape == (256, 3) and grid.palette.dtype == np.uint8
    assert grid.palette[BACKGROUND].tolist() != grid.palette[TEXT].tolist()
    assert grid.palette[NONFINITE].tolist() == [255, 0, 255]
    np.testing.assert_array_equal(grid.palette[:N_LEVELS], colormap_lut("viridis"))

    rgb = grid.to_rgb()
    assert rgb.shape == (*grid.indices.shape, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb, grid.palette[grid.indices])

    image = grid.to_pil()
    assert image.mode == "P"
    assert image.size == (grid.indices.shape[1], grid.indices.shape[0]) == grid.size
    np.testing.assert_array_equal(np.asarray(image), grid.indices)
    np.testing.assert_array_equal(np.asarray(image.convert("RGB")), rgb)


def test_result_is_read_only() -> None:
    grid = render_grid(gradient(), title="t")
    with pytest.raises(ValueError):
        grid.indices[0, 0] = 0
    with pytest.raises(AttributeError):
        grid.cmap = "magma"  # type: ignore[misc]


def test_two_dimensional_input_is_one_channel() -> None:
    grid = render_grid(gradient(), title="t")
    assert grid.channels_total == 1 and grid.channels_shown == 1
    assert grid.channel_ids == (0,)


def test_integer_and_bool_arrays_are_accepted() -> None:
    ints = render_grid(np.arange(64, dtype=np.int64).reshape(1, 8, 8), title="t", min_tile=8)
    assert tile(ints, 0).min() == 0 and tile(ints, 0).max() == N_LEVELS - 1
    flags = render_grid(np.eye(8, dtype=bool)[None], title="t", min_tile=8)
    np.testing.assert_array_equal(tile(flags, 0) == N_LEVELS - 1, np.eye(8, dtype=bool))


# --------------------------------------------------------------------------- geometry


def test_channel_cap() -> None:
    act = np.random.default_rng(1).random((100, 8, 8)).astype(np.float32)
    grid = render_grid(act, title="t", max_channels=16, min_tile=8)
    assert grid.channels_shown == 16 and grid.channels_total == 100
    assert grid.channel_ids == tuple(range(16))
    assert grid.grid_shape == (4, 4)
    drawn = [not np.all(tile(grid, i) == BACKGROUND) for i in range(16)]
    assert all(drawn)
    assert grid.label_height > 0 and grid.pitch[0] == grid.label_height + 8 + GAP
    assert body(grid).shape[0] == GAP + 4 * grid.pitch[0]


@pytest.mark.parametrize("max_channels", [0, -1])
def test_non_positive_cap_shows_all(max_channels: int) -> None:
    act = np.zeros((70, 3, 3), dtype=np.float32)
    grid = render_grid(act, title="t", max_channels=max_channels)
    assert grid.channels_shown == 70 and len(grid.channel_ids) == 70
    assert grid.grid_shape == (8, 9)  # ceil(sqrt(70)) = 9 columns


def test_columns_geometry() -> None:
    act = np.random.default_rng(2).random((9, 8, 8)).astype(np.float32)
    grid = render_grid(act, title="t", min_tile=8)
    assert grid.upscale == 1 and grid.tile_shape == (8, 8) and grid.grid_shape == (3, 3)
    # An 8-pixel tile is narrower than its label: the cell widens to the label.
    band, (pitch_h, pitch_w) = grid.label_height, grid.pitch
    assert pitch_h == band + 8 + GAP and pitch_w >= 8 + GAP
    grid_width = GAP + 3 * pitch_w
    height, width = grid.indices.shape
    assert height == grid.header_height + GAP + 3 * pitch_h
    assert width >= max(grid_width, HEADER_MIN_WIDTH)
    # Padding right of the tiles is plain background.
    assert np.all(body(grid)[:, grid_width:] == BACKGROUND)
    # Gaps between tiles are background.
    cell_w = pitch_w - GAP
    assert np.all(body(grid)[:, GAP + cell_w : GAP + pitch_w] == BACKGROUND)
    assert np.all(body(grid)[GAP + band + 8 : GAP + pitch_h, :grid_width] == BACKGROUND)

    two = render_grid(act, title="t", min_tile=8, columns=2)
    assert two.grid_shape == (5, 2)
    assert two.indices.shape[0] == two.header_height + GAP + 5 * two.pitch[0]
    # The tenth cell exists in the layout but is empty.
    assert np.all(tile(two, 9) == BACKGROUND)
    # More columns than channels: one row.
    assert render_grid(act, title="t", columns=50).grid_shape == (1, 9)


def test_tiles_appear_in_display_order() -> None:
    act = np.stack([np.full((4, 4), float(i)) for i in range(5)]).astype(np.float32)
    grid = render_grid(act, title="t", norm="layer", min_tile=4)
    for i in range(5):
        assert np.all(tile(grid, i) == round(i / 4 * (N_LEVELS - 1)))


def test_small_maps_are_upscaled_by_an_integer_factor() -> None:
    act = np.random.default_rng(3).random((4, 7, 7)).astype(np.float32)
    grid = render_grid(act, title="t", min_tile=32)
    assert grid.upscale == 5 and grid.tile_shape == (35, 35)
    first = tile(grid, 0)
    blocks = first.reshape(7, 5, 7, 5)
    assert np.all(blocks == blocks[:, :1, :, :1])  # each source pixel is a 5x5 block
    small = render_grid(act, title="t", min_tile=1)
    np.testing.assert_array_equal(blocks[:, 0, :, 0], tile(small, 0))
    assert render_grid(np.zeros((1, 56, 56)), title="t", min_tile=32).upscale == 1


def test_non_square_maps_keep_their_aspect() -> None:
    act = np.random.default_rng(4).random((3, 14, 20)).astype(np.float32)
    grid = render_grid(act, title="t", min_tile=32)
    assert grid.upscale == 2 and grid.tile_shape == (28, 40)
    assert grid.pitch == (grid.label_height + 28 + GAP, 40 + GAP)
    assert body(grid).shape[0] == GAP + 2 * grid.pitch[0]
    assert not np.any(tile(grid, 0) == BACKGROUND)


def _text_rows(header: U8) -> int:
    """How many separate runs of rows hold header text: the number of text lines."""
    has_text = np.any(header == TEXT, axis=1).astype(np.int8)
    return int(np.count_nonzero(np.diff(np.concatenate([[0], has_text])) == 1))


def test_long_titles_and_notes_wrap_to_the_picture_width() -> None:
    # A long title wraps instead of widening the picture (it used to widen it).
    short = render_grid(np.zeros((1, 4, 4)), title="t")
    assert short.indices.shape[1] == HEADER_MIN_WIDTH
    long = render_grid(np.zeros((1, 4, 4)), title="x" * 150)
    assert long.indices.shape[1] == HEADER_MIN_WIDTH
    header = long.indices[: long.header_height]
    assert np.any(header[:, HEADER_MIN_WIDTH - 60 :] == TEXT)  # lines run to the edge
    assert _text_rows(header) == _text_rows(short.indices[: short.header_height]) + 3
    assert long.header_height > short.header_height

    # The header follows a grid wider than the minimum; a long note wraps to it.
    act = np.random.default_rng(5).random((64, 28, 28)).astype(np.float32)
    plain = render_grid(act, title="features.3  Sequential  (1, 28, 28, 192)")
    note = "channels-last (28, 28, 192) drawn as 192 maps of 28 x 28 " * 3
    noted = render_grid(act, title="features.3  Sequential  (1, 28, 28, 192)", notes=[note])
    grid_width = GAP + 8 * plain.pitch[1]
    assert plain.size[0] == noted.size[0] == grid_width > HEADER_MIN_WIDTH
    assert _text_rows(noted.indices[: noted.header_height]) >= (
        _text_rows(plain.indices[: plain.header_height]) + 3
    )
    np.testing.assert_array_equal(body(plain), body(noted))


def test_header_digits_are_legible_at_one_to_one() -> None:
    from actviz.render.legend import _text_mask
    from actviz.render.theme import INFO_SIZE, LABEL_SIZE, TITLE_SIZE

    for size in (TILE_LABEL_SIZE, LABEL_SIZE, INFO_SIZE, TITLE_SIZE):
        masks = {d: _text_mask(d, size) for d in "0123456789"}
        assert line_height(size) >= 12
        for digit, mask in masks.items():
            rows = np.nonzero(mask.any(axis=1))[0]
            assert rows[-1] - rows[0] + 1 >= 8, (size, digit)  # glyphs 8+ pixels tall
        for a, b in itertools.combinations("0123456789", 2):
            first, second = masks[a], masks[b]
            width = min(first.shape[1], second.shape[1])
            differ = np.count_nonzero(first[:, :width] != second[:, :width])
            assert differ >= 5, (size, a, b, differ)


def test_every_tile_carries_its_channel_index() -> None:
    act = np.random.default_rng(8).random((40, 7, 7)).astype(np.float32)
    for grid in (
        render_grid(act, title="t", max_channels=12, order="max"),
        render_grid(act, title="t", max_channels=0),
        render_grid(act[:3, :2, :2], title="t", min_tile=2),  # tiles narrower than labels
    ):
        for position, channel in enumerate(grid.channel_ids):
            band = label_band(grid, position)
            expected = np.full_like(band, BACKGROUND)
            skip = digit_rows(TILE_LABEL_SIZE)[0]
            paste_text(expected, str(channel), TILE_LABEL_SIZE, 0, 1, colour=LABEL, skip=skip)
            np.testing.assert_array_equal(band, expected)
            assert np.count_nonzero(band == LABEL) > 5
            assert not np.any(tile(grid, position) == LABEL)  # labels never cover the map
        assert not np.any(grid.indices[: grid.header_height] == LABEL)


def test_explicit_channels_are_drawn_in_their_order() -> None:
    act = np.stack([np.full((4, 4), float(v)) for v in range(6)]).astype(np.float32)
    grid = render_grid(
        act, title="t", norm="layer", min_tile=4, channels=[4, 0, 5], channels_note="chosen"
    )
    assert grid.channel_ids == (4, 0, 5) and grid.channels_shown == 3
    assert [int(tile(grid, i)[0, 0]) for i in range(3)] == [
        round(4 / 5 * (N_LEVELS - 1)),
        0,
        N_LEVELS - 1,
    ]
    # The explicit list wins over order and max_channels.
    same = render_grid(act, title="t", order="std", max_channels=1, channels=[4, 0, 5])
    assert same.channel_ids == (4, 0, 5)
    for bad in ([], [6], [-1]):
        with pytest.raises(ValueError, match="channels"):
            render_grid(act, title="t", channels=bad)


# --------------------------------------------------------------------------- colour mapping


def test_gradient_spans_all_levels() -> None:
    grid = render_grid(gradient()[None], title="t", min_tile=8)
    levels = tile(grid, 0)
    assert levels[0, 0] == 0 and levels[-1, -1] == N_LEVELS - 1
    assert levels.min() == 0 and levels.max() == N_LEVELS - 1
    assert np.all(np.diff(levels.ravel().astype(int)) >= 0)
    expected = np.rint(gradient().ravel() / 63 * (N_LEVELS - 1))
    np.testing.assert_array_equal(levels.ravel(), expected)
    assert (grid.vmin, grid.vmax) == (0.0, 63.0)
    assert grid.cmap == "viridis" and not grid.signed


def test_per_channel_normalisation_is_independent() -> None:
    act = np.stack([gradient(), gradient() * 1000 + 5]).astype(np.float32)
    grid = render_grid(act, title="t", min_tile=8)
    np.testing.assert_array_equal(tile(grid, 0), tile(grid, 1))
    assert grid.norm == "channel"
    assert (grid.vmin, grid.vmax) == (0.0, 63005.0)

    layer = render_grid(act, title="t", norm="layer", min_tile=8)
    assert layer.norm == "layer"
    assert tile(layer, 0).max() <= 1  # small channel squeezed by the big one's range
    assert tile(layer, 1).max() == N_LEVELS - 1


def test_constant_and_zero_channels_are_uniform_without_warnings() -> None:
    act = np.stack([np.zeros((6, 6)), np.full((6, 6), 3.5), gradient(6, 6)]).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = render_grid(act, title="t", min_tile=6)
        everything_zero = render_grid(np.zeros((2, 6, 6)), title="t", norm="layer")
        clipped = render_grid(act, title="t", clip=(1, 99), min_tile=6)
    assert np.all(tile(grid, 0) == 0)
    assert np.all(tile(grid, 1) == 0)
    assert tile(grid, 2).max() == N_LEVELS - 1
    assert np.all(tile(clipped, 0) == 0) and np.all(tile(clipped, 1) == 0)
    assert np.all(tile(everything_zero, 0) == 0) and np.all(tile(everything_zero, 1) == 0)
    for picture in (grid, everything_zero, clipped):
        assert math.isfinite(picture.vmin) and math.isfinite(picture.vmax)
    assert not everything_zero.signed and everything_zero.cmap == "viridis"


def test_constant_channels_of_signed_data_use_the_centre_colour() -> None:
    act = np.stack([np.zeros((6, 6)), np.full((6, 6), 2.0), gradient(6, 6) - 10]).astype(np.float32)
    grid = render_grid(act, title="t", min_tile=6)
    assert grid.signed
    assert np.all(tile(grid, 0) == CENTER_LEVEL)
    assert np.all(tile(grid, 1) == CENTER_LEVEL)
    layer = render_grid(act, title="t", norm="layer", min_tile=6)
    assert np.all(tile(layer, 0) == CENTER_LEVEL)
    assert np.all(tile(layer, 1) > CENTER_LEVEL)  # a shared scale shows the value 2


def test_signed_data_is_centred_on_zero() -> None:
    values = np.array([[-4.0, -2.0, 0.0], [1.0, 2.0, 4.0], [0.0, 0.0, -1.0]], np.float32)
    grid = render_grid(values, title="t", min_tile=3)
    assert grid.cmap == "RdBu_r" and grid.signed
    assert (grid.vmin, grid.vmax) == (-4.0, 4.0)
    levels = tile(grid, 0)
    assert levels[0, 2] == CENTER_LEVEL and levels[2, 0] == CENTER_LEVEL
    assert levels[0, 0] == 0 and levels[1, 2] == N_LEVELS - 1
    assert int(levels[0, 1]) + int(levels[1, 1]) == N_LEVELS - 1  # -2 and +2 mirror
    np.testing.assert_array_equal(grid.palette[:N_LEVELS], colormap_lut("RdBu_r"))

    # Asymmetric data: the range is still [-max|x|, +max|x|].
    skewed = render_grid(np.array([[[-1.0, 0.0, 9.0]]], np.float32), title="t")
    assert (skewed.vmin, skewed.vmax) == (-9.0, 9.0)
    assert tile(skewed, 0)[0, skewed.upscale] == CENTER_LEVEL


def test_explicit_cmap() -> None:
    signed = np.array([[[-1.0, 0.0, 3.0]]], np.float32)
    plain = render_grid(signed, title="t", cmap="magma", min_tile=3)
    assert plain.cmap == "magma" and not plain.signed
    assert tile(plain, 0).tolist() == [[0, round(1 / 4 * (N_LEVELS - 1)), N_LEVELS - 1]]
    np.testing.assert_array_equal(plain.palette[:N_LEVELS], colormap_lut("magma"))
    diverging = render_grid(signed, title="t", cmap="coolwarm", min_tile=3)
    assert diverging.signed and tile(diverging, 0)[0, 1] == CENTER_LEVEL
    positive = render_grid(np.abs(signed), title="t", cmap="coolwarm", min_tile=3)
    assert not positive.signed and tile(positive, 0)[0, 1] == 0


def test_nonfinite_pixels() -> None:
    act = np.stack([gradient(), gradient(), np.full((8, 8), np.nan)]).astype(np.float32)
    act[0, 0, 1] = np.nan
    act[0, 7, 6] = np.inf
    act[1, 3, 3] = -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = render_grid(act, title="t", min_tile=8)
        layer = render_grid(act, title="t", min_tile=8, norm="layer", clip=(5, 95))
        ordered = render_grid(act, title="t", min_tile=8, order="std", clip=(1, 99))
    first = tile(grid, 0)
    assert first[0, 1] == NONFINITE and first[7, 6] == NONFINITE
    assert tile(grid, 1)[3, 3] == NONFINITE
    assert np.all(tile(grid, 2) == NONFINITE)
    # Ranges come from the finite values: the gradient still spans all levels.
    assert first[0, 0] == 0 and first[7, 7] == N_LEVELS - 1
    assert (grid.vmin, grid.vmax) == (0.0, 63.0)
    assert np.count_nonzero(body(grid) == NONFINITE) == 64 + 3
    assert np.any(grid.indices[: grid.header_height] == NONFINITE)  # legend swatch
    assert math.isfinite(layer.vmin) and math.isfinite(layer.vmax)
    assert ordered.channel_ids[-1] == 2  # the all-NaN channel sorts last
    clean = render_grid(gradient(), title="t")
    assert not np.any(clean.indices == NONFINITE)


def test_order_picks_the_right_channels() -> None:
    spike = np.zeros((5, 5))
    spike[2, 2] = 100.0  # mean 4, max 100, std ~19.6
    constant = np.full((5, 5), 10.0)  # mean 10, max 10, std 0
    checker = np.where(np.indices((5, 5)).sum(axis=0) % 2 == 0, 30.0, -30.0)  # std ~30
    act = np.stack([constant * 0, spike, constant, checker]).astype(np.float32)
    expected = {"mean": (2, 1, 3), "max": (1, 3, 2), "std": (3, 1, 0)}  # 0 and 2 tie
    for order, ids in expected.items():
        grid = render_grid(act, title="t", order=order, max_channels=3)  # type: ignore[arg-type]
        assert grid.channel_ids == ids, order
        assert grid.channels_shown == 3 and grid.channels_total == 4
    assert render_grid(act, title="t", max_channels=3).channel_ids == (0, 1, 2)
    # Ties keep index order.
    ties = render_grid(np.zeros((4, 2, 2)), title="t", order="std")
    assert ties.channel_ids == (0, 1, 2, 3)


def test_order_draws_the_selected_channels() -> None:
    act = np.stack([np.full((4, 4), float(v)) for v in (1, 3, 2)]).astype(np.float32)
    grid = render_grid(act, title="t", order="mean", norm="layer", min_tile=4)
    assert grid.channel_ids == (1, 2, 0)
    assert [int(tile(grid, i)[0, 0]) for i in range(3)] == [N_LEVELS - 1, CENTER_LEVEL, 0]


def test_value_range_clamps_and_overrides_norm() -> None:
    act = np.array([[[-5.0, 0.0, 0.5, 1.0, 7.0]]], np.float32)
    grid = render_grid(act, title="t", value_range=(0.0, 1.0), min_tile=5, clip=(10, 90))
    assert grid.norm == "shared" and (grid.vmin, grid.vmax) == (0.0, 1.0)
    assert not grid.signed and grid.cmap == "viridis"
    assert tile(grid, 0)[0].tolist() == [0, 0, CENTER_LEVEL, N_LEVELS - 1, N_LEVELS - 1]

    # A signed shared range is made symmetric so that 0 stays the centre colour.
    signed = render_grid(act, title="t", value_range=(-2.0, 1.0), min_tile=5)
    assert signed.signed and (signed.vmin, signed.vmax) == (-2.0, 2.0)
    assert tile(signed, 0)[0, 1] == CENTER_LEVEL and tile(signed, 0)[0, 0] == 0

    # The same range gives the same colours for different data.
    other = render_grid(act * 0.5, title="t", value_range=(0.0, 1.0), min_tile=5)
    assert tile(other, 0)[0, 2] == tile(grid, 0)[0, 1] + round((N_LEVELS - 1) / 4)

    degenerate = render_grid(act, title="t", value_range=(1.0, 1.0), min_tile=5)
    assert np.all(tile(degenerate, 0) == 0)


def test_clip_ignores_a_single_outlier() -> None:
    values = np.linspace(0.0, 1.0, 400, dtype=np.float32).reshape(20, 20)
    values[10, 10] = 1000.0
    plain = render_grid(values, title="t", min_tile=20)
    clipped = render_grid(values, title="t", min_tile=20, clip=(1, 99))
    assert np.count_nonzero(tile(plain, 0) > 2) == 1  # everything but the outlier is dark
    levels = tile(clipped, 0)
    assert levels[10, 10] == N_LEVELS - 1
    assert levels[0, 0] == 0
    assert len(np.unique(levels)) > 200
    assert clipped.vmax < 1.0 and clipped.vmin > 0.0

    layer = render_grid(values[None], title="t", min_tile=20, clip=(1, 99), norm="layer")
    assert len(np.unique(tile(layer, 0))) > 200


# --------------------------------------------------------------------------- header


def test_header_has_text_and_grid_has_none() -> None:
    act = np.random.default_rng(6).random((16, 12, 12)).astype(np.float32)
    grid = render_grid(act, title="layer1.0.conv1  Conv2d  (1, 16, 12, 12)")
    header = grid.indices[: grid.header_height]
    assert np.count_nonzero(header == TEXT) > 500
    assert not np.any(body(grid) == TEXT)
    # The colour bar shows every level from low to high.
    bar_rows = [row for row in header if np.count_nonzero(row < N_LEVELS) > 100]
    assert bar_rows, "no colour bar row found"
    bar = bar_rows[0][bar_rows[0] < N_LEVELS]
    assert bar[0] == 0 and bar[-1] == N_LEVELS - 1
    assert np.all(np.diff(bar.astype(int)) >= 0)
    # No colours other than the reserved ones and the colour bar in the header.
    assert not np.any(header == NONFINITE)


def test_header_text_differs_with_options() -> None:
    act = np.random.default_rng(7).random((16, 12, 12)).astype(np.float32)
    headers = [
        render_grid(act, title="same", **options).indices[:30]
        for options in ({}, {"order": "max"}, {"norm": "layer"}, {"clip": (1, 99)})
    ]
    for i, first in enumerate(headers):
        for second in headers[i + 1 :]:
            assert first.shape != second.shape or not np.array_equal(first, second)


def test_empty_title_is_allowed() -> None:
    assert render_grid(np.ones((2, 3, 3)), title="").indices.shape[1] == HEADER_MIN_WIDTH


# --------------------------------------------------------------------------- vectors


def test_render_vector() -> None:
    values = np.linspace(-1.0, 2.0, 1000, dtype=np.float32)
    strip = render_vector(values, title="fc  Linear  (1, 1000)")
    assert strip.channels_total == 1000 and strip.channels_shown == 1000
    assert strip.channel_ids == tuple(range(1000))
    assert strip.signed and strip.cmap == "RdBu_r" and (strip.vmin, strip.vmax) == (-2.0, 2.0)
    rows, per_row = strip.grid_shape
    assert per_row * rows >= 1000 and per_row in (32, 64) and rows == math.ceil(1000 / per_row)
    cell_h, cell_w = strip.tile_shape
    assert 8 <= cell_h <= 14 and cell_h == cell_w
    levels = body(strip)
    colours = levels[levels < N_LEVELS]
    assert colours.min() == round((N_LEVELS - 1) / 4)  # -1 of [-2, 2]
    assert colours.max() == N_LEVELS - 1
    assert np.any(levels == TEXT)  # row labels
    assert np.any(strip.indices[: strip.header_height] == TEXT)
    assert strip.to_pil().mode == "P"


def test_render_vector_cells_follow_the_values() -> None:
    values = np.arange(10, dtype=np.float32)
    values[4] = np.nan
    strip = render_vector(values, title="logits")
    assert strip.grid_shape == (1, 10) and not strip.signed
    cell_h, cell_w = strip.tile_shape
    # Sample the centre of each cell on the single row of cells.
    row = body(strip)[GAP + cell_h // 2]
    cells = row[(row < N_LEVELS) | (row == NONFINITE)]
    runs = [int(v) for i, v in enumerate(cells) if i == 0 or v != cells[i - 1]]
    expected = [round(v / 9 * (N_LEVELS - 1)) for v in (0, 1, 2, 3)]
    assert runs[:4] == expected and runs[4] == NONFINITE and runs[-1] == N_LEVELS - 1


def test_render_vector_cap_and_shapes() -> None:
    values = np.random.default_rng(8).random(5000).astype(np.float32)
    strip = render_vector(values, title="t", max_values=4096)
    assert strip.channels_shown == 4096 and strip.channels_total == 5000
    assert strip.grid_shape == (64, 64)
    assert render_vector(values[:300].reshape(1, 300), title="t").channels_total == 300
    assert render_vector(values[:10].reshape(10, 1, 1), title="t").channels_total == 10
    with pytest.raises(ValueError, match="vector"):
        render_vector(values[:100].reshape(10, 10), title="t")
    with pytest.raises(ValueError, match="empty"):
        render_vector(np.zeros(0), title="t")
    with pytest.raises(ValueError, match="colormap"):
        render_vector(values[:10], title="t", cmap="nope")
    assert render_vector(np.zeros(7), title="t").vmin == 0.0


# --------------------------------------------------------------------------- helpers


def test_colormap_lut() -> None:
    lut = colormap_lut("viridis")
    assert lut.shape == (N_LEVELS, 3) and lut.dtype == np.uint8
    assert colormap_lut("viridis") is lut  # cached
    assert not lut.flags.writeable
    assert colormap_lut("gray", 2).tolist() == [[0, 0, 0], [255, 255, 255]]
    with pytest.raises(ValueError, match="levels"):
        colormap_lut("gray", 1)


def test_unknown_cmap_error_names_alternatives() -> None:
    with pytest.raises(ValueError, match="unknown colormap 'viridiss'.*viridis"):
        colormap_lut("viridiss")
    with pytest.raises(ValueError, match="RdBu"):
        render_grid(np.ones((1, 2, 2)), title="t", cmap="RdBu_rr")
    with pytest.raises(ValueError, match="viridis"):
        colormap_lut("zzzzqqq")


def test_a_range_is_signed_only_past_float_noise() -> None:
    assert range_is_signed(-1.0, 2.0)
    assert not range_is_signed(0.0, 2.0)
    assert not range_is_signed(-3.0, 0.0)
    assert not range_is_signed(-1e-9, 5.0)  # float noise below zero
    assert not range_is_signed(0.0, 0.0)
    assert not range_is_signed(np.inf, -np.inf)  # the range of no finite value


# --------------------------------------------------------------------------- input checks


@pytest.mark.parametrize("shape", [(5,), (1, 2, 3, 4), ()])
def test_wrong_ndim(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        render_grid(np.zeros(shape), title="t")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"order": "median"}, "order"),
        ({"norm": "image"}, "norm"),
        ({"clip": (99, 1)}, "clip"),
        ({"clip": (0, 101)}, "clip"),
        ({"clip": (1,)}, "clip"),
        ({"value_range": (2.0, 1.0)}, "value_range"),
        ({"value_range": (0.0, float("nan"))}, "value_range"),
        ({"cmap": "not-a-map"}, "colormap"),
        ({"columns": 0}, "columns"),
        ({"min_tile": -1}, "min_tile"),
    ],
)
def test_invalid_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_grid(np.ones((2, 3, 3)), title="t", **options)  # type: ignore[arg-type]


def test_bad_arrays() -> None:
    with pytest.raises(ValueError, match="empty"):
        render_grid(np.zeros((0, 4, 4)), title="t")
    with pytest.raises(ValueError, match="real"):
        render_grid(np.zeros((1, 2, 2), dtype=complex), title="t")
    with pytest.raises(ValueError, match="real"):
        render_grid(np.array([[["a"]]]), title="t")


def test_extreme_values_do_not_warn() -> None:
    act = np.array([[[-3e38, 0.0, 3e38], [1e-38, 2e-38, 3e-38]]], np.float32)
    wide = np.array([[[1e300, -1e300, 1.0]]])  # float64 beyond float32: becomes +-inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = render_grid(act, title="t", min_tile=3)
        tiny = render_grid(act[:, 1:], title="t", min_tile=3, norm="layer")
        inf = render_grid(wide, title="t", min_tile=3)
    levels = tile(grid, 0)
    assert levels[0, 0] == 0 and levels[0, 2] == N_LEVELS - 1
    assert levels[0, 1] == CENTER_LEVEL
    assert tile(tiny, 0).max() <= N_LEVELS - 1
    assert tile(inf, 0)[0, :2].tolist() == [NONFINITE, NONFINITE]


def test_float64_input_matches_float32() -> None:
    act = np.random.default_rng(9).standard_normal((5, 6, 6))
    np.testing.assert_array_equal(
        render_grid(act, title="t").indices,
        render_grid(act.astype(np.float32), title="t").indices,
    )


def test_import_stays_light() -> None:
    code = (
        "import sys, numpy as np, actviz.render.grid as r;"
        "r.render_grid(np.ones((2, 3, 3)), title='t'); r.render_vector(np.ones(3), title='t');"
        "print(sorted(m for m in sys.modules if m.startswith(('torch', 'matplotlib.pyplot'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_clip_range_matches_numpy_percentiles() -> None:
    act = np.random.default_rng(10).standard_normal((6, 9, 11)).astype(np.float32) ** 2
    act[2, 4, 4] = np.nan
    finite_rows = [row[np.isfinite(row)] for row in act.reshape(6, -1)]
    per_channel = render_grid(act, title="t", clip=(2, 97.5))
    assert per_channel.vmin == pytest.approx(min(np.percentile(r, 2) for r in finite_rows))
    assert per_channel.vmax == pytest.approx(max(np.percentile(r, 97.5) for r in finite_rows))
    layer = render_grid(act, title="t", clip=(2, 97.5), norm="layer")
    everything = np.concatenate(finite_rows)
    assert layer.vmin == pytest.approx(np.percentile(everything, 2))
    assert layer.vmax == pytest.approx(np.percentile(everything, 97.5))


# --------------------------------------------------------------------------- through the CLI


@pytest.mark.slow
def test_shared_norm_sorts_channels_once_for_every_image(tmp_path: Path) -> None:
    from PIL import Image
    from typer.testing import CliRunner

    from actviz.cli import app
    from tests.conftest import run_images

    sample = Path(__file__).resolve().parent.parent / "sample_images"
    images = [
        shutil.copy(sample / src, tmp_path / f"{name}.jpg")
        for name, src in (("a", "cat.jpg"), ("b", "coffee.jpg"))
    ]
    out = tmp_path / "out"
    args = ["run", "resnet18", *map(str, images), "-w", "none", "-o", str(out), "-q"]
    args += ["-l", "layer3.0.conv1", "--norm", "shared", "--sort", "max", "-c", "9"]
    result = CliRunner().invoke(app, [*args, "--save-tensors"])
    assert result.exit_code == 0, result.output
    records = {i["out_dir"]: i for i in run_images(out)}
    saved = [np.load(out / name / "00_layer3.0.conv1.npy") for name in "ab"]  # (C, H, W)
    # Ranked by each channel's largest value over both images, then shown to both.
    peak = np.maximum(*(maps.reshape(maps.shape[0], -1).max(axis=1) for maps in saved))
    expected = [int(i) for i in np.argsort(-peak, kind="stable")[:9]]
    own = [
        list(np.argsort(-m.reshape(m.shape[0], -1).max(axis=1), kind="stable")[:9]) for m in saved
    ]
    assert own[0] != own[1]  # the images alone would pick different channels
    lo = min(float(m.min()) for m in saved)
    hi = max(float(m.max()) for m in saved)
    for name, maps in zip("ab", saved, strict=True):
        layer = records[name]["layers"][0]
        assert layer["channels"] == expected
        with Image.open(out / name / "00_layer3.0.conv1.png") as png:
            drawn = np.asarray(png)
        reference = render_grid(maps, title="t", channels=expected, value_range=(lo, hi))
        below = reference.indices.shape[0] - reference.header_height
        np.testing.assert_array_equal(drawn[-below:], reference.indices[-below:])


def test_tile_grid_places_every_tile_once_into_a_given_body() -> None:
    from actviz.render.palette import LABEL
    from actviz.render.tiling import body_shape, tile_grid, tile_layout

    levels = np.arange(7 * 3 * 2, dtype=np.uint8).reshape(7, 3, 2) + 10  # 7 tiles, 3 columns
    labels = [str(i) for i in range(7)]
    layout = tile_layout(6, 4, labels)
    shape = body_shape(7, 3, layout)
    out = np.full((shape[0] + 5, shape[1] + 9), BACKGROUND, dtype=np.uint8)
    region = out[5:, :-9]  # a strided region of a wider picture, as under a header
    drawn = tile_grid(levels, 3, 2, labels, out=region)
    assert drawn is region and np.array_equal(drawn, tile_grid(levels, 3, 2, labels))
    for position in range(9):
        top, left = layout.origin(position, 3)
        tile = region[top : top + 6, left : left + 4]
        if position < 7:  # upscaled by 2 in both directions, nearest neighbour
            assert np.array_equal(tile, levels[position].repeat(2, 0).repeat(2, 1))
            band = region[top - layout.label_height : top, left : left + 4]
            assert (band == LABEL).any()
        else:  # the empty cells of the last row stay background
            assert np.all(tile == BACKGROUND)
    assert np.all(out[:5] == BACKGROUND) and np.all(out[:, -9:] == BACKGROUND)
    with pytest.raises(ValueError, match="body's shape"):
        tile_grid(levels, 3, 2, labels, out=out)


@pytest.mark.parametrize("name", ["viridis", "RdBu_r", "inferno", "gray"])
@pytest.mark.parametrize("levels", [2, 17, 251, 256])
def test_the_kept_colormaps_equal_matplotlibs(name: str, levels: int) -> None:
    import matplotlib

    from actviz.render.colormaps import TABLES

    assert name in TABLES
    rgba = np.asarray(matplotlib.colormaps[name](np.linspace(0.0, 1.0, levels)))
    expected = np.clip(np.rint(rgba[:, :3] * 255.0), 0, 255).astype(np.uint8)
    colormap_lut.cache_clear()
    np.testing.assert_array_equal(colormap_lut(name, levels), expected)


def test_drawing_with_the_default_colormaps_does_not_import_matplotlib() -> None:
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from actviz.render.grid import render_grid\n"
        "render_grid(np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 4, 4), title='t')\n"
        "render_grid(np.linspace(0, 1, 32, dtype=np.float32).reshape(2, 4, 4), title='t')\n"
        "print('matplotlib' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_label_wider_than_its_tile_leaves_a_space_before_the_next_column() -> None:
    from actviz.render.legend import text_width
    from actviz.render.tiling import GAP, tile_layout

    narrow = tile_layout(40, 40, ["0", "1"])
    assert narrow.pitch[1] == 40 + GAP
    label = "ch 0, frame 1"
    wide = tile_layout(20, 20, [label, "frame 2"])
    assert wide.pitch[1] >= text_width(label, TILE_LABEL_SIZE) + 4 + GAP
