"""Every timm family's default selection draws its blocks, not nothing and not the stem alone:
one small model per family (the names sharing a prefix: mixer, gmlp, hiera, xcit, ...), built
with random weights at a small input, run once with the layers the default selects."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest
import torch

from actviz.hooks import ActivationRecorder, layer_refs
from actviz.layouts import default_selector, layer_contexts, to_drawable
from actviz.models import load_model
from actviz.selectors import select_layers

timm = pytest.importorskip("timm")

#: Size words in timm's names, smallest first: the family's model whose name has the
#: earliest one (then the shortest name) stands for it.
_SIZES = ("test", "atto", "femto", "pico", "nano", "xxxs", "xxs", "xs", "micro", "mini", "tiny")
_SIZES_TOO = ("small", "s", "b0", "t")
#: Families whose smallest model takes minutes to build on a CPU (hundreds of millions of
#: parameters); their blocks are a ViT's, which the other ViT families cover.
_TOO_LARGE = {
    "aimv": "a billion parameters",
    "deepseek": "412 million parameters",
    "gemma": "167 million parameters",
}
#: Models that do not take 64 x 64 (a fixed grid, windows, an attention block's assertion):
#: the side they take, or None for their default input size.
_SIDES: dict[str, int | None] = {
    "bat_resnext26ts": None,
    "crossvit_tiny_240": None,
    "efficientformer_l1": 224,
    "halo2botnet50ts_256": 128,
    "halonet26t": None,
    "haloregnetz_b": 224,
    "lamhalobotnet50ts_256": 128,
    "sehalonet33ts": None,
}
#: A stem or patch embedding lies in the first sixth of a model's modules.
_PAST_THE_STEM = 1 / 6


def _rank(name: str) -> tuple[int, int, str]:
    words = re.split(r"[_.]", name)
    # A size letter before a depth or variant number counts as the word: t8, s18.
    letters = {"t": "tiny", "s": "small", "xs": "xs"}
    words += [letters[m.group(1)] for w in words if (m := re.fullmatch(r"(xs|s|t)\d+", w))]
    ranks = [
        i
        for i, size in enumerate((*_SIZES, *_SIZES_TOO))
        for word in words
        if word == size or (size in _SIZES and word.startswith(size))
    ]
    return (min(ranks, default=len(_SIZES) + len(_SIZES_TOO)), len(name), name)


#: Where the size words mislead (levit_384_s8's s8 is a stride, levit_128 the smaller).
_PICKS = {"levit": "levit_128"}


def _families() -> dict[str, str]:
    """Name prefix (the letters before the first digit or underscore) -> its smallest model."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in timm.list_models():
        bare = re.sub(r"^(legacy_|tf_|test_)", "", name)
        groups[re.match(r"[a-z]+", bare).group(0)].append(name)  # type: ignore[union-attr]
    return {
        family: _PICKS.get(family) or min(names, key=_rank)
        for family, names in sorted(groups.items())
    }


FAMILIES = _families()


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_default_selection_draws_past_the_stem(family: str) -> None:
    if family in _TOO_LARGE:
        pytest.skip(f"{FAMILIES[family]}: {_TOO_LARGE[family]}")
    name = FAMILIES[family]
    side = _SIDES.get(name, 64)
    loaded = load_model(
        f"timm/{name}", weights="none", device="cpu", input_size=(side, side) if side else None
    )
    model = loaded.module
    selector = default_selector(model)
    names = select_layers(layer_refs(model), selector)
    contexts = layer_contexts(model, loaded.input_size)
    torch.manual_seed(0)
    with ActivationRecorder(model, names, per_image=True) as rec, torch.inference_mode():
        model(torch.rand(1, 3, *loaded.input_size))
    drawn: list[Any] = [
        cap
        for cap in rec.captures
        if cap.refused is None
        and cap.tensor is not None
        and to_drawable(cap.tensor[0], contexts.get(cap.module)).kind != "none"
    ]
    assert drawn, f"{name}: {selector} drew nothing"
    order = {module: i for i, (module, _) in enumerate(model.named_modules())}
    deepest = max(order[cap.module] for cap in drawn) / (len(order) - 1)
    assert deepest > _PAST_THE_STEM, f"{name}: {selector} drew only {[c.key for c in drawn]}"


def test_hiera_blocks_are_drawn_in_the_images_order() -> None:
    """Hiera runs its blocks on tokens in an unrolled order: each block's output is put back
    into the image's grid as timm's own forward_intermediates does (with coarse=False, every
    block), and drawn as channels-last maps of that grid."""
    loaded = load_model("timm/hiera_tiny_224", weights="none", device="cpu", input_size=(64, 64))
    model = loaded.module
    names = [f"blocks.{i}" for i in range(len(model.blocks))]
    torch.manual_seed(0)
    x = torch.rand(2, 3, 64, 64)
    with ActivationRecorder(model, names, per_image=True) as rec, torch.inference_mode():
        model(x)
        theirs = model.forward_intermediates(
            x, intermediates_only=True, output_fmt="NHWC", coarse=False
        )
    contexts = layer_contexts(model, loaded.input_size)
    caps = {c.key: c for c in rec.captures}
    for i, expected in enumerate(theirs):
        cap = caps[f"blocks.{i}"]
        assert cap.tensor is not None and cap.rows is not None and "unrolled" in cap.rows
        torch.testing.assert_close(cap.tensor, expected, rtol=1e-5, atol=1e-6)
        drawable = to_drawable(cap.tensor[0], contexts[cap.module])
        height, width, channels = expected.shape[1:]
        assert drawable.layout == "nhwc" and drawable.drawn_shape == (channels, height, width)
    # As the hook saw them, the tokens are not in the image's order.
    with ActivationRecorder(model, ["blocks.0"]) as raw, torch.inference_mode():
        model(x)
    assert raw["blocks.0"].shape == (2, 256, 96)
    assert not torch.allclose(raw["blocks.0"].reshape(2, 16, 16, 96), theirs[0])
