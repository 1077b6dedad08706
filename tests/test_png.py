"""actviz's PNG encoder: lossless for every kind of picture it writes, whoever deflates."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from actviz import output
from actviz.render import png
from actviz.render.png import encode_png


def _decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


@pytest.fixture(params=["isal", "zlib"])
def deflater(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "zlib":
        monkeypatch.setattr(png, "_ISAL", None)  # as on a platform without the isal wheel
    elif png._ISAL is None:
        pytest.skip("isal is not installed")
    return str(request.param)


@pytest.mark.parametrize("level", [0, 1, 3, 6, 9])
def test_palette_grey_and_rgb_round_trip(deflater: str, level: int) -> None:
    rng = np.random.default_rng(level)
    indices = rng.integers(0, 256, (37, 53), dtype=np.uint8)
    palette = rng.integers(0, 256, (256, 3), dtype=np.uint8)
    image = _decode(encode_png(indices, palette=palette, level=level))
    assert image.mode == "P" and image.size == (53, 37)
    assert np.array_equal(np.asarray(image), indices)
    assert np.array_equal(np.asarray(image.convert("RGB")), palette[indices])

    grey = _decode(encode_png(indices, level=level))
    assert grey.mode == "L" and np.array_equal(np.asarray(grey), indices)

    rgb = rng.integers(0, 256, (29, 31, 3), dtype=np.uint8)
    rgb[10:] = rgb[9]  # flat rows: what the "up" filter turns into zeros
    for row_filter in ("none", "up"):
        back = _decode(encode_png(rgb, level=level, row_filter=row_filter))  # type: ignore[arg-type]
        assert back.mode == "RGB" and np.array_equal(np.asarray(back), rgb)


def test_up_filter_shrinks_smooth_pictures() -> None:
    ramp = np.broadcast_to(np.arange(200, dtype=np.uint8)[:, None, None], (200, 300, 3))
    noisy = np.ascontiguousarray(ramp) + np.random.default_rng(0).integers(
        0, 2, (1, 300, 3), dtype=np.uint8
    )
    assert len(encode_png(noisy, row_filter="up")) < len(encode_png(noisy, row_filter="none"))


def test_levels_choose_the_deflater(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake(data: bytes, level: int) -> bytes:
        calls.append(level)
        return zlib.compress(data, level)

    def fake_stream(level: int, method: int, wbits: int) -> Any:
        calls.append(level)
        return zlib.compressobj(level, method, wbits)

    fake_isal = SimpleNamespace(compress=fake, compressobj=fake_stream, Z_FULL_FLUSH=3)
    monkeypatch.setattr(png, "_ISAL", fake_isal)
    for level in range(10):
        png.deflate(b"x" * 100, level)
    assert calls == [1, 2, 3]  # 0 (stored) and 4-9 (smaller files) are zlib's
    calls.clear()
    for level in range(10):
        png.deflate_band(np.zeros((2, 3), np.uint8), level=level)
    assert calls == [1, 2, 3]


def _idat(data: bytes) -> bytes:
    """The zlib stream of a PNG's IDAT chunks."""
    pos, stream = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        if data[pos + 4 : pos + 8] == b"IDAT":
            stream += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return stream


@pytest.mark.parametrize("level", [0, 1, 6])
def test_bands_join_into_one_png(deflater: str, level: int) -> None:
    rng = np.random.default_rng(level)
    for shape in [(5, 7, 3), (40, 7, 3), (1, 7, 3), (3, 9), (31, 9)]:
        parts = [rng.integers(0, 256, (int(rng.integers(1, 30)), *shape[1:]), np.uint8)]
        parts += [rng.integers(0, 256, shape, np.uint8) for _ in range(3)]
        parts[1][1:] = parts[1][0]  # flat rows, which "up" turns into zeros
        for row_filter in ("none", "up"):
            bands = [png.deflate_band(p, level=level, row_filter=row_filter) for p in parts]  # type: ignore[arg-type]
            for order in ([0, 1, 2, 3], [3, 1, 0, 2], [2]):
                data = png.join_bands([bands[i] for i in order])
                whole = np.concatenate([parts[i] for i in order])
                assert np.array_equal(np.asarray(_decode(data)), whole)
                # zlib checks the joined stream's Adler-32 as it inflates it.
                rows = zlib.decompress(_idat(data))
                assert len(rows) == whole.shape[0] * (whole[0].size + 1)


