"""Time strips and the layouts of video layers, on plain arrays."""

from __future__ import annotations

import numpy as np
import pytest

from actviz.contexts import LayerContext
from actviz.layouts import plan_layout, to_drawable
from actviz.render.timestrips import frame_columns, render_time_strips


def moving_bar(channels: int = 3, frames: int = 5, side: int = 10) -> np.ndarray:
    """``(C, T, H, W)``: in frame t a bright column at x = 2 t; channel c scaled by c + 1."""
    clip = np.zeros((channels, frames, side, side), dtype=np.float32)
    for t in range(frames):
        clip[:, t, :, (2 * t) % side] = 1.0
    return clip * (np.arange(channels, dtype=np.float32) + 1)[:, None, None, None]


def tile(picture: object, row: int, col: int) -> np.ndarray:
    """The palette levels of tile (row, col) of a time strip picture."""
    g = picture  # a GridImage
    top = g.header_height + 2 + g.label_height + row * g.pitch[0]  # type: ignore[attr-defined]
    left = 2 + col * g.pitch[1]  # type: ignore[attr-defined]
    h, w = g.tile_shape  # type: ignore[attr-defined]
    return np.asarray(g.indices)[top : top + h, left : left + w]  # type: ignore[attr-defined]


def test_channels_are_rows_and_frames_are_columns_so_motion_shows() -> None:
    clip = moving_bar()
    g = render_time_strips(clip, title="t", min_tile=10)
    assert g.grid_shape == (3, 5) and g.tile_shape == (10, 10) and g.upscale == 1
    assert g.channel_ids == (0, 1, 2)
    for row in range(3):
        for t in range(5):
            levels = tile(g, row, t)
            brightest = np.flatnonzero(levels.max(axis=0) == levels.max())
            assert brightest.tolist() == [2 * t]  # the bar moves right along the row
    # One scale per channel over all its frames: every row's bar is the top level.
    assert len({int(tile(g, r, 0).max()) for r in range(3)}) == 1


def test_one_scale_over_the_frames_keeps_a_fading_channel_fading() -> None:
    clip = (
        np.ones((1, 4, 6, 6), dtype=np.float32)
        * np.array([4, 3, 2, 1], np.float32)[None, :, None, None]
    )
    g = render_time_strips(clip, title="fade", min_tile=6)
    means = [float(tile(g, 0, t).mean()) for t in range(4)]
    assert means == sorted(means, reverse=True) and means[0] > means[-1]


def test_rows_are_capped_and_frames_spread_evenly() -> None:
    assert frame_columns(40, 8) == [0, 6, 11, 17, 22, 28, 33, 39]
    assert frame_columns(5, 16) == [0, 1, 2, 3, 4]
    g = render_time_strips(
        moving_bar(channels=20, frames=40), title="t", max_channels=4, max_frames=8, order="max"
    )
    assert g.grid_shape == (4, 8) and g.channels_total == 20
    assert g.channel_ids == (19, 18, 17, 16)  # the largest maxima first


def test_a_class_token_is_a_column_apart_on_its_rows_scale() -> None:
    clip = moving_bar(channels=2, frames=3)
    prefix = np.array([[1.0], [0.0]], dtype=np.float32)  # channel 0 at its max, 1 at its min
    g = render_time_strips(clip, title="mvit", prefix=prefix, min_tile=10)
    assert g.grid_shape == (2, 4)
    first, second = tile(g, 0, 0), tile(g, 1, 0)
    assert np.unique(first).size == 1 and np.unique(second).size == 1
    assert int(first[0, 0]) == int(tile(g, 0, 1).max()) and int(second[0, 0]) == 0


def test_a_clip_that_is_not_four_dimensional_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\(C, T, H, W\)"):
        render_time_strips(np.zeros((3, 4, 4), np.float32), title="x")


