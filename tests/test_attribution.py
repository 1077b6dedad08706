"""The attribution methods against known answers and the libraries users compare with: exact on
a model linear in its input, IG's completeness, captum's IntegratedGradients and NoiseTunnel,
zennit's composites, attention rollout against an independent numpy product, and the steps
going through the model one batch at a time."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from actviz.errors import UsageError
from actviz.gradients.attribution import AttributionJob, AttributionSettings, to_maps
from actviz.gradients.registry import MAP_METHODS


def _run(method: str, model: nn.Module, x: torch.Tensor, targets: list[int], **settings: object):  # type: ignore[no-untyped-def]
    batch = int(settings.pop("batch_size", 8))  # type: ignore[call-overload]
    job = AttributionJob(model, x, targets, AttributionSettings(**settings), batch)  # type: ignore[arg-type]
    return MAP_METHODS[method].compute(job)


def _resnet18(seed: int = 0) -> nn.Module:
    """resnet18 with random weights whose batch norms and head have offsets, so the model is
    not positively homogeneous (with torchvision's fresh statistics IG would equal gradient x
    input by construction)."""
    torch.manual_seed(seed)
    model = torchvision.models.resnet18(num_classes=10)
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            size = module.num_features
            module.running_mean.copy_(0.1 * torch.randn(size, generator=generator))
            module.running_var.copy_(1 + 0.5 * torch.rand(size, generator=generator))
            nn.init.normal_(module.bias, std=0.1, generator=generator)
    return model.eval()


@pytest.fixture(scope="module")
def resnet() -> nn.Module:
    return _resnet18()


@pytest.fixture(scope="module")
def photo_batch() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


# Known answers.
@pytest.mark.parametrize("integration", ["gausslegendre", "riemann_trapezoid", "riemann_left"])
def test_linear_model_ig_and_gradient_x_input_are_the_input_times_the_weights(
    integration: str,
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 5 * 4, 6)).eval()
    x = torch.randn(3, 3, 5, 4)
    targets = [2, 0, 5]
    weights = model[1].weight.detach()
    expected = torch.stack([x[i] * weights[t].view(3, 5, 4) for i, t in enumerate(targets)])
    ig = _run("ig", model, x, targets, steps=7, integration=integration, batch_size=4)
    gxi = _run("gradxinput", model, x, targets)
    # The gradient is the weight row at every point of the path: only float32 rounding.
    torch.testing.assert_close(ig.values, expected, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(gxi.values, expected, rtol=1e-6, atol=1e-7)
    # Completeness holds to rounding: F(x) - F(0) is exactly sum(w * x).
    assert all(a is not None and a["residual"] < 1e-5 for a in ig.axioms)
    assert gxi.axioms == [None, None, None]


def test_ig_completeness_on_resnet18_at_the_default_steps() -> None:
    """torchvision's resnet18 as it is built (random weights): F(x) - F(0) to 1e-3."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(1))
    found = _run("ig", model, x, [3, 7], batch_size=16)
    assert AttributionSettings().steps == 32
    with torch.no_grad():
        logits = model(torch.cat([x, torch.zeros_like(x)])).double()
    for i, (axiom, values) in enumerate(zip(found.axioms, found.values, strict=True)):
        assert axiom is not None
        target = [3, 7][i]
        difference = float(logits[i, target] - logits[2 + i, target])
        assert axiom["score"] - axiom["baseline_score"] == pytest.approx(difference, abs=1e-5)
        assert abs(float(values.double().sum()) - difference) <= 1e-3
        assert axiom["residual"] <= 1e-3


