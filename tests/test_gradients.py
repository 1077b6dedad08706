"""Gradients against hand-computed references, targets, Grad-CAM, cleanup and gradient flow."""

from __future__ import annotations

import copy
import gc
import io
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest
import torch
from PIL import Image
from torch import nn

from actviz.errors import ModelError, UsageError
from actviz.gradients import (
    EXPLODING,
    VANISHING,
    GradientRecorder,
    class_cams,
    grad_cam,
    gradient_flow_png,
    to_nchw,
)
from actviz.gradients.core import compute_gradients, resolve_targets

SAMPLE = Path(__file__).resolve().parent.parent / "sample_images" / "cat.jpg"


def _hook_count(model: nn.Module) -> int:
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


def _reference(
    model: nn.Module, x: torch.Tensor, layers: Sequence[str], targets: Sequence[int]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Outputs and d(sum of target logits)/d(output) by plain autograd, keyed like actviz.

    Independent of actviz's method: each hooked output is replaced by a clone downstream.
    """
    modules = dict(model.named_modules())
    outputs: dict[str, torch.Tensor] = {}
    calls: dict[str, int] = {}
    handles = []
    for name in layers:

        def hook(_m: nn.Module, _a: object, out: torch.Tensor, name: str = name) -> torch.Tensor:
            calls[name] = calls.get(name, 0) + 1
            outputs[name if calls[name] == 1 else f"{name}:{calls[name]}"] = out
            # The rest of the model gets a clone, so no later in-place op (ResNet's
            # `out += identity`) can touch the tensor the gradient is taken against.
            return out.clone()

        handles.append(modules[name].register_forward_hook(hook))
    try:
        logits = model(x.clone().requires_grad_(True))
    finally:
        for handle in handles:
            handle.remove()
    loss = logits.gather(1, torch.tensor(targets).unsqueeze(1)).sum()
    grads = torch.autograd.grad(loss, list(outputs.values()))
    return (
        {k: v.detach() for k, v in outputs.items()},
        dict(zip(outputs, grads, strict=True)),
    )


@pytest.fixture
def twins(tiny_net: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The tiny net in float64, and an identical twin whose stem ReLU is not in-place."""
    model = copy.deepcopy(tiny_net).double().eval()
    twin = copy.deepcopy(model)
    cast(nn.ReLU, twin.get_submodule("stem.relu")).inplace = False
    return model, twin


LAYERS = ["stem.conv", "stem.bn", "stem.relu", "act", "block.conv", "head"]


# --------------------------------------------------------------------------- exactness


class _Inplace(nn.Module):
    """conv -> bn -> ReLU(inplace) -> ``mix`` twice (same shapes) -> linear head."""

    def __init__(self, inplace: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=inplace)
        self.mix = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4 * 6 * 6, 3)
        with torch.no_grad():
            self.bn.bias.fill_(-0.5)  # about half of bn's outputs negative

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mix(self.mix(self.relu(self.bn(self.conv(x)))))
        out: torch.Tensor = self.head(x.flatten(1))
        return out


