"""The model-input frame and heat maps blended over it, checked pixel by pixel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms._presets import ImageClassification

from actviz.render.overlay import (
    LABEL_HEIGHT,
    PANEL_GAP,
    blend,
    cam_panel,
    input_view,
)


def _photo(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    pixels = np.stack([xx * 7 % 256, yy * 5 % 256, (xx + yy) % 256], axis=-1)
    pixels = (pixels + rng.integers(0, 30, pixels.shape)) % 256
    return Image.fromarray(pixels.astype(np.uint8))


def test_a_heat_peak_lands_on_its_model_input_cell() -> None:
    heat = np.zeros((7, 7), dtype=np.float32)
    heat[2, 5] = 1.0
    view = Image.new("RGB", (224, 160), (0, 0, 0))  # cells are 32 wide and ~22.9 tall
    out = blend(view, heat, cmap="gray", alpha=1.0)
    assert out.shape == (160, 224, 3)
    red = out[..., 0].astype(int)
    row, col = np.unravel_index(int(red.argmax()), red.shape)
    # Cell (2, 5) spans rows 45.7-68.6 and columns 160-192; its centre is the peak.
    assert abs(row - 57.1) <= 1 and abs(col - 176) <= 1
    assert red[int(row), int(col)] >= 240
    # The weighted centre of the blob, in continuous pixel coordinates, is the cell centre:
    # no half-pixel shift (the map's cells are not treated as corner samples).
    ys, xs = np.mgrid[0:160, 0:224] + 0.5
    assert abs((ys * red).sum() / red.sum() - 2.5 * 160 / 7) < 0.1
    assert abs((xs * red).sum() / red.sum() - 5.5 * 32) < 0.1
    # Bilinear support ends at the neighbouring cells' centres: rows 34.3/80, columns 144/208.
    assert red[:34].max() == 0 and red[81:].max() == 0
    assert red[:, :144].max() == 0 and red[:, 209:].max() == 0


def test_a_bright_object_in_the_photo_gets_the_heat_over_it() -> None:
    pixels = np.full((300, 400, 3), 40, dtype=np.uint8)
    pixels[100:140, 200:240] = 255  # a white square, in photo coordinates
    image = Image.fromarray(pixels)
    transform = ImageClassification(crop_size=224, resize_size=256)
    x = transform(image)
    # A "CAM" that is the brightness of the model input pooled to 7 x 7 cells.
    brightness = x.mean(dim=0, keepdim=True).unsqueeze(0)
    pooled = torch.nn.functional.adaptive_avg_pool2d(brightness, 7)[0, 0]
    heat = ((pooled - pooled.min()) / (pooled.max() - pooled.min())).numpy()
    view = input_view(x.numpy(), transform.mean, transform.std)
    out = blend(view, heat, cmap="gray", alpha=1.0)
    row, col = np.unravel_index(int(out[..., 0].argmax()), out.shape[:2])
    # The square in the view: scale 256/300, then the crop removes 58 columns and 16 rows.
    top, bottom = 100 * 256 / 300 - 16, 140 * 256 / 300 - 16
    left, right = 200 * 256 / 300 - 58, 240 * 256 / 300 - 58
    assert top - 16 <= row <= bottom + 16 and left - 16 <= col <= right + 16
    assert np.asarray(view)[int((top + bottom) / 2), int((left + right) / 2)].min() >= 254


def test_blend_mixes_colours_and_photo() -> None:
    view = Image.new("RGB", (8, 8), (100, 100, 100))
    hot = blend(view, np.ones((2, 2)), cmap="gray", alpha=0.25)
    cold = blend(view, np.zeros((2, 2)), cmap="gray", alpha=0.25)
    assert hot.dtype == np.uint8 and np.all(hot == 139) and np.all(cold == 75)
    assert np.array_equal(blend(view, np.ones((2, 2)), alpha=0.0), np.asarray(view))
    nan = blend(view, np.full((2, 2), np.nan), cmap="gray", alpha=1.0)
    assert np.all(nan == 0)
    jet = blend(view, np.ones((2, 2)), cmap="jet", alpha=1.0)
    assert tuple(jet[0, 0]) == (127, 0, 0)  # jet's top colour, dark red
    with pytest.raises(ValueError, match="alpha"):
        blend(view, np.ones((2, 2)), alpha=1.5)
    with pytest.raises(ValueError, match="unknown colormap 'nope'"):
        blend(view, np.ones((2, 2)), cmap="nope")
    with pytest.raises(ValueError, match=r"\(h, w\)"):
        blend(view, np.ones((2, 2, 2)))


def test_cam_panel_puts_labelled_panels_side_by_side() -> None:
    view = _photo(64, 48)
    heats = [("tabby 41.0%", np.eye(6)), ("a very long class name indeed 3.0%", np.ones((6, 6)))]
    panel = cam_panel(view, heats, alpha=0.5)
    assert panel.shape == (LABEL_HEIGHT + 48, 3 * 64 + 2 * PANEL_GAP, 3)
    body = panel[LABEL_HEIGHT:]
    assert np.array_equal(body[:, :64], np.asarray(view))
    second = body[:, 64 + PANEL_GAP : 128 + PANEL_GAP]
    assert np.array_equal(second, blend(view, np.eye(6), alpha=0.5))
    for i in range(3):
        strip = panel[:LABEL_HEIGHT, i * (64 + PANEL_GAP) : i * (64 + PANEL_GAP) + 64]
        assert (strip.min(axis=-1) > 150).sum() > 10  # some light text on the dark strip
    assert np.all(panel[LABEL_HEIGHT:, 64 : 64 + PANEL_GAP] == 38)  # the gap
    no_view = cam_panel(view, heats[:1], include_view=False)
    assert no_view.shape == (LABEL_HEIGHT + 48, 64, 3)
    with pytest.raises(ValueError, match="at least one"):
        cam_panel(view, [])


def test_long_panel_labels_keep_their_class_index_and_probability() -> None:
    from actviz.render.legend import font as font_of
    from actviz.render.overlay import _fit
    from actviz.render.theme import CAPTION_SIZE

    font = font_of(CAPTION_SIZE)  # the panel labels' font
    label = "Greater Swiss Mountain dog (238) 1.2%"
    short = _fit(label, 218, font)
    assert short.startswith("Greater Swiss") and short.endswith("… (238) 1.2%")
    assert font.getlength(short) <= 218 < font.getlength(label)
    assert _fit("tabby (281) 42.0%", 400, font) == "tabby (281) 42.0%"
    tiny = _fit("tabby (281) 42.0%", 40, font)  # no room for the tail: cut at the end
    assert tiny.endswith("…") and font.getlength(tiny) <= 40