@pytest.mark.slow
def test_ig_completeness_converges_on_a_model_that_is_not_homogeneous(
    resnet: nn.Module, photo_batch: torch.Tensor
) -> None:
    """With offsets in the batch norms the path is no straight line through the model's
    kinks: the residual is under the warning's 5% at 32 steps and falls with more; and
    gradient x input is no longer IG."""
    default = _run("ig", resnet, photo_batch, [3, 7], batch_size=16)
    many = _run("ig", resnet, photo_batch, [3, 7], steps=128, batch_size=64)
    for coarse, fine in zip(default.axioms, many.axioms, strict=True):
        assert coarse is not None and fine is not None
        assert coarse["relative"] < 0.05 and fine["residual"] <= 1e-3
    assert sum(a["residual"] for a in many.axioms if a) < sum(
        a["residual"] for a in default.axioms if a
    )
    gxi = _run("gradxinput", resnet, photo_batch, [3, 7])
    assert not torch.allclose(gxi.values, many.values, atol=1e-4)


def test_the_steps_go_through_the_model_batch_size_rows_at_a_time(
    resnet: nn.Module, photo_batch: torch.Tensor
) -> None:
    seen: list[int] = []
    hook = resnet.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[0])))
    try:
        chunked = _run("ig", resnet, photo_batch, [1, 2], steps=5, batch_size=3)
        rows = list(seen)
        seen.clear()
        whole = _run("ig", resnet, photo_batch, [1, 2], steps=5, batch_size=64)
    finally:
        hook.remove()
    assert max(rows) == 3 and sum(rows[:4]) == 10  # 2 images x 5 steps, 3 rows at a time
    assert max(seen) == 10
    torch.testing.assert_close(chunked.values, whole.values, rtol=1e-4, atol=1e-6)


# Parity with captum.
@pytest.mark.parametrize("integration", ["gausslegendre", "riemann_middle"])
def test_ig_equals_captums_integrated_gradients(
    resnet: nn.Module, photo_batch: torch.Tensor, integration: str
) -> None:
    captum = pytest.importorskip("captum.attr")
    ours = _run("ig", resnet, photo_batch, [4, 9], steps=8, integration=integration, batch_size=8)
    theirs, delta = captum.IntegratedGradients(resnet).attribute(
        photo_batch,
        target=[4, 9],
        n_steps=8,
        method=integration,
        internal_batch_size=8,
        return_convergence_delta=True,
    )
    scale = float(theirs.abs().max())
    torch.testing.assert_close(ours.values, theirs.detach(), rtol=0, atol=1e-5 * scale)
    # captum's delta is sum(a) - (F(x) - F(x')): the same residual, signed.
    for axiom, d in zip(ours.axioms, delta.tolist(), strict=True):
        assert axiom is not None
        assert axiom["residual"] == pytest.approx(abs(d), abs=1e-4)


def test_smoothgrad_equals_captums_noise_tunnel_with_the_same_seed(resnet: nn.Module) -> None:
    captum = pytest.importorskip("captum.attr")
    x = torch.randn(1, 3, 40, 40, generator=torch.Generator().manual_seed(2))
    ours = _run("smoothgrad", resnet, x, [5], samples=6, noise=0.1, seed=11, batch_size=4)
    sigma = 0.1 * float(x[0].max() - x[0].min())
    torch.manual_seed(11)
    theirs = captum.NoiseTunnel(captum.Saliency(resnet)).attribute(
        x, nt_type="smoothgrad", nt_samples=6, nt_samples_batch_size=6, stdevs=sigma,
        target=5, abs=False,
    )  # fmt: skip
    scale = float(theirs.abs().max())
    torch.testing.assert_close(ours.values, theirs.detach(), rtol=0, atol=1e-5 * scale)


def test_smoothgrad_is_seeded(resnet: nn.Module, photo_batch: torch.Tensor) -> None:
    a = _run("smoothgrad", resnet, photo_batch, [0, 1], samples=3, seed=4)
    b = _run("smoothgrad", resnet, photo_batch, [0, 1], samples=3, seed=4, batch_size=2)
    c = _run("smoothgrad", resnet, photo_batch, [0, 1], samples=3, seed=5)
    torch.testing.assert_close(a.values, b.values, rtol=1e-4, atol=1e-7)
    assert not torch.allclose(a.values, c.values, atol=1e-6)
    # One image alone gets the noise it gets in a batch: seeded per image.
    alone = _run("smoothgrad", resnet, photo_batch[1:], [1], samples=3, seed=4)
    torch.testing.assert_close(alone.values[0], a.values[1], rtol=1e-4, atol=1e-7)