def test_gradients_equal_autograd_on_a_twin_without_inplace_ops() -> None:
    torch.manual_seed(0)
    model = _Inplace().double().eval()
    twin = _Inplace(inplace=False).double().eval()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    layers = ["conv", "bn", "relu", "mix", "head"]
    result = compute_gradients(model, x, layers)
    outputs, grads = _reference(twin, x, layers, result.targets)

    assert list(result.captures) == ["conv", "bn", "relu", "mix", "mix:2", "head"]
    for key, capture in result.captures.items():
        assert capture.gradient.dtype == torch.float32 and capture.gradient.device.type == "cpu"
        torch.testing.assert_close(capture.gradient, grads[key].float(), rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(capture.activation, outputs[key].float())
    bn, relu = result.captures["bn"], result.captures["relu"]
    # bn's own output is pre-ReLU, and its gradient is the ReLU's masked where bn < 0.
    assert bn.activation.min() < -0.3 and relu.activation.min() == 0
    torch.testing.assert_close(bn.gradient, relu.gradient * (bn.activation > 0))
    assert (bn.gradient - relu.gradient).abs().max() > 1e-3
    # The two calls of `mix`: same shape, different outputs and gradients.
    first, second = result.captures["mix"], result.captures["mix:2"]
    assert (first.call, second.call) == (1, 2) and first.shape == second.shape == (2, 4, 6, 6)
    assert (first.gradient - second.gradient).abs().max() > 1e-3


def test_tiny_net_keys_and_gradients(twins: tuple[nn.Module, nn.Module]) -> None:
    model, twin = twins
    torch.manual_seed(1)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    result = compute_gradients(model, x, LAYERS, target="1")
    outputs, grads = _reference(twin, x, LAYERS, result.targets)
    assert list(result.captures) == [
        "stem.conv", "stem.bn", "stem.relu", "act", "block.conv", "act:2", "head"
    ]  # fmt: skip
    for key, capture in result.captures.items():
        torch.testing.assert_close(capture.gradient, grads[key].float(), rtol=1e-6, atol=1e-9)
    assert result.captures["stem.bn"].activation.min() < -0.5
    assert result.captures["act"].shape == (2, 4, 8, 8)
    assert result.captures["act:2"].shape == (2, 6, 8, 8)


def test_norms_are_per_image_l2_norms(twins: tuple[nn.Module, nn.Module]) -> None:
    model, _ = twins
    result = compute_gradients(model, torch.randn(3, 3, 8, 8, dtype=torch.float64), ["block.conv"])
    capture = result.captures["block.conv"]
    expected = [float(capture.gradient[i].double().norm()) for i in range(3)]
    assert capture.norms == pytest.approx(expected, rel=1e-12)


def test_each_image_gets_its_own_target_and_images_do_not_mix(
    twins: tuple[nn.Module, nn.Module],
) -> None:
    model, _ = twins
    torch.manual_seed(2)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    both = compute_gradients(model, x, ["block.conv"], target=[0, 2])
    alone = compute_gradients(model, x[1:], ["block.conv"], target="2")
    assert both.targets == [0, 2]
    torch.testing.assert_close(
        both.captures["block.conv"].gradient[1], alone.captures["block.conv"].gradient[0]
    )
    other = compute_gradients(model, x[1:], ["block.conv"], target="0")
    assert not torch.allclose(other.captures["block.conv"].gradient[0], alone.captures[
        "block.conv"].gradient[0])  # fmt: skip


def test_inplace_gradients_on_resnet18_match_a_non_inplace_twin() -> None:
    from torchvision.models import resnet18
    from torchvision.transforms._presets import ImageClassification

    torch.manual_seed(0)
    model = resnet18(weights=None).eval()
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    x = ImageClassification(crop_size=224)(Image.open(SAMPLE).convert("RGB")).unsqueeze(0)
    layers = ["bn1", "layer1.0.bn1", "layer1.0.bn2", "layer4"]
    result = compute_gradients(model, x, layers)
    outputs, grads = _reference(twin, x, layers, result.targets)
    for key in layers:
        torch.testing.assert_close(result.captures[key].gradient, grads[key], rtol=1e-4,
                                   atol=1e-7)  # fmt: skip
        torch.testing.assert_close(result.captures[key].activation, outputs[key])
    assert result.captures["bn1"].activation.min() < 0  # pre-ReLU, despite the in-place ReLU
    assert result.input_gradient is not None and result.input_gradient.shape == x.shape


# --------------------------------------------------------------------------- cleanup


class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")


class _FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("backward boom")


class _BadBackward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, _FailingBackward.apply(x))


def _buffer(model: nn.Module, name: str) -> torch.Tensor:
    return model.get_buffer(name)


def _params_clean(model: nn.Module) -> bool:
    return all(p.grad is None for p in model.parameters())


