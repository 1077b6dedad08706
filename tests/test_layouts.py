"""Layouts: every output shape is drawn on purpose, from pure arrays to real architectures."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest
import torch
import torchvision
from torch import nn

from actviz.errors import UsageError
from actviz.hooks import ActivationRecorder, Capture, layer_refs
from actviz.layouts import (
    Drawable,
    LayerContext,
    Layout,
    default_selector,
    layer_contexts,
    plan_layout,
    to_drawable,
)
from actviz.selectors import select_layers

F32 = npt.NDArray[np.float32]


def rand(*shape: int, seed: int = 0) -> F32:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def maps(d: Drawable) -> F32:
    assert d.kind == "maps", d.note
    assert d.array is not None
    assert d.array.dtype == np.float32 and d.array.flags.c_contiguous
    return d.array


# --------------------------------------------------------------------------------------------
# (C, H, W): channels first unless the module says otherwise


def test_plain_maps_without_context_are_channels_first() -> None:
    x = rand(4, 5, 6)
    d = to_drawable(x, None)
    assert (d.kind, d.layout, d.note) == ("maps", "nchw", None)
    np.testing.assert_array_equal(maps(d), x)


def test_last_dim_matching_channels_hint_is_channels_last() -> None:
    x = rand(56, 56, 96)
    d = to_drawable(x, LayerContext("LayerNorm", channels_hint=96))
    assert d.layout == "nhwc"
    np.testing.assert_array_equal(maps(d), x.transpose(2, 0, 1))
    assert d.note is not None and "96 maps of 56 x 56" in d.note


def test_first_dim_matching_channels_hint_stays_channels_first() -> None:
    d = to_drawable(rand(96, 56, 56), LayerContext("Conv2d", channels_hint=96))
    assert (d.layout, d.note, d.drawn_shape) == ("nchw", None, (96, 56, 56))


def test_model_structure_decides_when_the_hint_does_not() -> None:
    # PatchMerging: its last registered leaf is a 4C LayerNorm, its output has 2C channels.
    nhwc = LayerContext("PatchMerging", channels_hint=384, channels_last=True)
    d = to_drawable(rand(28, 28, 192), nhwc)
    assert d.drawn_shape == (192, 28, 28) and d.layout == "nhwc"
    assert d.note is not None and "channels-last" in d.note
    nchw = LayerContext("Mixed", channels_hint=32, channels_last=False)
    assert to_drawable(rand(256, 35, 35), nchw).layout == "nchw"


def test_shape_and_structure_together_resolve_a_cube() -> None:
    cube = rand(96, 96, 96)
    assert to_drawable(cube, LayerContext("Block", 96, channels_last=True)).layout == "nhwc"
    assert to_drawable(cube, LayerContext("Block", 96, channels_last=False)).layout == "nchw"


def test_truly_ambiguous_shape_is_channels_first_and_says_so() -> None:
    d = to_drawable(rand(8, 8, 8), LayerContext("Mystery", channels_hint=8))
    assert d.layout == "nchw"
    assert d.note is not None and "ambiguous" in d.note and "--layout nhwc" in d.note


def test_one_pixel_maps_are_drawn_as_a_strip() -> None:
    # Per-channel scaling would make each 1 x 1 tile one flat colour: squeeze-excitation
    # and pooled outputs say more as a vector.
    values = rand(16, 1, 1)
    d = to_drawable(values, LayerContext("Conv2d", channels_hint=16))
    assert d.kind == "vector" and d.drawn_shape == (16,)
    assert d.array is not None and np.allclose(d.array, values.reshape(16))
    assert d.note is not None and "1 x 1" in d.note
    assert plan_layout((16, 1, 1), LayerContext("Conv2d", channels_hint=16)).kind == "vector"


# --------------------------------------------------------------------------------------------
# (N, C): tokens


def test_vit_tokens_drop_the_class_token_and_become_a_grid() -> None:
    tokens = rand(197, 768)
    ctx = LayerContext("EncoderBlock", 768, token_grid=(14, 14), prefix_tokens=1)
    d = to_drawable(tokens, ctx)
    assert d.layout == "tokens"
    assert d.note == "class token dropped; 196 patch tokens as 14 x 14"
    out = maps(d)
    assert out.shape == (768, 14, 14)
    for r, c, k in [(0, 0, 0), (0, 13, 5), (3, 7, 767), (13, 13, 100)]:
        assert out[k, r, c] == tokens[1 + r * 14 + c, k]


def test_non_square_patch_grid_is_not_forced_square() -> None:
    # 224 x 320 with 16-pixel patches: 14 rows of 20 patches.
    tokens = rand(1 + 14 * 20, 32)
    d = to_drawable(tokens, LayerContext("Block", 32, token_grid=(14, 20), prefix_tokens=1))
    out = maps(d)
    assert out.shape == (32, 14, 20)
    assert out[7, 2, 19] == tokens[1 + 2 * 20 + 19, 7]
    assert d.note == "class token dropped; 280 patch tokens as 14 x 20"


def test_several_prefix_tokens_and_prefix_free_outputs() -> None:
    ctx = LayerContext("Block", 8, token_grid=(4, 4), prefix_tokens=5)
    tokens = rand(21, 8)
    d = to_drawable(tokens, ctx)
    np.testing.assert_array_equal(maps(d), tokens[5:].reshape(4, 4, 8).transpose(2, 0, 1))
    assert d.note is not None and d.note.startswith("5 prefix tokens dropped")
    # After a model drops its class token, the patch tokens alone still fit the grid.
    assert to_drawable(rand(16, 8), ctx).drawn_shape == (8, 4, 4)


def test_grid_is_inferred_from_a_square_token_count_and_says_so() -> None:
    d = to_drawable(rand(49, 16), None)
    assert d.drawn_shape == (16, 7, 7)
    assert d.note == "49 patch tokens as 7 x 7 (grid inferred from the token count)"
    d = to_drawable(rand(50, 16), LayerContext("Attention", channels_hint=16))
    assert d.drawn_shape == (16, 7, 7)
    assert d.note is not None and "first token dropped (taken for a class token)" in d.note
    # A known class token and an unknown grid.
    d = to_drawable(rand(65, 4), LayerContext("Block", prefix_tokens=1))
    assert d.drawn_shape == (4, 8, 8) and d.note is not None
    assert d.note.startswith("class token dropped; 64 patch tokens as 8 x 8 (grid inferred")


def test_tokens_that_fit_no_grid_are_not_drawn_unless_forced() -> None:
    ctx = LayerContext("Block", 16, token_grid=(14, 14), prefix_tokens=1)
    d = to_drawable(rand(50, 16), ctx)
    assert d.kind == "none" and d.array is None and d.layout == "none"
    assert d.note is not None and "(50, 16)" in d.note and "--layout tokens" in d.note
    forced = to_drawable(rand(50, 16), ctx, layout="tokens")
    assert forced.drawn_shape == (1, 50, 16) and forced.layout == "tokens"
    assert forced.note is not None and "one 50 x 16 map" in forced.note


def test_a_single_channel_map_is_not_mistaken_for_square_tokens() -> None:
    # (H, W) from a module whose channels are something else: no guessing.
    d = to_drawable(rand(16, 16), LayerContext("Head", channels_hint=5))
    assert d.kind == "none" and d.note is not None and "(16, 16)" in d.note
    forced = to_drawable(rand(16, 16), LayerContext("Head", channels_hint=5), layout="tokens")
    assert forced.drawn_shape == (1, 16, 16)


def test_one_dimensional_maps_are_strips() -> None:
    x = rand(16, 100)
    d = to_drawable(x, LayerContext("Conv1d", channels_hint=16))
    np.testing.assert_array_equal(maps(d), x[:, None, :])
    assert d.note == "1-D maps (16, 100) drawn as 16 strips of 1 x 100"


def test_a_single_token_is_a_vector() -> None:
    d = to_drawable(rand(1, 12), None)
    assert (d.kind, d.layout, d.drawn_shape) == ("vector", "vector", (12,))


# --------------------------------------------------------------------------------------------
# Vectors, the undrawable, forced layouts


def test_vectors_are_vectors_under_every_layout() -> None:
    for layout in ("auto", "nchw", "nhwc", "tokens"):
        d = to_drawable(rand(1000), None, layout=layout)
        assert (d.kind, d.layout, d.drawn_shape, d.note) == ("vector", "vector", (1000,), None)


@pytest.mark.parametrize(
    ("sample", "words"),
    [
        (np.float32(3.0), "shape ()"),
        (rand(2, 3, 4, 5, 2, 2), "6-D output (2, 3, 4, 5, 2, 2)"),
        (rand(1, 2, 3, 4, 5), "5-D output"),
        (np.zeros((0, 4, 4), np.float32), "empty output (0, 4, 4)"),
        (np.zeros((4, 4), np.int64), "int64 output holds indices or a mask"),
        (np.zeros((3, 4, 4), bool), "bool output"),
        (np.zeros((3, 4, 4), np.complex64), "complex"),
        (np.array([["a"]]), "not numeric"),
        (torch.zeros(3, 4, 4, dtype=torch.int32), "int32 output"),
        (torch.zeros(3, 4, 4, dtype=torch.bool), "bool output"),
        (torch.zeros(3, 4, 4, device="meta"), "meta tensor"),
    ],
)
def test_what_cannot_be_drawn_says_why(sample: object, words: str) -> None:
    d = to_drawable(sample, None)  # type: ignore[arg-type]
    assert (d.kind, d.array, d.layout) == ("none", None, "none")
    assert d.note is not None and words in d.note


@pytest.mark.parametrize(
    ("shape", "layout", "expected"),
    [
        ((56, 56, 96), "nchw", (56, 56, 96)),
        ((96, 56, 56), "nhwc", (56, 96, 56)),
        ((56, 56, 96), "nhwc", (96, 56, 56)),
        ((197, 768), "nchw", None),
        ((197, 768), "nhwc", None),
        ((4, 5, 6), "tokens", None),
        ((2, 3, 4, 5), "tokens", None),
        ((2, 3, 4, 96), "nchw", (2, 3, 4, 96)),
        ((2, 3, 4, 96), "nhwc", (96, 2, 3, 4)),
    ],
)
def test_forced_layouts_apply_or_refuse_naming_the_shape(
    shape: tuple[int, ...], layout: Layout, expected: tuple[int, ...] | None
) -> None:
    d = to_drawable(rand(*shape), LayerContext("LayerNorm", channels_hint=96), layout=layout)
    assert d.drawn_shape == expected
    if expected is None:
        assert d.kind == "none" and d.note is not None and str(shape) in d.note


def test_an_unknown_layout_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown layout 'hwc'; use one of auto, nchw"):
        to_drawable(rand(3, 4, 4), None, layout="hwc")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        plan_layout((3, 4, 4), None, layout="NCHW")  # type: ignore[arg-type]


def test_tensors_of_any_float_precision_become_float32_copies() -> None:
    t = torch.randn(8, 4, 4, dtype=torch.bfloat16)
    d = to_drawable(t, None)
    np.testing.assert_array_equal(maps(d), t.float().numpy())
    half = torch.randn(56, 56, 8).half()
    assert maps(to_drawable(half, LayerContext("LayerNorm", 8))).shape == (8, 56, 56)


def test_plan_layout_decides_like_to_drawable_from_the_shape_alone() -> None:
    ctx = LayerContext("EncoderBlock", 768, token_grid=(14, 14), prefix_tokens=1)
    for shape in [(197, 768), (768, 14, 14), (14, 14, 768), (1000,), (50, 768), (2, 2, 2, 2)]:
        planned = plan_layout(shape, ctx)
        drawn = to_drawable(rand(*shape), ctx)
        assert planned.array is None
        assert (planned.kind, planned.layout, planned.note) == (
            drawn.kind,
            drawn.layout,
            drawn.note,
        )


# --------------------------------------------------------------------------------------------
# Real building blocks with real values


def test_vit_encoder_tokens_map_back_to_patch_positions() -> None:
    torch.manual_seed(0)
    vit = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    ).eval()
    contexts = layer_contexts(vit, (32, 32))
    name = "encoder.layers.encoder_layer_1"
    assert contexts[name].token_grid == (4, 4) and contexts[name].prefix_tokens == 1
    with ActivationRecorder(vit, ["conv_proj", name]) as acts, torch.inference_mode():
        vit(torch.randn(2, 3, 32, 32))
    tokens = acts[name][1]
    d = to_drawable(tokens, contexts[name])
    out = torch.from_numpy(maps(d))
    assert out.shape == (16, 4, 4)
    assert torch.equal(out[:, 2, 3], tokens[1 + 2 * 4 + 3])
    # The patch embedding's own maps are plain (C, H, W) with the same grid.
    assert to_drawable(acts["conv_proj"][1], contexts["conv_proj"]).drawn_shape == (16, 4, 4)


def test_convnext_block_inner_layers_are_channels_last_and_its_output_is_not() -> None:
    from torchvision.models.convnext import CNBlock

    block = CNBlock(dim=8, layer_scale=1e-6, stochastic_depth_prob=0.0).eval()
    model = nn.Sequential(block)
    contexts = layer_contexts(model, (6, 10))
    names = ["0.block.0", "0.block.2", "0.block.3", "0.block.5", "0"]
    with ActivationRecorder(model, names) as acts, torch.inference_mode():
        model(torch.randn(1, 8, 6, 10))
    layouts = {n: to_drawable(acts[n][0], contexts[n]).layout for n in names}
    assert layouts == {
        "0.block.0": "nchw",
        "0.block.2": "nhwc",
        "0.block.3": "nhwc",
        "0.block.5": "nhwc",
        "0": "nchw",
    }
    inner = maps(to_drawable(acts["0.block.2"][0], contexts["0.block.2"]))
    np.testing.assert_array_equal(inner, acts["0.block.2"][0].permute(2, 0, 1).numpy())
    assert inner.shape == (8, 6, 10)
    assert maps(to_drawable(acts["0.block.3"][0], contexts["0.block.3"])).shape == (32, 6, 10)


@pytest.mark.parametrize(
    ("kind", "grid"), [("window", (8, 12)), ("grid", (8, 8))], ids=["window", "grid"]
)
def test_maxvit_partitions_are_reassembled_into_the_image(kind: str, grid: tuple[int, int]) -> None:
    from torchvision.models.maxvit import PartitionAttentionLayer

    torch.manual_seed(0)
    layer = PartitionAttentionLayer(
        in_channels=8,
        head_dim=4,
        partition_size=4,
        partition_type=kind,
        grid_size=grid,
        mlp_ratio=2,
        activation_layer=nn.GELU,
        norm_layer=nn.LayerNorm,
        attention_dropout=0.0,
        mlp_dropout=0.0,
        p_stochastic_dropout=0.0,
    ).eval()
    contexts = layer_contexts(layer)
    names = [n for n, _ in layer.named_modules() if n]
    x = torch.randn(1, 8, *grid)
    with ActivationRecorder(layer, names) as acts, torch.inference_mode():
        layer(x)
    drawn = {
        key: to_drawable(acts[key][0], contexts[acts.captures[i].module])
        for i, key in enumerate(acts)
    }
    # The partition undone gives back the input exactly, and the swap back undone gives the
    # departitioned output exactly.
    np.testing.assert_array_equal(maps(drawn["partition_op"]), x[0].numpy())
    np.testing.assert_array_equal(maps(drawn["partition_swap"]), x[0].numpy())
    np.testing.assert_array_equal(
        maps(drawn["departition_swap"]), acts["departition_op"][0].numpy()
    )
    assert drawn["departition_op"].layout == "nchw"
    for key, d in drawn.items():
        if key != "departition_op":
            assert d.layout == "windows", key
            assert maps(d).shape[1:] == grid, key
    assert maps(drawn["mlp_layer.1"]).shape == (16, *grid)


# --------------------------------------------------------------------------------------------
# torchvision architectures on the meta device


SIX = [
    "vit_b_16",
    "swin_t",
    "convnext_tiny",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "inception_v3",
]


def build_meta(name: str) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inception_v3's init-weights FutureWarning
        with torch.device("meta"):
            model: nn.Module = torchvision.models.get_model(name, weights=None)
    return model.eval()


def input_hw(name: str) -> tuple[int, int]:
    return (299, 299) if name == "inception_v3" else (224, 224)


def meta_captures(model: nn.Module, names: list[str], hw: tuple[int, int]) -> ActivationRecorder:
    recorder = ActivationRecorder(model, names, keep_tensors=False)
    with recorder, torch.inference_mode():
        model(torch.empty(1, 3, *hw, device="meta"))
    return recorder


@pytest.fixture(scope="module")
def traced() -> Iterator[dict[str, tuple[nn.Module, dict[str, LayerContext], list[Capture]]]]:
    """Every module of each architecture, traced once on the meta device."""
    out = {}
    for name in [*SIX, "maxvit_t"]:
        model = build_meta(name)
        hw = input_hw(name)
        recorder = meta_captures(model, [r.name for r in layer_refs(model)], hw)
        out[name] = (model, layer_contexts(model, hw), recorder.captures)
    yield out


EXPECTED_DEFAULTS = {
    "vit_b_16": ("conv_proj,EncoderBlock", 13),
    "swin_t": (r"re:^features\.\d+$", 8),
    "convnext_tiny": (r"re:^features\.\d+$", 8),
    "mobilenet_v3_small": ("conv", 52),
    "efficientnet_b0": ("conv", 81),
    "inception_v3": ("conv,!AuxLogits.*", 94),
    "maxvit_t": ("stem,MaxVitLayer", 12),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", [*SIX, "maxvit_t"])
def test_default_selector_draws_every_chosen_layer(name: str) -> None:
    model = build_meta(name)
    selector = default_selector(model)
    chosen = select_layers(layer_refs(model), selector, model=name)
    assert (selector, len(chosen)) == EXPECTED_DEFAULTS[name]
    hw = input_hw(name)
    recorder = meta_captures(model, chosen, hw)
    assert recorder.never_called() == []  # no auxiliary head that eval mode skips
    contexts = layer_contexts(model, hw)
    assert {c.module for c in recorder.captures} == set(chosen)
    for cap in recorder.captures:
        sample = torch.randn(cap.shape[1:])
        d = to_drawable(sample, contexts[cap.module])
        one_pixel = len(cap.shape) == 4 and cap.shape[2] * cap.shape[3] == 1
        assert d.kind == ("vector" if one_pixel else "maps"), (cap.key, d.note)
        if name == "vit_b_16":
            assert d.drawn_shape == (768, 14, 14)
        elif name == "swin_t":
            assert d.layout == "nhwc" and d.drawn_shape == tuple(np.roll(cap.shape[1:], 1))
        elif one_pixel:
            assert d.layout == "vector" and d.drawn_shape == (cap.shape[1],)
        else:
            assert d.layout == "nchw" and d.drawn_shape == cap.shape[1:]
            assert d.note is None


@pytest.mark.slow
def test_swin_stage_is_96_maps_of_56_by_56(
    traced: dict[str, tuple[nn.Module, dict[str, LayerContext], list[Capture]]],
) -> None:
    _, contexts, captures = traced["swin_t"]
    cap = next(c for c in captures if c.key == "features.1")
    assert cap.shape == (1, 56, 56, 96)
    d = to_drawable(torch.randn(cap.shape[1:]), contexts["features.1"])
    assert (d.layout, d.drawn_shape) == ("nhwc", (96, 56, 56))


@pytest.mark.slow
@pytest.mark.parametrize("name", [*SIX, "maxvit_t"])
def test_every_output_of_the_architecture_is_drawn_as_expected(
    name: str, traced: dict[str, tuple[nn.Module, dict[str, LayerContext], list[Capture]]]
) -> None:
    _, contexts, captures = traced[name]
    layouts: dict[str, set[str]] = {}
    for cap in captures:
        d = plan_layout(cap.shape[1:], contexts[cap.module])
        assert d.kind != "none", (cap.key, d.note)
        assert d.note is None or "ambiguous" not in d.note, cap.key
        layouts.setdefault(d.layout, set()).add(cap.key)
    vectors = layouts.pop("vector", set())
    # Vectors: (B, C) outputs, and (B, C, 1, 1) pooled or squeeze-excitation maps.
    assert vectors and all(
        len(c.shape) == 2
        or (len(c.shape) == 4 and c.shape[2] * c.shape[3] == 1)
        or (len(c.shape) == 4 and c.shape[1] * c.shape[2] == 1)
        for c in captures
        if c.key in vectors
    )
    if name == "vit_b_16":
        assert layouts["nchw"] == {"conv_proj"}
        assert len(layouts["tokens"]) == 136
    elif name == "swin_t":
        assert layouts["nchw"] == {"features.0.0", "permute"}
        assert len(layouts["nhwc"]) == 162
    elif name == "convnext_tiny":
        # Inside each of the 18 blocks: the two Permutes' span (LayerNorm, Linear, GELU,
        # Linear) and the first Permute itself.
        expected = {
            c.key
            for c in captures
            if c.module.rsplit(".", 1)[-1] in {"1", "2", "3", "4", "5"} and ".block." in c.module
        }
        assert layouts["nhwc"] == expected and len(expected) == 90
    elif name == "maxvit_t":
        inside = {
            c.key
            for c in captures
            if "_attention." in c.module and not c.module.endswith("departition_op")
        }
        assert layouts["windows"] == inside
        assert set(layouts) <= {"nchw", "windows"} and "windows" in layouts
    else:
        assert set(layouts) == {"nchw"}


def test_vit_contexts_give_the_patch_grid_for_the_input_size() -> None:
    model = build_meta("vit_b_16")
    ctx = layer_contexts(model, (224, 224))["encoder.layers.encoder_layer_3"]
    assert (ctx.token_grid, ctx.prefix_tokens, ctx.channels_hint) == ((14, 14), 1, 768)
    # Not square-only: the grid follows the input (torchvision's own ViT asserts a square
    # image_size input, so this applies to ViT-like models that accept other sizes).
    wide = layer_contexts(model, (224, 320))["encoder.layers.encoder_layer_3"]
    assert wide.token_grid == (14, 20)
    assert layer_contexts(model)["encoder"].token_grid == (14, 14)  # from image_size
    with pytest.raises(AssertionError, match="Wrong image width"):
        model(torch.empty(1, 3, 224, 320, device="meta"))


def test_layer_contexts_read_channels_and_structure_without_a_forward() -> None:
    swin = layer_contexts(build_meta("swin_t"), (224, 224))
    assert swin["features.1.0"].channels_hint == 96 and swin["features.1.0"].channels_last
    assert swin["permute"].channels_last is False
    assert swin["features.0.0"].channels_last is False
    convnext = layer_contexts(build_meta("convnext_tiny"), (224, 224))
    assert convnext["features.1.0.block.2"].channels_last is True
    assert convnext["features.1.0"].channels_last is False
    assert convnext["features.1.0"].token_grid is None
    effnet = layer_contexts(build_meta("efficientnet_b0"), (224, 224))
    assert effnet["features.1.0.block.1.fc1"].channels_hint == 8
    assert all(c.channels_last is not True for c in effnet.values())


def test_default_selector_for_models_without_convolutions() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.fc(x)
            return out

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(3, 4)
            self.blocks = nn.ModuleList([Block(), Block(), Block()])
            self.head = nn.Linear(4, 2)

    stack = Stack()
    selector = default_selector(stack)
    assert selector == r"re:^blocks\.\d+$"
    assert select_layers(layer_refs(stack), selector) == ["blocks.0", "blocks.1", "blocks.2"]
    mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert default_selector(mlp) == "all"
    assert select_layers(layer_refs(mlp), "all") == ["0", "1", "2"]