def test_video_layers_are_laid_out_as_clips() -> None:
    conv = LayerContext("Conv3d", channels_hint=8, channels_last=False, frames=True)
    drawn = to_drawable(np.zeros((8, 4, 5, 6), np.float32), conv)
    assert (drawn.kind, drawn.layout, drawn.drawn_shape) == (
        "clip",
        "ncthw",
        (8, 4, 5, 6),
    )
    # Swin3D: channels last, (T, H, W, C) with the module's channel count last.
    swin = LayerContext("LayerNorm", channels_hint=8, channels_last=True, frames=True)
    sample = np.random.default_rng(0).normal(size=(4, 5, 6, 8)).astype(np.float32)
    drawn = to_drawable(sample, swin)
    assert (drawn.kind, drawn.layout) == ("clip", "nthwc")
    np.testing.assert_array_equal(drawn.array, sample.transpose(3, 0, 1, 2))
    # One frame left is an ordinary grid; pooled (C, 1, 1, 1) a strip.
    assert to_drawable(np.zeros((8, 1, 3, 3), np.float32), conv).kind == "maps"
    assert to_drawable(np.zeros((8, 1, 1, 1), np.float32), conv).kind == "vector"
    assert plan_layout((8, 1, 1, 1), conv).kind == "vector"
    # In an image model a 4-D output (windowed attention weights) is no clip.
    image_model = LayerContext("Softmax", channels_hint=8, channels_last=True)
    assert to_drawable(np.zeros((4, 2, 9, 9), np.float32), image_model).kind == "none"


def test_mvit_tokens_are_reshaped_with_their_grid_and_the_class_token_apart() -> None:
    ctx = LayerContext("MultiscaleBlock", channels_hint=6, clip_grid=(2, 8, 8))
    rng = np.random.default_rng(1)
    for side in (8, 4, 2):  # later stages pool H and W
        tokens = rng.normal(size=(1 + 2 * side * side, 6)).astype(np.float32)
        drawn = to_drawable(tokens, ctx)
        assert (drawn.kind, drawn.layout) == ("clip", "tokens")
        assert drawn.array is not None and drawn.prefix is not None
        np.testing.assert_array_equal(
            drawn.array, tokens[1:].reshape(2, side, side, 6).transpose(3, 0, 1, 2)
        )
        np.testing.assert_array_equal(drawn.prefix[:, 0], tokens[0])
        assert f"as 2 frames of {side} x {side}" in (drawn.note or "")


def test_mvit_grid_comes_from_its_positional_encoding() -> None:
    import torch
    from torchvision.models.video import mvit_v2_s

    from actviz.layouts import layer_contexts

    with torch.device("meta"):
        model = mvit_v2_s()
    contexts = layer_contexts(model)
    assert contexts["blocks.3"].clip_grid == (8, 56, 56)
    assert contexts["blocks.3"].frames and contexts["conv_proj"].frames


def test_swin3d_patch_merging_is_drawn_and_counted_as_its_2c_channels() -> None:
    import torch
    from torchvision.models.video import swin3d_t

    from actviz.layouts import layer_contexts
    from actviz.statistics import stats_callback

    with torch.device("meta"):
        model = swin3d_t()
    contexts = layer_contexts(model)
    # PatchMerging registers its reduction (4C -> 2C) before its norm over 4C: the output
    # has the reduction's channels.
    widths = {name: contexts[name].channels_hint for name in ("features.1", "features.3")}
    assert widths == {"features.1": 192, "features.3": 384}
    assert contexts["features.1.norm"].channels_hint == 384  # the norm itself keeps 4C
    # Its (T, H, W, C) output: 192 channels of 16 frames, not 16 channels of 28 frames.
    sample = np.random.default_rng(0).normal(size=(16, 28, 28, 192)).astype(np.float32)
    drawn = to_drawable(sample, contexts["features.1"])
    assert (drawn.kind, drawn.layout, drawn.drawn_shape) == ("clip", "nthwc", (192, 16, 28, 28))
    np.testing.assert_array_equal(drawn.array, sample.transpose(3, 0, 1, 2))
    (stats,) = stats_callback(contexts)("features.1", torch.from_numpy(sample[None]))
    assert stats.channels == 192


