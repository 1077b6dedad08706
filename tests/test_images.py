"""Tests for actviz.io.images: discovery of inputs and decoding into RGB."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pytest
from PIL import Image, features

from actviz.errors import ImageLoadError
from actviz.io.images import ALLOWED_FORMATS, IMAGE_SUFFIXES, discover, load_rgb

RED = (255, 0, 0)
WHITE = (255, 255, 255)


def pixels(im: Image.Image) -> np.ndarray:
    return np.asarray(im).astype(np.int32)


def close_to(actual: object, expected: tuple[int, ...], tol: int = 12) -> bool:
    assert isinstance(actual, tuple)
    return all(abs(int(a) - int(e)) <= tol for a, e in zip(actual, expected, strict=True))


def save_rgb(
    path: Path, size: tuple[int, int] = (32, 24), colour: tuple[int, int, int] = RED
) -> Path:
    Image.new("RGB", size, colour).save(path)
    return path


def noisy_jpeg(path: Path, size: int = 160) -> Path:
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path, quality=95)
    return path


def expect_error(path: Path) -> ImageLoadError:
    with pytest.raises(ImageLoadError) as info:
        load_rgb(path)
    err = info.value
    assert "\n" not in str(err)
    assert err.path == str(path)
    return err


# --- load_rgb: images that must load and look right -------------------------------------------


def test_rgb_jpeg(tmp_path: Path) -> None:
    path = save_rgb(tmp_path / "a.jpg", (40, 30), (10, 200, 30))
    im = load_rgb(path)
    assert im.mode == "RGB"
    assert im.size == (40, 30)
    assert close_to(im.getpixel((20, 15)), (10, 200, 30))


def test_result_is_detached_from_the_file(tmp_path: Path) -> None:
    path = save_rgb(tmp_path / "a.png")
    im = load_rgb(path)
    path.unlink()  # the pixels must already be in memory
    assert im.getpixel((0, 0)) == RED
    assert im.copy().size == (32, 24)


def test_rgba_transparency_becomes_background(tmp_path: Path) -> None:
    data = np.zeros((20, 20, 4), dtype=np.uint8)  # fully transparent black
    data[5:15, 5:15] = (255, 0, 0, 255)  # opaque red square
    path = tmp_path / "alpha.png"
    Image.fromarray(data).save(path)
    im = load_rgb(path)
    assert im.mode == "RGB"
    assert im.getpixel((0, 0)) == WHITE
    assert im.getpixel((10, 10)) == RED
    other = load_rgb(path, background=(0, 0, 255))
    assert other.getpixel((0, 0)) == (0, 0, 255)
    assert other.getpixel((10, 10)) == RED


def test_half_transparent_pixels_are_blended(tmp_path: Path) -> None:
    path = tmp_path / "half.png"
    Image.new("RGBA", (4, 4), (0, 0, 0, 128)).save(path)
    assert close_to(load_rgb(path).getpixel((0, 0)), (127, 127, 127), tol=2)


def test_palette_with_transparency(tmp_path: Path) -> None:
    im = Image.new("P", (10, 10), 0)
    im.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    im.paste(1, (0, 0, 5, 10))  # left half red, right half palette index 0 (black)
    path = tmp_path / "pal.png"
    im.save(path, transparency=0)
    out = load_rgb(path)
    assert out.getpixel((2, 5)) == RED
    assert out.getpixel((8, 5)) == WHITE  # transparent, not black


def test_palette_without_transparency(tmp_path: Path) -> None:
    path = tmp_path / "pal.gif"
    Image.new("RGB", (8, 8), (0, 0, 255)).convert("P").save(path)
    assert load_rgb(path).getpixel((3, 3)) == (0, 0, 255)


def test_la(tmp_path: Path) -> None:
    data = np.zeros((10, 10, 2), dtype=np.uint8)
    data[:, :5] = (100, 255)  # opaque grey left half; right half transparent
    path = tmp_path / "la.png"
    Image.fromarray(data, "LA").save(path)
    out = load_rgb(path)
    assert out.getpixel((2, 2)) == (100, 100, 100)
    assert out.getpixel((8, 2)) == WHITE


@pytest.mark.parametrize("mode", ["1", "L", "YCbCr", "LAB"])
def test_other_modes_convert(tmp_path: Path, mode: str) -> None:
    source = Image.new("RGB", (6, 6), (200, 200, 200)).convert(mode)
    path = tmp_path / "m.tiff"
    source.save(path)
    out = load_rgb(path)
    assert out.mode == "RGB"
    expected = source.convert("RGB").getpixel((0, 0))
    assert isinstance(expected, tuple)
    assert close_to(out.getpixel((0, 0)), expected, tol=1)


def test_cmyk_jpeg_keeps_colour(tmp_path: Path) -> None:
    path = tmp_path / "cmyk.jpg"
    Image.new("RGB", (16, 16), (220, 30, 30)).convert("CMYK").save(path, quality=95)
    with Image.open(path) as raw:
        assert raw.mode == "CMYK"
    out = load_rgb(path)
    assert out.mode == "RGB"
    assert close_to(out.getpixel((8, 8)), (220, 30, 30), tol=20)


def ramp16(width: int = 1024) -> np.ndarray:
    row = np.linspace(0, 65535, width).round().astype(np.uint16)
    return np.tile(row, (4, 1))


def assert_full_monotonic_ramp(im: Image.Image) -> None:
    assert im.mode == "RGB"
    row = pixels(im)[1, :, 0]
    assert row[0] == 0
    assert row[-1] == 255
    assert len(np.unique(row)) == 256
    assert np.all(np.diff(row) >= 0)
    channels = pixels(im)
    assert np.array_equal(channels[..., 0], channels[..., 1])


def test_16_bit_png_ramp_keeps_full_range(tmp_path: Path) -> None:
    path = tmp_path / "ramp16.png"
    Image.fromarray(ramp16()).save(path)
    with Image.open(path) as raw:
        assert raw.mode.startswith("I")
    assert_full_monotonic_ramp(load_rgb(path))


def test_16_bit_big_endian_tiff(tmp_path: Path) -> None:
    data = ramp16()
    im = Image.frombytes("I;16B", (data.shape[1], data.shape[0]), data.astype(">u2").tobytes())
    path = tmp_path / "ramp16b.tif"
    im.save(path)
    assert_full_monotonic_ramp(load_rgb(path))


def test_32_bit_int_outside_16_bit_is_stretched(tmp_path: Path) -> None:
    row = np.linspace(-100_000, 3_000_000, 512).astype(np.int32)
    path = tmp_path / "i32.tif"
    Image.fromarray(np.tile(row, (3, 1))).save(path)
    out = pixels(load_rgb(path))[0, :, 0]
    assert out[0] == 0
    assert out[-1] == 255
    assert np.all(np.diff(out) >= 0)


def test_16_bit_dark_image_keeps_its_brightness(tmp_path: Path) -> None:
    path = tmp_path / "dark16.png"
    Image.fromarray(np.full((4, 4), 257 * 40, dtype=np.uint16)).save(path)
    assert load_rgb(path).getpixel((0, 0)) == (40, 40, 40)


def test_float_tiff_unit_range(tmp_path: Path) -> None:
    values = np.tile(np.linspace(0.0, 1.0, 101, dtype=np.float32), (3, 1))
    path = tmp_path / "unit.tif"
    Image.fromarray(values).save(path)
    out = pixels(load_rgb(path))[1, :, 0]
    assert out.max() == 255
    assert np.abs(out - values[1] * 255).max() <= 1
    assert load_rgb(path).getpixel((50, 0)) in {(127, 127, 127), (128, 128, 128)}


def test_float_tiff_wide_range_and_nan(tmp_path: Path) -> None:
    values = np.tile(np.linspace(-5.0, 5.0, 101, dtype=np.float32), (3, 1))
    values[2, 10] = np.nan
    path = tmp_path / "wide.tif"
    Image.fromarray(values).save(path)
    out = pixels(load_rgb(path))[..., 0]
    assert out[0, 0] == 0
    assert out[0, -1] == 255
    assert abs(out[0, 50] - 127.5) <= 1
    assert np.all(np.diff(out[0]) >= 0)
    assert out[2, 10] == 0


def test_float_constant_image_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "flat.tif"
    Image.fromarray(np.full((3, 3), 0.5, dtype=np.float32)).save(path)
    assert load_rgb(path).getpixel((1, 1)) in {(127, 127, 127), (128, 128, 128)}


def test_animated_gif_gives_first_frame(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (12, 12), colour) for colour in (RED, (0, 0, 255), (0, 255, 0))]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    with Image.open(path) as raw:
        assert getattr(raw, "n_frames", 1) == 3
    out = load_rgb(path)
    assert out.size == (12, 12)
    assert out.getpixel((6, 6)) == RED


def test_multi_frame_tiff_gives_first_frame(tmp_path: Path) -> None:
    frames = [Image.new("L", (5, 5), value) for value in (10, 200)]
    path = tmp_path / "pages.tif"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    assert load_rgb(path).getpixel((2, 2)) == (10, 10, 10)


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    stored = Image.new("RGB", (60, 40), (0, 0, 0))
    stored.paste(RED, (0, 0, 15, 15))  # mark the stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    path = tmp_path / "rotated.jpg"
    stored.save(path, exif=exif, quality=95)
    out = load_rgb(path)
    assert out.size == (40, 60)
    # Turning clockwise moves the stored top-left corner to the top-right.
    assert close_to(out.getpixel((33, 6)), RED, tol=30)
    assert close_to(out.getpixel((6, 6)), (0, 0, 0), tol=30)
    assert close_to(out.getpixel((6, 53)), (0, 0, 0), tol=30)


@pytest.mark.parametrize("size", [(1, 1), (1000, 2), (2, 1000)])
def test_tiny_and_extreme_aspect_ratios(tmp_path: Path, size: tuple[int, int]) -> None:
    path = save_rgb(tmp_path / "odd.png", size, (1, 2, 3))
    out = load_rgb(path)
    assert out.size == size
    assert out.getpixel((size[0] - 1, size[1] - 1)) == (1, 2, 3)


@pytest.mark.skipif(not features.check("webp"), reason="Pillow built without WebP")
def test_webp_with_alpha(tmp_path: Path) -> None:
    data = np.zeros((16, 16, 4), dtype=np.uint8)
    data[:, :8] = (0, 0, 255, 255)
    path = tmp_path / "a.webp"
    Image.fromarray(data).save(path, lossless=True)
    out = load_rgb(path)
    assert out.getpixel((2, 8)) == (0, 0, 255)
    assert out.getpixel((13, 8)) == WHITE


@pytest.mark.parametrize("name", ["my photo.jpg", "фото 日本.png", "[bold]x.jpg"])
def test_awkward_file_names(tmp_path: Path, name: str) -> None:
    path = save_rgb(tmp_path / name, colour=(0, 128, 0))
    assert close_to(load_rgb(path).getpixel((4, 4)), (0, 128, 0))
    found = discover([tmp_path])
    assert [item.rel for item in found.images] == [PurePosixPath(name)]


# --- load_rgb: files that must fail with a clear one-line reason --------------------------------


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    assert expect_error(path).reason == "file is empty"


def test_text_file_with_image_extension(tmp_path: Path) -> None:
    path = tmp_path / "notes.jpg"
    path.write_text("just some notes\nnot a picture\n", encoding="utf-8")
    err = expect_error(path)
    assert err.reason == "not an image (text file?)"
    assert str(err) == f"cannot read image {path}: not an image (text file?)"


def test_unsupported_binary_format(tmp_path: Path) -> None:
    path = tmp_path / "icon.png"
    Image.new("RGB", (16, 16)).save(path, format="ICO")  # Pillow reads ICO; we do not
    assert "not a supported image" in expect_error(path).reason


def test_damaged_header(tmp_path: Path) -> None:
    path = tmp_path / "bad.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00\xff" * 20)
    assert expect_error(path).reason == "damaged PNG header"


@pytest.mark.parametrize("suffix", [".jpg", ".png"])
def test_truncated_image(tmp_path: Path, suffix: str) -> None:
    whole = noisy_jpeg(tmp_path / "whole.jpg")
    if suffix == ".png":
        with Image.open(whole) as im:
            im.save(whole.with_suffix(".png"))
        whole = whole.with_suffix(".png")
    data = whole.read_bytes()
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(data[: len(data) // 2])
    assert expect_error(path).reason == "truncated image data"


@pytest.mark.parametrize("limit_factor", [0.75, 0.25], ids=["warning-level", "error-level"])
def test_decompression_bomb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit_factor: float
) -> None:
    path = save_rgb(tmp_path / "big.png", (100, 100))
    limit = int(100 * 100 * limit_factor)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    err = expect_error(path)
    assert err.reason == f"image too large: 10000 pixels exceeds the limit of {limit}"


def test_bomb_check_leaves_global_warning_filters_alone(tmp_path: Path) -> None:
    import warnings

    before = list(warnings.filters)
    load_rgb(save_rgb(tmp_path / "ok.png"))
    assert warnings.filters == before


def lock(path: Path) -> None:
    path.chmod(0)
    try:
        path.open("rb").close()
    except PermissionError:
        return
    path.chmod(0o644)
    pytest.skip("this user reads files regardless of their permissions (root)")


def test_permission_denied(tmp_path: Path) -> None:
    path = save_rgb(tmp_path / "locked.jpg")
    lock(path)
    try:
        assert expect_error(path).reason == "permission denied"
    finally:
        path.chmod(0o644)


def test_permission_denied_in_folders(tmp_path: Path) -> None:
    save_rgb(tmp_path / "open.png")
    named = save_rgb(tmp_path / "locked.png")
    unnamed = tmp_path / "locked.dat"  # would need reading to know it is an image
    Image.new("RGB", (4, 4)).save(unnamed, format="PNG")
    lock(named)
    lock(unnamed)
    try:
        found = discover([tmp_path])
        assert [str(item.rel) for item in found.images] == ["locked.png", "open.png"]
        assert found.skipped == [(unnamed, "permission denied")]
    finally:
        named.chmod(0o644)
        unnamed.chmod(0o644)


def test_permission_denied_while_opening(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Also checked when running as root, where chmod cannot make a file unreadable.
    path = save_rgb(tmp_path / "locked.jpg")

    def refuse(*args: object, **kwargs: object) -> Image.Image:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Image, "open", refuse)
    assert expect_error(path).reason == "permission denied"


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (SyntaxError("not a TIFF file"), "damaged image data (not a TIFF file)"),
        (ValueError("tile cannot\nextend outside image"), "damaged image data (tile cannot"),
        (EOFError(), "truncated image data"),
        (OSError("broken data stream when reading image file"), "damaged image data (broken"),
    ],
)
def test_decoder_errors_become_one_line_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception, reason: str
) -> None:
    path = save_rgb(tmp_path / "x.png")

    def broken_load(self: Image.Image) -> None:
        raise exc

    monkeypatch.setattr(Image.Image, "load", broken_load)
    err = expect_error(path)
    assert err.reason.startswith(reason)
    assert "Error" not in err.reason


def test_folder_passed_as_file(tmp_path: Path) -> None:
    assert expect_error(tmp_path).reason == "is a folder, not a file"


def test_missing_file(tmp_path: Path) -> None:
    assert expect_error(tmp_path / "nope.jpg").reason == "no such file"


# --- discover ------------------------------------------------------------------------------------


def rels(paths: list[PurePosixPath]) -> list[str]:
    return [str(p) for p in paths]


def test_discover_walks_folders_in_order(tmp_path: Path) -> None:
    root = tmp_path / "in"
    for sub in ("b", "a", "a/deep", "B"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for rel in ("b/x.jpg", "a/x.jpg", "a/deep/x.png", "B/y.PNG", "top.jpg", "a-b.gif"):
        save_rgb(root / rel)
    # Not meant as inputs: ignored without a word.
    save_rgb(root / ".hidden.jpg")
    save_rgb(root / "._x.jpg")
    (root / ".git").mkdir()
    save_rgb(root / ".git" / "inside.jpg")
    (root / "__MACOSX").mkdir()
    save_rgb(root / "__MACOSX" / "x.jpg")
    # Looked at by content.
    (root / "readme.txt").write_text("hello", encoding="utf-8")
    with Image.new("RGB", (4, 4)) as im:
        im.save(root / "a" / "blob.dat", format="PNG")
    # Meant as an image by its name: kept, so that it fails loudly later.
    (root / "broken.jpg").write_bytes(b"garbage")

    found = discover([root])
    assert rels([item.rel for item in found.images]) == [
        "B/y.PNG",
        "a/blob.dat",
        "a/deep/x.png",
        "a/x.jpg",
        "a-b.gif",
        "b/x.jpg",
        "broken.jpg",
        "top.jpg",
    ]
    assert all(item.path == root / item.rel for item in found.images)
    assert found.skipped == [(root / "readme.txt", "not an image")]
    assert discover([root]) == found  # deterministic
    assert discover([root, root / "a", root]) == found  # each file once


def test_discover_keeps_command_line_order_and_dedupes(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    inner = save_rgb(folder / "z.png")
    save_rgb(folder / "a.png")
    named = save_rgb(tmp_path / "named.jpg")
    found = discover([named, folder, inner, tmp_path / "." / "named.jpg"])
    assert [(item.path, str(item.rel)) for item in found.images] == [
        (named, "named.jpg"),
        (folder / "a.png", "a.png"),
        (inner, "z.png"),
    ]


def test_discover_includes_named_files_whatever_they_hold(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an image", encoding="utf-8")
    hidden = save_rgb(tmp_path / ".hidden.png")
    found = discover([text, hidden])
    assert [item.rel for item in found.images] == [
        PurePosixPath("notes.txt"),
        PurePosixPath(".hidden.png"),
    ]
    assert found.skipped == []
    with pytest.raises(ImageLoadError):
        load_rgb(text)


def test_discover_skips_empty_and_unsupported_files(tmp_path: Path) -> None:
    (tmp_path / "empty.bin").write_bytes(b"")
    Image.new("RGB", (16, 16)).save(tmp_path / "icon.ico")
    found = discover([tmp_path])
    assert found.images == []
    assert found.skipped == [
        (tmp_path / "empty.bin", "file is empty"),
        (tmp_path / "icon.ico", "not an image"),
    ]


def test_discover_missing_input(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(ImageLoadError) as info:
        discover([save_rgb(tmp_path / "ok.png"), missing])
    assert info.value.reason == "no such file or folder; check the path"
    assert info.value.path == str(missing)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_discover_survives_link_loops(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    save_rgb(root / "sub" / "x.png")
    (root / "sub" / "loop").symlink_to(root, target_is_directory=True)
    (root / "alias.png").symlink_to(root / "sub" / "x.png")
    found = discover([root])
    assert rels([item.rel for item in found.images]) == ["alias.png"]
    assert [reason for _, reason in found.skipped] == ["link to an enclosing folder (not followed)"]


def test_constants() -> None:
    assert ALLOWED_FORMATS == ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
    assert {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"} == IMAGE_SUFFIXES


# --- robustness ----------------------------------------------------------------------------------


def only_rgb_or_image_load_error(load: Callable[[], Image.Image]) -> None:
    try:
        im = load()
    except ImageLoadError as err:
        assert "\n" not in str(err)
        assert err.reason
    else:
        assert im.mode == "RGB"


def fuzz_settings(hypothesis: Any) -> Any:
    # No example database: the tests must not write into the checkout.
    return hypothesis.settings(max_examples=100, deadline=None, database=None)


def test_random_bytes_never_escape_as_other_errors(tmp_path: Path) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    headers = [b"", b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"II*\x00", b"BM", b"RIFF"]
    path = tmp_path / "fuzz"

    def check(suffix: str, header: bytes, body: bytes) -> None:
        target = path.with_suffix(suffix)
        target.write_bytes(header + body)
        only_rgb_or_image_load_error(lambda: load_rgb(target))

    given = hypothesis.given(
        suffix=st.sampled_from(sorted(IMAGE_SUFFIXES)),
        header=st.sampled_from(headers),
        body=st.binary(max_size=2048),
    )
    run = fuzz_settings(hypothesis)(given(check))
    run()


def test_corrupted_real_images_never_escape_as_other_errors(tmp_path: Path) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    originals: list[bytes] = []
    for fmt in ("JPEG", "PNG", "GIF", "BMP", "TIFF"):
        source = tmp_path / f"source.{fmt.lower()}"
        Image.new("RGB", (24, 16), (90, 160, 30)).save(source, format=fmt)
        originals.append(source.read_bytes())
    path = tmp_path / "mangled.img"

    def check(index: int, cut: float, flips: list[tuple[float, int]]) -> None:
        data = bytearray(originals[index])
        for where, value in flips:
            data[int(where * (len(data) - 1))] = value
        path.write_bytes(bytes(data[: max(1, int(cut * len(data)))]))
        only_rgb_or_image_load_error(lambda: load_rgb(path))

    given = hypothesis.given(
        index=st.integers(0, len(originals) - 1),
        cut=st.floats(0.0, 1.0),
        flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 255)), max_size=8),
    )
    run = fuzz_settings(hypothesis)(given(check))
    run()


def test_batches_split_where_the_input_shape_changes(tmp_path: Path) -> None:
    """Segmentation presets keep each image's aspect ratio: a batch must still stack."""
    from torchvision.models.segmentation import FCN_ResNet50_Weights

    from actviz.io.loader import decode_batches
    from actviz.models.sources.torchvision import weights_preprocessing

    preprocess = weights_preprocessing(FCN_ResNet50_Weights.DEFAULT, input_size=None)
    sizes = [(60, 40), (90, 60), (40, 60), (40, 60), None, (40, 60), (60, 60)]
    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"{i}.png"
        if size is None:
            path.write_bytes(b"not an image")
        else:
            Image.new("RGB", size, (i * 20, 0, 0)).save(path)
        paths.append(path)
    for workers in (0, 1):
        batches = list(decode_batches(paths, preprocess, batch_size=8, workers=workers))
        assert [[item.index for item in batch] for batch in batches] == [
            [0, 1],  # 60x40 and 90x60 both become 780x520
            [2, 3, 4, 5],  # the unreadable one stays in order with its neighbours
            [6],
        ]
        for batch in batches:
            assert len({tuple(item.tensor.shape) for item in batch if item.tensor is not None}) == 1
        assert batches[1][2].tensor is None and batches[1][2].error