def test_nothing_left_behind_after_success(tiny_net: nn.Module) -> None:
    tiny_net.train()
    tiny_net.get_submodule("stem").eval()  # a mixed state must come back as it was
    flags = {name: m.training for name, m in tiny_net.named_modules()}
    stats = _buffer(tiny_net, "stem.bn.running_mean").clone()
    before = _hook_count(tiny_net)
    compute_gradients(tiny_net, torch.randn(2, 3, 8, 8), LAYERS)
    assert _hook_count(tiny_net) == before == 0
    assert _params_clean(tiny_net)
    assert {name: m.training for name, m in tiny_net.named_modules()} == flags
    # Ran in eval mode: batch-norm statistics untouched.
    assert torch.equal(_buffer(tiny_net, "stem.bn.running_mean"), stats)


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_nothing_left_behind_after_an_exception(tiny_net: nn.Module, where: str) -> None:
    tiny_net.train()
    block = tiny_net.get_submodule("block")
    block.conv = nn.Sequential(
        block.get_submodule("conv"), _Boom() if where == "forward" else _BadBackward()
    )
    with pytest.raises(RuntimeError, match="boom"):
        compute_gradients(tiny_net, torch.randn(1, 3, 8, 8), LAYERS)
    assert _hook_count(tiny_net) == 0
    assert _params_clean(tiny_net)
    assert all(m.training for m in tiny_net.modules())


def test_the_graph_is_freed_when_the_call_returns(tiny_net: nn.Module) -> None:
    seen: list[weakref.ref[torch.Tensor]] = []
    handle = tiny_net.get_submodule("block.conv").register_forward_hook(
        lambda _m, _a, out: seen.append(weakref.ref(out))
    )
    try:
        result = compute_gradients(tiny_net, torch.randn(2, 3, 8, 8), ["block.conv", "head"])
    finally:
        handle.remove()
    gc.collect()
    assert seen and seen[0]() is None  # nothing holds the output, hence nothing the graph
    for capture in result.captures.values():
        for tensor in (capture.activation, capture.gradient):
            assert tensor.grad_fn is None and not tensor.requires_grad
    assert not result.logits.requires_grad


def test_works_under_inference_mode_and_no_grad(tiny_net: nn.Module) -> None:
    with torch.inference_mode():
        x = torch.randn(1, 3, 8, 8)
        inside = compute_gradients(tiny_net, x, ["block.conv"], target="1")
    with torch.no_grad():
        plain = compute_gradients(tiny_net, x.clone(), ["block.conv"], target="1")
    assert inside.captures["block.conv"].gradient.abs().sum() > 0
    torch.testing.assert_close(
        inside.captures["block.conv"].gradient, plain.captures["block.conv"].gradient
    )


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)
        self.aux = nn.Conv2d(2, 2, 1)  # runs, but the logits do not use it
        self.pair = nn.Identity()
        self.words = nn.Identity()
        self.unused = nn.ReLU()
        self.head = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.conv(x)
        self.aux(features)
        self.pair((features, features * 2))
        self.words(("no", "tensor"))
        return cast(torch.Tensor, self.head(features.mean(dim=(2, 3))))


def test_unused_tuple_and_missing_outputs_are_reported() -> None:
    model = _Branchy()
    layers = ["conv", "aux", "pair", "words", "unused"]
    result = compute_gradients(model, torch.randn(2, 3, 4, 4), layers)
    # A tuple output gives one capture per tensor, keyed as activation captures are.
    assert list(result.captures) == ["conv", "aux", "pair[0]", "pair[1]"]
    aux = result.captures["aux"]
    assert aux.note is not None and "does not depend" in aux.note
    assert torch.count_nonzero(aux.gradient) == 0 and aux.norms == (0.0, 0.0)
    pair = result.captures["pair[0]"]
    assert pair.module == "pair" and torch.equal(pair.gradient, result.captures["conv"].gradient)
    assert result.captures["pair[1]"].note is not None  # the doubled copy feeds nothing
    assert [(s.key, "tuple" in s.reason) for s in result.skipped] == [("words", True)]
    assert result.never_called == ["unused"]


def test_recorder_refuses_to_report_before_backward(tiny_net: nn.Module) -> None:
    with GradientRecorder(tiny_net, ["head"]) as rec:
        x = torch.randn(1, 3, 8, 8, requires_grad=True)
        logits = tiny_net(x)
        with pytest.raises(RuntimeError, match="backward"):
            _ = rec.captures
        (grad_x,) = rec.backward(logits[:, 0].sum(), x)
        assert grad_x is not None and grad_x.shape == x.shape
        assert rec.captures[0].gradient[0].tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ModelError, match="no module named nope"):
        GradientRecorder(tiny_net, ["nope"]).__enter__()
    assert _hook_count(tiny_net) == 0