# Parity with zennit.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "vgg11_bn"])
def test_lrp_equals_zennits_composite_with_its_canonizers(name: str) -> None:
    pytest.importorskip("zennit")
    from zennit.attribution import Gradient
    from zennit.composites import EpsilonPlusFlat
    from zennit.torchvision import ResNetCanonizer, VGGCanonizer

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    ours = _run("lrp", model, x, [2, 8])
    assert ours.record["canonizers"] == ("ResNetCanonizer" if "resnet" in name else "VGGCanonizer")
    canonizer = ResNetCanonizer() if "resnet" in name else VGGCanonizer()
    seed = torch.nn.functional.one_hot(torch.tensor([2, 8]), 10).float()
    with Gradient(model, EpsilonPlusFlat(canonizers=[canonizer])) as attributor:
        _, theirs = attributor(x.clone().requires_grad_(True), seed)
    scale = float(theirs.abs().max())
    torch.testing.assert_close(ours.values, theirs.detach(), rtol=0, atol=1e-5 * scale)
    # Conservation: the relevance at the input over the unit seed, near 1 but not 1.
    for axiom, values in zip(ours.axioms, ours.values, strict=True):
        assert axiom is not None and axiom["kept"] == pytest.approx(float(values.sum()), rel=1e-5)
        assert 0.5 < axiom["kept"] < 1.5
    # zennit's canonizers and rules are gone: the model computes as before.
    with torch.no_grad():
        plain = model(x)
    with torch.no_grad():
        torch.testing.assert_close(model(x), plain)
    assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())


def test_lrp_refuses_a_transformer(vit: nn.Module) -> None:
    pytest.importorskip("zennit")
    with pytest.raises(UsageError, match="no rules for attention"):
        _run("lrp", vit, torch.randn(1, 3, 32, 32), [0])


def test_lrp_without_zennit_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, resnet: nn.Module
) -> None:
    for name in ("zennit", "zennit.attribution", "zennit.composites", "zennit.torchvision"):
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    with pytest.raises(UsageError, match=r"needs zennit: pip install 'actviz\[lrp\]'"):
        _run("lrp", resnet, torch.randn(1, 3, 32, 32), [0])


# Attention rollout.
@pytest.fixture
def vit() -> nn.Module:
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=3, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=5,
    )  # fmt: skip
    nn.init.normal_(model.heads.head.weight, std=0.5)
    return model.eval()