@pytest.mark.parametrize("level", [0, 1, 6])
def test_bands_made_together_are_the_bands_made_one_at_a_time(deflater: str, level: int) -> None:
    rng = np.random.default_rng(level)
    for shape in [(4, 5, 7, 3), (3, 1, 7, 3), (2, 6, 9), (1, 3, 4)]:
        pictures = rng.integers(0, 256, shape, np.uint8)
        pictures[0, 1:] = pictures[0, 0]  # flat rows, which "up" turns into zeros
        for row_filter in ("none", "up"):
            together = png.deflate_bands(pictures, level=level, row_filter=row_filter)  # type: ignore[arg-type]
            alone = [png.deflate_band(p, level=level, row_filter=row_filter) for p in pictures]  # type: ignore[arg-type]
            assert together == alone
            # Each is only its own rows: the first row of each is not filtered by another's.
            for band, picture in zip(together, pictures, strict=True):
                assert np.array_equal(np.asarray(_decode(png.join_bands([band]))), picture)
    with pytest.raises(ValueError, match="RGB"):
        png.deflate_bands(np.zeros((2, 3, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        png.deflate_bands(np.zeros((3, 4), np.uint8))


def test_adler32_combined_equals_the_whole() -> None:
    rng = np.random.default_rng(0)
    for n1, n2 in [(1, 1), (5, 70_000), (200_000, 3), (65_521, 65_521), (131_043, 1)]:
        a = rng.integers(0, 256, n1, np.uint8).tobytes()
        b = rng.integers(250, 256, n2, np.uint8).tobytes()  # sums that wrap the modulus
        combined = png._adler32_combine(zlib.adler32(a), zlib.adler32(b), n2)
        assert combined == zlib.adler32(a + b)


def test_a_shared_band_is_deflated_once_and_bad_bands_are_refused() -> None:
    made: list[int] = []

    def make() -> np.ndarray:
        made.append(1)
        return np.full((4, 6, 3), 7, np.uint8)

    bands = png.Bands(level=1, row_filter="up")
    first = bands.shared(("header", "t"), make)
    assert bands.shared(("header", "t"), make) is first and len(made) == 1
    assert bands.shared(("header", "u"), make) is not first and len(made) == 2
    with pytest.raises(ValueError, match="same width"):
        png.join_bands([first, png.deflate_band(np.zeros((2, 5, 3), np.uint8))])
    with pytest.raises(ValueError, match="same width"):
        png.join_bands([first, png.deflate_band(np.zeros((2, 6), np.uint8))])
    with pytest.raises(ValueError, match="at least one band"):
        png.join_bands([])
    with pytest.raises(ValueError, match="uint8"):
        png.deflate_band(np.zeros((0, 6), np.uint8))
    # Four channels: the picture's own shape in the message, not the batch it would join.
    with pytest.raises(ValueError, match=r"got uint8 \(2, 6, 4\)$"):
        png.deflate_band(np.zeros((2, 6, 4), np.uint8))


def test_a_small_palette_and_bad_input() -> None:
    two = np.array([[0, 1], [1, 0]], dtype=np.uint8)
    image = _decode(encode_png(two, palette=np.array([[0, 0, 0], [255, 0, 0]], np.uint8)))
    assert image.convert("RGB").getpixel((1, 0)) == (255, 0, 0)
    with pytest.raises(ValueError, match="uint8"):
        encode_png(two.astype(np.float32))
    with pytest.raises(ValueError, match="RGB"):
        encode_png(np.zeros((2, 2, 4), np.uint8))
    with pytest.raises(ValueError, match="1 to 256"):
        encode_png(two, palette=np.zeros((300, 3), np.uint8))


def test_odd_shapes_and_strided_arrays_round_trip() -> None:
    rng = np.random.default_rng(2)
    base = rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)
    for pixels in (base[:1], base[:, :1], base[::-1, ::2], np.asfortranarray(base[..., 0])):
        for row_filter in ("none", "up"):
            back = _decode(encode_png(pixels, row_filter=row_filter))  # type: ignore[arg-type]
            assert np.array_equal(np.asarray(back), pixels)


def test_indices_past_a_short_palette_are_black() -> None:
    indices = np.array([[0, 1, 5]], dtype=np.uint8)
    palette = np.array([[9, 9, 9], [200, 0, 0]], dtype=np.uint8)
    image = _decode(encode_png(indices, palette=palette))
    assert np.array_equal(np.asarray(image), indices)
    assert [image.convert("RGB").getpixel((x, 0)) for x in range(3)] == [
        (9, 9, 9),
        (200, 0, 0),
        (0, 0, 0),
    ]
    assert len(image.getpalette() or []) == 6 * 3  # padded to the highest index, no further


def test_write_png_encodes_what_it_can_and_hands_the_rest_to_pillow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(1)
    rgb = Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8))
    rgba = Image.fromarray(rng.integers(0, 256, (20, 30, 4), dtype=np.uint8))
    paletted = rgb.convert("P")
    translucent = Image.new("P", (3, 2))
    translucent.putpalette([255, 0, 0, 128, 0, 255, 0, 255], "RGBA")
    profiled = rgb.copy()
    profiled.info["icc_profile"] = b"not really a profile"
    bare = Image.new("P", (4, 4))  # no palette at all
    ours = {"rgb", "p", "grey"}
    pictures = {
        "rgb": rgb,
        "p": paletted,
        "grey": rgb.convert("L"),
        "rgba": rgba,
        "translucent": translucent,
        "profiled": profiled,
        "bare": bare,
    }
    encoded: list[tuple[int, ...]] = []
    real = png.encode_png

    def spy(pixels: np.ndarray, **kwargs: object) -> bytes:
        encoded.append(pixels.shape)
        return real(pixels, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(png, "encode_png", spy)
    for name, picture in pictures.items():
        target = tmp_path / f"{name}.png"
        before = len(encoded)
        output.write_bytes(target, png.picture_png(picture))
        assert (len(encoded) > before) == (name in ours), name
        with Image.open(target) as back:
            assert back.mode == picture.mode, name
            assert np.array_equal(
                np.asarray(back.convert("RGBA")), np.asarray(picture.convert("RGBA"))
            ), name
            if name == "profiled":
                assert back.info.get("icc_profile") == b"not really a profile"
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one pixel"):
        encode_png(np.zeros((0, 4), np.uint8))
    with pytest.raises(ValueError, match="uint8 palette"):
        encode_png(np.zeros((2, 2), np.uint8), palette=np.zeros((4, 3), np.int64))


def test_a_grid_encodes_to_the_picture_pillow_would_show() -> None:
    from actviz.render.grid import render_grid

    maps = np.random.default_rng(3).standard_normal((5, 6, 7)).astype(np.float32)
    grid = render_grid(maps, title="layer", max_channels=0)
    back = _decode(grid.to_png())
    assert back.mode == "P" and back.size == grid.size
    assert np.array_equal(np.asarray(back.convert("RGB")), np.asarray(grid.to_pil().convert("RGB")))