# --------------------------------------------------------------------------- targets

CATS = ["tabby", "tiger cat", "Persian cat", "crane", "crane"]


def test_targets_top1_index_and_name() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0, 0.0, 0.0], [3.0, 0.0, 1.0, 0.0, 0.0]])
    assert resolve_targets(logits, "top1", CATS) == [1, 0]
    assert resolve_targets(logits, "TOP1", None) == [1, 0]
    assert resolve_targets(logits, "2", None) == [2, 2]
    assert resolve_targets(logits, 4, None) == [4, 4]
    assert resolve_targets(logits, "persian CAT", CATS) == [2, 2]


@pytest.mark.parametrize(
    ("target", "categories", "message"),
    [
        ("5", CATS, r"class index 5 is out of range .* use 0-4"),
        ("-1", CATS, r"class index -1 is out of range"),
        ("tiger", CATS, r"unknown class 'tiger'; did you mean 'tiger cat'"),
        ("persion cat", CATS, r"did you mean 'Persian cat'"),
        ("crane", CATS, r"ambiguous \(indices 3, 4\); pass the index"),
        ("tabby", None, r"no class names.* class index \(0-4\) or top1"),
        ("zzzzzz", CATS, r"unknown class 'zzzzzz'; use a class index"),
    ],
)
def test_bad_targets_raise_usage_errors(
    target: str, categories: list[str] | None, message: str
) -> None:
    logits = torch.zeros(2, 5)
    with pytest.raises(UsageError, match=message) as info:
        resolve_targets(logits, target, categories)
    assert "\n" not in str(info.value)


def test_top1_through_the_model_differs_per_image() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Identity())  # logits = the input itself
    x = torch.tensor([[[[0.0, 0.0, 9.0]]], [[[9.0, 0.0, 0.0]]]])
    result = compute_gradients(model, x, ["1"])
    assert result.targets == [2, 0]
    assert result.captures["1"].gradient.tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    with pytest.raises(UsageError, match="expected 2 targets"):
        compute_gradients(model, x, ["1"], target=[1])
    with pytest.raises(ModelError, match=r"shape \(batch, classes\)"):
        compute_gradients(nn.Identity(), x, [], target="top1")


# --------------------------------------------------------------------------- Grad-CAM


class _Quadrants(nn.Module):
    """``features`` ch0 = input (bright in the top-left quadrant), ch1 = 1 - input.

    Class k is the global average of channel k, so class 0's evidence is exactly the top-left
    quadrant and class 1's everything else.
    """

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv2d(1, 2, 1)
        self.head = nn.Linear(2, 2)
        with torch.no_grad():
            self.features.weight.copy_(torch.tensor([1.0, -1.0]).view(2, 1, 1, 1))
            self.get_parameter("features.bias").copy_(torch.tensor([0.0, 1.0]))
            self.head.weight.copy_(torch.eye(2))
            self.get_parameter("head.bias").zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x).mean(dim=(2, 3)))
        return out


def _quadrant_input() -> torch.Tensor:
    x = torch.zeros(1, 1, 8, 8)
    x[..., :4, :4] = 1.0
    return x


def test_grad_cam_finds_the_quadrant_a_class_depends_on() -> None:
    model, x = _Quadrants(), _quadrant_input()
    top_left = torch.zeros(8, 8, dtype=torch.bool)
    top_left[:4, :4] = True
    for target, hot in ((0, top_left), (1, ~top_left)):
        result = compute_gradients(model, x, ["features"], target=target)
        capture = result.captures["features"]
        cam = grad_cam(capture.activation, capture.gradient)
        assert cam.shape == (1, 8, 8)
        assert torch.all(cam[0][hot] == 1.0) and torch.all(cam[0][~hot] == 0.0)
        torch.testing.assert_close(grad_cam(capture.activation[0], capture.gradient[0]), cam[0])


