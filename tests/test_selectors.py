"""The selector on plain names and types: no torch involved."""

from __future__ import annotations

import pytest

from actviz.errors import LayerSelectionError
from actviz.selectors import LayerRef, named_exactly, parse_selector, select_layers

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


def test_class_names_reach_containers_and_all_means_leaves() -> None:
    assert select_layers(MODEL, "Sequential") == ["layer1", "layer4"]
    assert "layer1" not in select_layers(MODEL, "all")


# Two encoder blocks of a torchvision ViT: MultiheadAttention is not a leaf (it holds out_proj).
VIT = [
    LayerRef("conv_proj", ("Conv2d", "_ConvNd", "Module"), True),
    LayerRef("encoder", ("Encoder", "Module"), False),
    LayerRef("encoder.dropout", ("Dropout", "_DropoutNd", "Module"), True),
    *(
        ref
        for k in range(2)
        for ref in (
            LayerRef(f"encoder.layers.encoder_layer_{k}", ("EncoderBlock", "Module"), False),
            LayerRef(f"encoder.layers.encoder_layer_{k}.ln_1", ("LayerNorm", "Module"), True),
            LayerRef(
                f"encoder.layers.encoder_layer_{k}.self_attention",
                ("MultiheadAttention", "Module"),
                False,
            ),
            LayerRef(
                f"encoder.layers.encoder_layer_{k}.self_attention.out_proj",
                ("NonDynamicallyQuantizableLinear", "Linear", "Module"),
                True,
            ),
            LayerRef(f"encoder.layers.encoder_layer_{k}.mlp", ("MLPBlock", "Sequential"), False),
            LayerRef(f"encoder.layers.encoder_layer_{k}.mlp.1", ("GELU", "Module"), True),
        )
    ),
    LayerRef("heads.head", ("Linear", "Module"), True),
]


def test_alias_reaches_modules_that_have_children() -> None:
    attention = [f"encoder.layers.encoder_layer_{k}.self_attention" for k in range(2)]
    assert select_layers(VIT, "attn", model="vit_b_16") == attention
    assert select_layers(VIT, "ATTN,!encoder.layers.encoder_layer_0.*") == attention[1:]
    assert select_layers(VIT, "type:attn") == attention
    # out_proj is a Linear by subclass; the attention module around it is not.
    assert select_layers(VIT, "linear") == [f"{n}.out_proj" for n in attention] + ["heads.head"]
    # `all` still means leaves: neither the attention modules nor the blocks.
    chosen = select_layers(VIT, "all")
    assert not set(attention) & set(chosen)
    assert chosen == [r.name for r in VIT if r.leaf]


def test_alias_that_matches_nothing_names_its_classes() -> None:
    refs = [r for r in VIT if "Dropout" not in r.types]
    with pytest.raises(LayerSelectionError) as info:
        select_layers(refs, "dropout", model="vit_b_16")
    assert str(info.value) == (
        "no module of vit_b_16 is a dropout layer (Dropout, Dropout1d, Dropout2d, Dropout3d, "
        "StochasticDepth); run `actviz list-layers vit_b_16` to see names and types"
    )
    with pytest.raises(LayerSelectionError) as info:
        select_layers(refs, "pool", model="vit_b_16")
    message = str(info.value)
    assert message.startswith("no module of vit_b_16 is a pooling layer (AdaptiveAvgPool1d, ")
    assert ", ...)" in message and "close" not in message


@pytest.mark.parametrize(
    ("term", "refs"),
    [
        ("attn", [r for r in VIT if "MultiheadAttention" not in r.types]),
        ("Attn", [r for r in VIT if "MultiheadAttention" not in r.types]),
        ("!attn", [r for r in VIT if "MultiheadAttention" not in r.types]),
        ("all", [r for r in VIT if not r.leaf]),  # matches nothing only without leaves
        ("name:Linear", VIT),  # a class name is no module name
        ("type:conv_proj", VIT),  # and a module name no class name
    ],
)
def test_the_term_itself_is_never_suggested(term: str, refs: list[LayerRef]) -> None:
    with pytest.raises(LayerSelectionError) as info:
        select_layers(refs, term, model="vit_b_16")
    message = str(info.value)
    assert "actviz list-layers vit_b_16" in message
    close = message.split("; close: ")[1].split(";")[0].split(", ") if "close:" in message else []
    bare = term.lstrip("!").split(":")[-1]
    assert not {bare, bare.lower(), bare.upper()} & set(close), message


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


@pytest.mark.parametrize(
    ("selector", "shown", "close"),
    [
        ("conv,!layr1.*", "'!layr1.*'", "layer1"),
        ("!fcc", "'!fcc'", "fc"),
        ("relu, ! name:bn2", "'!name:bn2'", "bn1"),
    ],
)
def test_an_exclusion_that_matches_nothing_is_an_error(
    selector: str, shown: str, close: str
) -> None:
    with pytest.raises(LayerSelectionError) as info:
        select_layers(MODEL, selector, model="resnet18")
    message = str(info.value)
    assert f"matches the exclusion {shown}" in message
    assert close in message.split("; close: ")[1].split(";")[0].split(", ")
    assert "actviz list-layers resnet18" in message


def test_an_alias_exclusion_that_matches_nothing_is_an_error() -> None:
    with pytest.raises(LayerSelectionError) as info:
        select_layers(MODEL, "conv,!dropout", model="resnet18")
    assert str(info.value).startswith(
        "no module of resnet18 is a dropout layer (Dropout, Dropout1d, Dropout2d, Dropout3d, "
        "StochasticDepth), so '!dropout' excludes nothing; run `actviz list-layers resnet18`"
    )


def test_an_exclusion_outside_the_selection_is_fine() -> None:
    # It matches layers of the model, just none of those chosen: nothing to change, no typo.
    assert select_layers(MODEL, "conv,!relu") == select_layers(MODEL, "conv")


def test_everything_excluded_is_an_error() -> None:
    with pytest.raises(LayerSelectionError, match="after exclusions"):
        select_layers(MODEL, "fc,!fc")


@pytest.mark.parametrize("bad", ["", " , ", "!", "re:("])
def test_malformed(bad: str) -> None:
    with pytest.raises(LayerSelectionError):
        select_layers(MODEL, bad)


def test_an_invalid_regex_says_what_is_wrong_with_it() -> None:
    for selector in ("re:(", ["conv", "!re:layer[1"]):
        with pytest.raises(LayerSelectionError) as info:
            select_layers(MODEL, selector)
        message = str(info.value)
        assert message.startswith("invalid regular expression in '")
        assert "at position" in message  # re.error's own explanation
        assert message.endswith("; fix the regular expression")
        assert "shell" not in message


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


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("all", set()),
        ("conv,layer4.*,re:fc", set()),
        ("layer1.0.conv1,fc", {"layer1.0.conv1", "fc"}),
        ("name:relu", {"relu"}),
        ("relu", set()),  # the alias wins: a type, not the module called relu
        ("type:Linear,!fc,layer4", {"layer4"}),
        (["conv", "avgpool"], {"avgpool"}),
    ],
)
def test_named_exactly_is_what_the_user_typed_name_by_name(
    selector: str | list[str], expected: set[str]
) -> None:
    assert named_exactly(MODEL, selector) == expected