def test_mvits_default_cam_layer_is_the_last_block_whose_patches_reach_the_class_token() -> None:
    import torch
    from torchvision.models.video import mvit_v1_b

    from actviz.gradients.batch import choose_cam_keys
    from actviz.hooks import Capture
    from actviz.layouts import layer_contexts

    with torch.device("meta"):
        model = mvit_v1_b()
    contexts = layer_contexts(model)
    captures = [
        Capture(name, name, "MultiscaleBlock", 1, (1, 1 + 8 * 7 * 7, 768), None)
        for name in ("blocks.13", "blocks.14", "blocks.15")
    ]
    # blocks.15's patch tokens never reach the head (it reads the class token after the last
    # attention): its Grad-CAM would be all zero.
    assert choose_cam_keys(captures, contexts, explicit=False) == frozenset({"blocks.14"})


def test_a_clips_grad_cam_is_pytorch_grad_cams_per_frame_on_one_scale() -> None:
    from pytorch_grad_cam import GradCAM
    from torch import nn

    from actviz.run.clipcam import clip_cam, input_frame

    rng = np.random.default_rng(3)
    acts = rng.normal(size=(6, 4, 5, 5)).astype(np.float32)
    grads = rng.normal(size=(6, 4, 5, 5)).astype(np.float32)
    conv = nn.Conv3d(3, 6, 1)
    reference = GradCAM(model=nn.Sequential(conv), target_layers=[conv])
    try:
        weighted = reference.get_cam_image(None, conv, None, acts[None], grads[None])[0]
    finally:
        reference.activations_and_grads.release()
    expected = np.maximum(weighted, 0)
    np.testing.assert_allclose(clip_cam(acts, grads), expected / expected.max(), atol=1e-5)
    assert clip_cam(acts, np.zeros_like(grads)).max() == 0  # no evidence: zero, no NaN
    # A layer frame covers a stretch of input frames; its middle one is shown under it.
    assert [input_frame(t, 4, 16) for t in range(4)] == [2, 6, 10, 14]


@pytest.mark.parametrize(
    ("name", "selector", "count"),
    [
        ("mvit_v2_s", "conv_proj,MultiscaleBlock", 17),
        ("swin3d_t", r"re:^features\.\d+$", 7),
        ("raft_small", "feature_encoder,context_encoder,update_block", 3),
        ("r3d_18", "conv", 20),
    ],
)
def test_video_and_flow_models_default_to_their_blocks(
    name: str, selector: str, count: int
) -> None:
    import torch
    from torchvision import models

    from actviz.hooks import layer_refs
    from actviz.models.defaults import default_selector
    from actviz.selectors import select_layers

    with torch.device("meta"):
        model = models.get_model(name)
    assert default_selector(model) == selector
    assert len(select_layers(layer_refs(model), selector)) == count


def test_statistics_of_a_channels_last_clip_count_its_channels() -> None:
    import torch

    from actviz.statistics import stats_callback

    contexts = {
        "swin": LayerContext("LayerNorm", channels_hint=8, channels_last=True, frames=True),
        "conv": LayerContext("Conv3d", channels_hint=8, channels_last=False, frames=True),
    }
    summarize = stats_callback(contexts)
    clip = torch.zeros(1, 2, 3, 3, 8)
    clip[..., :5] = 1.0  # three dead channels
    (last,) = summarize("swin", clip)
    assert (last.channels, last.dead_channels) == (8, 3)
    (first,) = summarize("conv", clip.permute(0, 4, 1, 2, 3))
    assert (first.channels, first.dead_channels) == (8, 3)


def test_clipping_keeps_one_outlier_from_flattening_the_strips() -> None:
    clip = np.random.default_rng(4).normal(size=(2, 3, 8, 8)).astype(np.float32)
    clip[0, 0, 0, 0] = 1e4
    plain = render_time_strips(clip, title="x", norm="layer", min_tile=8)
    clipped = render_time_strips(clip, title="x", norm="layer", clip=(1, 99), min_tile=8)
    spread = [np.unique(tile(g, 1, 2)).size for g in (plain, clipped)]
    assert spread[0] <= 3 < spread[1]  # one colour (near 0) without the clip, a range with it
    assert abs(clipped.vmax) < 10