def test_class_cams_rank_classes_and_label_them() -> None:
    x = torch.cat([_quadrant_input(), 1 - _quadrant_input()])  # image 1 favours class 0
    per_image = class_cams(_Quadrants(), x, "features", k=2, categories=["tl", "rest"])
    assert [[c.index for c in maps] for maps in per_image] == [[1, 0], [0, 1]]
    first = per_image[0][1]
    assert first.label == "tl" and first.caption.startswith("tl ")
    assert first.cam[:4, :4].min() == 1.0 and first.cam[4:].max() == 0.0
    assert sum(c.probability for c in per_image[0]) == pytest.approx(1.0)
    with pytest.raises(UsageError, match="between 1 and 2"):
        class_cams(_Quadrants(), x, "features", k=3)


@pytest.mark.parametrize("layer", ["bn", "relu", "mix"])
def test_class_cams_equal_grad_cam_of_compute_gradients(layer: str) -> None:
    # bn is changed in place after it is recorded (backward must then run to the input);
    # relu and mix are not (backward may stop at them). Both must give the same maps.
    torch.manual_seed(4)
    model = _Inplace().double().eval()
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    per_image = class_cams(model, x, layer, k=2)
    for rank in range(2):
        targets = [maps[rank].index for maps in per_image]
        capture = compute_gradients(model, x, [layer], target=targets).captures[layer]
        expected = grad_cam(capture.activation, capture.gradient)
        for i, maps in enumerate(per_image):
            torch.testing.assert_close(maps[rank].cam, expected[i])
    assert _hook_count(model) == 0 and _params_clean(model)


def test_token_and_nhwc_layouts_give_the_nchw_cam() -> None:
    torch.manual_seed(3)
    act, grad = torch.randn(2, 5, 3, 4), torch.randn(2, 5, 3, 4)  # non-square: h=3, w=4
    expected = grad_cam(act, grad)

    def tokens(t: torch.Tensor) -> torch.Tensor:
        patches = t.permute(0, 2, 3, 1).reshape(2, 12, 5)
        return torch.cat([torch.randn(2, 1, 5) * 100, patches], dim=1)  # junk class token

    torch.testing.assert_close(
        grad_cam(tokens(act), tokens(grad), layout="tokens", grid=(3, 4)), expected
    )
    nhwc = grad_cam(act.permute(0, 2, 3, 1), grad.permute(0, 2, 3, 1), layout="nhwc")
    torch.testing.assert_close(nhwc, expected)
    torch.testing.assert_close(grad_cam(act.numpy(), grad.numpy()), expected)
    square = torch.randn(1, 2 + 16, 5)  # two prefix tokens, grid inferred as 4 x 4
    assert to_nchw(square, "tokens", prefix_tokens=2).shape == (1, 5, 4, 4)
    with pytest.raises(ValueError, match="do not fill a 3x3 grid"):
        to_nchw(torch.randn(1, 11, 5), "tokens", grid=(3, 3))


def test_grad_cam_of_nothing_is_zero_not_nan() -> None:
    act = torch.rand(4, 3, 3)
    assert torch.equal(grad_cam(act, torch.zeros(4, 3, 3)), torch.zeros(3, 3))
    against = grad_cam(act, -torch.ones(4, 3, 3))  # only negative evidence: ReLU clears it
    assert torch.equal(against, torch.zeros(3, 3))
    cam = grad_cam(torch.rand(2, 8, 5, 5), torch.randn(2, 8, 5, 5))
    assert float(cam.min()) >= 0.0 and float(cam.max()) <= 1.0
    with pytest.raises(ValueError, match="differ"):
        grad_cam(torch.rand(4, 3, 3), torch.rand(4, 3, 2))


# --------------------------------------------------------------------------- gradient flow


def _deep_mlp(scale: float, depth: int = 10, width: int = 32) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        linear = nn.Linear(width, width)
        with torch.no_grad():
            linear.weight.mul_(scale)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _linear_norms(model: nn.Sequential) -> tuple[list[str], list[float]]:
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    x = torch.randn(4, 32)
    result = compute_gradients(model, x, names, target="top1")
    means = [sum(c.norms) / len(c.norms) for c in result.captures.values()]
    return names, means


