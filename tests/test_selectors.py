"""The selector on plain names and types: no torch involved."""

from __future__ import annotations

import pytest

from actviz.errors import LayerSelectionError
from actviz.selectors import LayerRef, parse_selector, select_layers

MODEL = [
    LayerRef("conv1", ("Conv2d", "_ConvNd", "Module"), True),
    LayerRef("bn1", ("BatchNorm2d", "_BatchNorm", "_NormBase", "Module"), True),
    LayerRef("relu", ("ReLU", "Module"), True),
    LayerRef("layer1", ("Sequential", "Module"), False),
    LayerRef("layer1.0", ("BasicBlock", "Module"), False),
    LayerRef("layer1.0.conv1", ("Conv2d", "_ConvNd", "Module"), True),
    LayerRef("layer1.0.relu", ("ReLU", "Module"), True),
    LayerRef("layer1.0.conv2", ("MyConv", "Conv2d", "_ConvNd", "Module"), True),
    LayerRef("layer4", ("Sequential", "Module"), False),
    LayerRef("layer4.0.conv1", ("Conv2d", "_ConvNd", "Module"), True),
    LayerRef("avgpool", ("AdaptiveAvgPool2d", "Module"), True),
    LayerRef("fc", ("Linear", "Module"), True),
]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("conv", ["conv1", "layer1.0.conv1", "layer1.0.conv2", "layer4.0.conv1"]),
        ("Conv2d", ["conv1", "layer1.0.conv1", "layer1.0.conv2", "layer4.0.conv1"]),
        ("MyConv", ["layer1.0.conv2"]),
        ("relu", ["relu", "layer1.0.relu"]),
        ("bn", ["bn1"]),
        ("norm", ["bn1"]),
        ("pool,linear", ["avgpool", "fc"]),
        ("layer4.*", ["layer4.0.conv1"]),
        ("layer1*", ["layer1", "layer1.0", "layer1.0.conv1", "layer1.0.relu", "layer1.0.conv2"]),
        ("re:conv\\d$", ["conv1", "layer1.0.conv1", "layer1.0.conv2", "layer4.0.conv1"]),
        ("layer1.0", ["layer1.0"]),
        ("fc,conv1", ["conv1", "fc"]),
        ("conv,!layer1.*", ["conv1", "layer4.0.conv1"]),
        ("!conv,!bn", ["relu", "layer1.0.relu", "avgpool", "fc"]),
        ("all", [r.name for r in MODEL if r.leaf]),
        ("type:Linear", ["fc"]),
        ("name:relu", ["relu"]),
        (["conv1", " fc "], ["conv1", "fc"]),
    ],
)
def test_select(selector: str | list[str], expected: list[str]) -> None:
    assert select_layers(MODEL, selector) == expected


def test_order_follows_the_model_not_the_selector() -> None:
    assert select_layers(MODEL, "fc,relu,conv1") == ["conv1", "relu", "layer1.0.relu", "fc"]


def test_alias_matches_only_leaves_but_class_names_reach_containers() -> None:
    assert select_layers(MODEL, "Sequential") == ["layer1", "layer4"]
    assert "layer1" not in select_layers(MODEL, "all")


def test_no_match_names_close_candidates_and_list_layers() -> None:
    with pytest.raises(LayerSelectionError) as info:
        select_layers(MODEL, "conv9", model="resnet18")
    message = str(info.value)
    assert "'conv9'" in message
    assert "conv1" in message
    assert "actviz list-layers resnet18" in message
    assert "\n" not in message


def test_one_unmatched_term_is_an_error_even_if_others_match() -> None:
    with pytest.raises(LayerSelectionError, match="'layr4"):
        select_layers(MODEL, "conv,layr4.*")


def test_everything_excluded_is_an_error() -> None:
    with pytest.raises(LayerSelectionError, match="after exclusions"):
        select_layers(MODEL, "fc,!fc")


@pytest.mark.parametrize("bad", ["", " , ", "!", "re:("])
def test_malformed(bad: str) -> None:
    with pytest.raises(LayerSelectionError):
        select_layers(MODEL, bad)


def test_parse_selector_splits_and_strips() -> None:
    assert parse_selector(["conv, relu", "!fc"]) == ["conv", "relu", "!fc"]


def test_conv_selects_the_36_convolutions_of_resnet34() -> None:
    import torch
    from torchvision.models import resnet34

    from actviz.hooks import layer_refs

    with torch.device("meta"):
        model = resnet34()
    names = select_layers(layer_refs(model), "conv")
    assert len(names) == 36
    assert names[0] == "conv1"
    assert "layer2.0.downsample.0" in names
    assert all(dict(model.named_modules())[n].__class__.__name__ == "Conv2d" for n in names)


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.lists(st.text(alphabet="!re:*?[](),.\\^$+{}|conv1layer4 ", max_size=12), max_size=4),
    )
)
def test_any_selector_gives_names_or_our_error(selector: str | list[str]) -> None:
    try:
        names = select_layers(MODEL, selector)
    except LayerSelectionError as exc:
        assert "\n" not in str(exc)
    else:
        assert names and set(names) <= {r.name for r in MODEL}
        assert names == [r.name for r in MODEL if r.name in names]  # model order kept