def _numpy_rollout(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    """The class token's rolled-out attention over the patches, from each block's attention
    recomputed in numpy from the input of its attention and the projection weights."""
    inputs: list[np.ndarray] = []
    hooks = [
        layer.ln_1.register_forward_hook(lambda _m, _a, out: inputs.append(out.detach().numpy()))
        for layer in model.encoder.layers
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    product = None
    for layer, h in zip(model.encoder.layers, inputs, strict=True):
        mha = layer.self_attention
        w = mha.in_proj_weight.detach().numpy().astype(np.float64)
        b = mha.in_proj_bias.detach().numpy().astype(np.float64)
        e, heads = mha.embed_dim, mha.num_heads
        q = h @ w[:e].T + b[:e]
        k = h @ w[e : 2 * e].T + b[e : 2 * e]
        batch, n, _ = q.shape
        q = q.reshape(batch, n, heads, e // heads).transpose(0, 2, 1, 3)
        k = k.reshape(batch, n, heads, e // heads).transpose(0, 2, 1, 3)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(e // heads)
        a = np.exp(scores - scores.max(-1, keepdims=True))
        a = (a / a.sum(-1, keepdims=True)).mean(axis=1)
        a = (a + np.eye(n)) / 2
        a = a / a.sum(-1, keepdims=True)
        product = a if product is None else a @ product
    assert product is not None
    return product[:, 0, 1:]


def test_rollout_equals_an_independent_numpy_product(vit: nn.Module) -> None:
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    found = _run("rollout", vit, x, [0, 0])
    expected = _numpy_rollout(vit, x).reshape(2, 1, 4, 4)
    np.testing.assert_allclose(found.values.numpy(), expected, rtol=1e-4, atol=1e-6)
    assert all(a is not None and a["deviation"] < 1e-9 for a in found.axioms)
    assert any("need_weights=True" in note for note in found.notes)
    # The model is as it was: hooks gone, MultiheadAttention called as the model calls it.
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in vit.modules())


def test_grad_rollout_weights_the_attention_by_its_true_gradient(vit: nn.Module) -> None:
    """The gradient of a MultiheadAttention's weights derived from its output's (which the
    model's output is computed from) equals autograd's through an explicit attention."""
    from actviz.gradients.rollout import _head_gradient

    mha = vit.encoder.layers[0].self_attention
    h = torch.randn(2, 17, 16, generator=torch.Generator().manual_seed(5))
    probe = torch.randn(2, 17, 16, generator=torch.Generator().manual_seed(6))
    out, _ = mha(h, h, h, need_weights=False)
    (grad_out,) = torch.autograd.grad((out * probe).sum(), out)
    derived = _head_gradient(mha, h)(grad_out)
    # The same attention written out, its weights a leaf of the graph.
    e, heads = 16, 2
    w, b = mha.in_proj_weight, mha.in_proj_bias
    q = (h @ w[:e].T + b[:e]).reshape(2, 17, heads, 8).transpose(1, 2)
    k = (h @ w[e : 2 * e].T + b[e : 2 * e]).reshape(2, 17, heads, 8).transpose(1, 2)
    v = (h @ w[2 * e :].T + b[2 * e :]).reshape(2, 17, heads, 8).transpose(1, 2)
    a = ((q @ k.transpose(-2, -1)) / 8**0.5).softmax(-1).detach().requires_grad_(True)
    o = (a @ v).transpose(1, 2).reshape(2, 17, e)
    explicit = nn.functional.linear(o, mha.out_proj.weight, mha.out_proj.bias)
    torch.testing.assert_close(explicit, out, rtol=1e-4, atol=1e-5)
    (expected,) = torch.autograd.grad((explicit * probe).sum(), a)
    torch.testing.assert_close(derived, expected, rtol=1e-4, atol=1e-6)
    found = _run("grad-rollout", vit, torch.randn(1, 3, 32, 32), [3])
    assert found.values.shape == (1, 1, 4, 4) and bool(found.values.abs().sum() > 0)


def test_rollout_on_timm_turns_fused_attention_off_for_the_run_only() -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
        num_classes=4,
    ).eval()  # fmt: skip
    attention = [m for m in model.modules() if hasattr(m, "fused_attn")]
    for m in attention:
        m.fused_attn = True
    x = torch.randn(1, 3, 32, 32)
    found = _run("rollout", model, x, [0])
    assert all(m.fused_attn is True for m in attention)
    assert any("fused_attn=False" in note for note in found.notes)
    assert found.values.shape == (1, 1, 4, 4)
    for m in attention:
        m.fused_attn = False
    again = _run("rollout", model, x, [0])
    torch.testing.assert_close(found.values, again.values)
    assert float(found.values.sum()) < 1 and float(found.values.min()) > 0


def test_rollout_on_hugging_face_equals_its_own_attentions() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, num_hidden_layers=2, num_attention_heads=2,
        hidden_size=16, intermediate_size=32, num_labels=3,
    )  # fmt: skip
    torch.manual_seed(0)
    inner = transformers.ViTForImageClassification(config).eval()

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(pixel_values=x).logits  # type: ignore[no-any-return]

    model = Logits().eval()
    chosen = inner.config._attn_implementation
    x = torch.randn(1, 3, 32, 32)
    found = _run("rollout", model, x, [1])
    assert inner.config._attn_implementation == chosen
    inner.config._attn_implementation = "eager"
    with torch.no_grad():
        attentions = inner(pixel_values=x, output_attentions=True).attentions
    inner.config._attn_implementation = chosen
    from actviz.gradients.rollout import rollout_matrix

    expected = rollout_matrix(list(attentions))[:, 0, 1:].reshape(1, 1, 4, 4)
    torch.testing.assert_close(found.values, expected.float(), rtol=1e-4, atol=1e-6)


def test_rollout_refuses_a_model_without_attention(resnet: nn.Module) -> None:
    with pytest.raises(UsageError, match="has no attention layer"):
        _run("rollout", resnet, torch.randn(1, 3, 32, 32), [0])


# Baselines and maps.
def test_baselines_blur_mean_and_a_wrong_sized_file(
    resnet: nn.Module, photo_batch: torch.Tensor, image_file: Path
) -> None:
    from torchvision.transforms.v2.functional import gaussian_blur

    mean = photo_batch.mean(dim=(-2, -1), keepdim=True).expand_as(photo_batch)
    blurred = gaussian_blur(photo_batch, [11, 11], [1.6, 1.6])  # 5% of 32 px, 3 sigma a side
    for baseline, start in (("mean", mean), ("blur", blurred)):
        found = _run("ig", resnet, photo_batch, [0, 1], steps=4, baseline=baseline)
        with torch.no_grad():
            expected = resnet(start)[[0, 1], [0, 1]].tolist()
        got = [a["baseline_score"] for a in found.axioms if a is not None]
        assert got == pytest.approx(expected, abs=1e-5)
    settings = AttributionSettings(baseline=str(image_file))
    job = AttributionJob(resnet, photo_batch, [0, 1], settings, 8, torch.zeros(3, 8, 8))
    with pytest.raises(UsageError, match=r"is \(3, 8, 8\) after preprocessing"):
        MAP_METHODS["ig"].compute(job)
    with pytest.raises(UsageError, match="baseline takes zero, blur, mean or an image file"):
        AttributionSettings(baseline="nowhere.png")


def test_signed_maps_keep_the_total_and_unsigned_ones_the_magnitude() -> None:
    values = torch.tensor([[[[1.0, -2.0]], [[3.0, 0.5]]]])  # (1, 2, 1, 2)
    torch.testing.assert_close(to_maps(values, True), torch.tensor([[[4.0, -1.5]]]))
    torch.testing.assert_close(to_maps(values, False), torch.tensor([[[3.0, 2.0]]]))


# The one table of map methods.
def test_every_map_method_is_one_row_looked_up_by_any_spelling() -> None:
    from actviz.gradients.registry import map_method, names
    from actviz.run.options import GradientOptions

    assert names("cam") == ("gradcam", "gradcam++", "layercam", "scorecam", "eigencam")
    assert names("attribution") == (
        "ig",
        "smoothgrad",
        "gradxinput",
        "lrp",
        "rollout",
        "grad-rollout",
    )
    assert map_method("Integrated_Gradients").name == "ig"
    assert map_method("Grad-Rollout", kind="attribution").name == "grad-rollout"
    assert [n for n in names() if MAP_METHODS[n].signed] == ["ig", "gradxinput", "lrp"]
    assert [n for n in names() if not MAP_METHODS[n].class_specific] == ["eigencam", "rollout"]
    with pytest.raises(UsageError, match="ig is drawn at the input: `actviz attribute --method"):
        map_method("IG", "--cam-method", kind="cam")
    with pytest.raises(UsageError, match="gradcam is a class activation map: `actviz run"):
        map_method("gradcam", "--method", kind="attribution")
    # run's options take the CAM rows, by any spelling, and refuse the others by name.
    assert GradientOptions(cam_method="Grad-CAM++").cam_method == "gradcam++"
    with pytest.raises(UsageError, match="cam_method takes one of gradcam, gradcam"):
        GradientOptions(cam_method="smoothgrad")
    with pytest.raises(UsageError, match="draws one class-agnostic map"):
        GradientOptions(cam_method="eigencam", cam_classes=2)