def test_badly_initialized_mlp_shows_exploding_gradients_toward_the_input() -> None:
    _, exploding = _linear_norms(_deep_mlp(scale=10.0))
    _, default = _linear_norms(_deep_mlp(scale=1.0))
    _, vanishing = _linear_norms(_deep_mlp(scale=0.1))
    # Backward multiplies by 10 x W^T per layer: the input side gets the huge norms.
    assert all(a > 2 * b for a, b in zip(exploding, exploding[1:], strict=False))
    assert exploding[0] / exploding[-1] > 1e5 and exploding[0] > EXPLODING
    # ReLU is positively homogeneous, so against the default init each layer closer to the
    # input gains about one more factor of 10 (biases, which were not scaled, blur it a bit).
    gain = [e / d for e, d in zip(exploding, default, strict=True)]
    steps = [a / b for a, b in zip(gain, gain[1:], strict=False)]
    assert all(3 < step < 30 for step in steps), steps
    assert gain[0] / gain[-1] > 1e8
    assert vanishing[0] < VANISHING < vanishing[-1]


def test_gradient_flow_png_is_a_readable_chart() -> None:
    names, norms = _linear_norms(_deep_mlp(scale=10.0))
    series = {"image-a": norms, "image-b": [n * 3 for n in norms], "zeros": [0.0] * len(norms)}
    png = gradient_flow_png(names, series, title="exploding MLP")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert 10_000 < len(png) < 500_000
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == (1000, 450)
        pixels = image.convert("RGB")
        colours = len(pixels.getcolors(maxcolors=1 << 20) or [])
    assert colours > 50  # lines, bands and text, not a blank canvas
    many = [f"layer{i}.conv" for i in range(120)]
    png = gradient_flow_png(many, {"x": [10.0**-i for i in range(120)]}, title="deep")
    assert png[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="2 norms for 3 layers"):
        gradient_flow_png(["a", "b", "c"], {"s": [1.0, 2.0]}, title="t")


# --------------------------------------------------------------------------- class-token models


def _tiny_vit(*, trained_head: bool) -> nn.Module:
    """torchvision's ViT, tiny: 4 x 4 patches of 8 px, two blocks, a class-token readout.

    Like every torchvision ViT its head is zero-initialised; ``trained_head`` fills it.
    """
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32,
        patch_size=8,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        mlp_dim=32,
        num_classes=5,
    )
    if trained_head:
        nn.init.normal_(cast(torch.Tensor, model.heads.head.weight), std=0.5)
    model.eval()
    return cast(nn.Module, model)


BLOCK0, BLOCK1 = "encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1"


def test_patch_tokens_get_gradient_exactly_where_attention_follows() -> None:
    from actviz.contexts import layer_contexts
    from actviz.gradients.batch import patches_reach_readout

    model = _tiny_vit(trained_head=True)
    contexts = layer_contexts(model)
    names = [
        "conv_proj",
        BLOCK0,
        f"{BLOCK1}.ln_1",
        f"{BLOCK1}.ln_2",
        BLOCK1,
        "encoder.ln",
    ]
    result = compute_gradients(model, torch.randn(2, 3, 32, 32), names)
    reach = {}
    for name in names[1:]:  # token outputs: (B, 1 + 16, C)
        gradient = result.captures[name].gradient
        reach[name] = bool(gradient[:, 1:].any())
        assert bool(gradient[:, :1].any())  # the class token always gets its gradient
    assert reach == {name: patches_reach_readout(name, contexts) for name in names[1:]}
    assert reach == {
        BLOCK0: True,
        f"{BLOCK1}.ln_1": True,
        f"{BLOCK1}.ln_2": False,
        BLOCK1: False,
        "encoder.ln": False,
    }
    assert patches_reach_readout("conv_proj", contexts)


def test_default_cam_layer_skips_outputs_no_attention_follows(tiny_net: nn.Module) -> None:
    from types import SimpleNamespace

    from actviz.contexts import layer_contexts
    from actviz.gradients import choose_cam_keys

    contexts = layer_contexts(_tiny_vit(trained_head=False))

    def cap(name: str, shape: tuple[int, ...]) -> SimpleNamespace:
        return SimpleNamespace(key=name, module=name, kind="output", shape=shape)

    captures = [cap("conv_proj", (1, 16, 4, 4)), cap(BLOCK0, (1, 17, 16)), cap(BLOCK1, (1, 17, 16))]
    assert choose_cam_keys(captures, contexts, explicit=False) == {BLOCK0}
    assert choose_cam_keys(captures, contexts, explicit=True) == {"conv_proj", BLOCK0, BLOCK1}
    # A convolutional model keeps its last spatial output.
    cnn = layer_contexts(tiny_net)
    convs = [cap("stem.conv", (1, 4, 8, 8)), cap("block.conv", (1, 6, 8, 8))]
    assert choose_cam_keys(convs, cnn, explicit=False) == {"block.conv"}


def test_all_zero_gradients_and_cams_say_why() -> None:
    from actviz.contexts import layer_contexts
    from actviz.gradients import backward
    from actviz.gradients.core import CLASS_TOKEN_NOTE

    x = torch.randn(2, 3, 32, 32)
    names = ["a", "b", "c", "d", "e"]

    # Random weights: the zero-initialised head makes every gradient zero.
    model = _tiny_vit(trained_head=False)
    contexts = layer_contexts(model)
    captures, targets, ranked = backward(
        model,
        x,
        [BLOCK0, BLOCK1],
        target="top1",
        categories=names,
        cam_keys=frozenset({BLOCK0}),
        cam_classes=1,
        contexts=contexts,
    )
    for key in (BLOCK0, BLOCK1):
        note = captures[key].note
        assert note is not None and "heads.head" in note and "all-zero weights" in note
    maps = ranked[BLOCK0]
    assert [len(row) for row in maps] == [1, 1]
    for row, target in zip(maps, targets, strict=True):
        cam = row[0]
        assert cam.index == target and cam.label == names[target]
        assert cam.probability == pytest.approx(1 / 5)  # constant logits
        assert not cam.cam.any() and cam.note == captures[BLOCK0].note

    # A trained head: the last block's patches still get nothing (class-token readout),
    # the block before it gets a map; each map carries its class and probability.
    model = _tiny_vit(trained_head=True)
    captures, targets, ranked = backward(
        model,
        x,
        [BLOCK0, BLOCK1],
        target="top1",
        categories=names,
        cam_keys=frozenset({BLOCK0, BLOCK1}),
        cam_classes=1,
        contexts=contexts,
    )
    assert captures[BLOCK1].note == CLASS_TOKEN_NOTE and captures[BLOCK0].note is None
    with torch.no_grad():
        probabilities = model(x).softmax(dim=1)
    for i, target in enumerate(targets):
        good, blank = ranked[BLOCK0][i][0], ranked[BLOCK1][i][0]
        assert good.cam.max() == 1.0 and good.note is None
        assert good.probability == pytest.approx(float(probabilities[i, target]), rel=1e-5)
        assert good.caption == f"{names[target]} ({target}) {good.probability:.1%}"
        assert not blank.cam.any() and blank.note == CLASS_TOKEN_NOTE

    # Top classes side by side get the same notes.
    _, _, ranked = backward(
        model,
        x,
        [BLOCK1],
        target="top1",
        categories=None,
        cam_keys=frozenset({BLOCK1}),
        cam_classes=2,
        contexts=contexts,
    )
    assert all(
        c.note == CLASS_TOKEN_NOTE and c.name.startswith("class ")
        for row in ranked[BLOCK1]
        for c in row
    )


def test_notes_name_the_layers_that_share_them() -> None:
    from pathlib import Path, PurePosixPath

    from actviz.gradients.notes import layer_notes
    from actviz.results import ImageResult, LayerResult

    def layer(key: str, zero: bool, note: str | None, cam_note: str | None) -> LayerResult:
        gradient = {"zero": zero, "note": note}
        return LayerResult(
            key,
            key,
            "Block",
            1,
            (1, 4),
            0.0,
            0.0,
            0.0,
            4,
            4,
            None,
            gradient=gradient,
            cam_note=cam_note,
        )

    result = ImageResult(Path("x.png"), PurePosixPath("x"))
    result.layers = [
        layer("a", True, "why", "why"),
        layer("b", True, "why", "why"),
        layer("c", True, "other", None),
        layer("d", False, None, "no positive evidence"),
        layer("e", False, None, None),
    ]
    assert layer_notes(result) == [
        "a, b: the gradient and the Grad-CAM map are all zero: why",
        "c: the gradient is all zero: other",
        "d: the Grad-CAM map is all zero: no positive evidence",
    ]
