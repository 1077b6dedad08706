"""Grad-CAM++, LayerCAM, Score-CAM and EigenCAM against pytorch-grad-cam 1.5.7 on resnet18 and a
ViT with random (seeded) weights: the formulas on the same activations and gradients, and the
whole maps from the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from actviz.errors import UsageError
from actviz.gradients.cam import to_nchw
from actviz.gradients.core import compute_gradients
from actviz.gradients.methods import scale_cams, score_cam
from actviz.gradients.registry import cam_method, cam_title, raw_cam

gradcam = pytest.importorskip("pytorch_grad_cam")
targets_mod = pytest.importorskip("pytorch_grad_cam.utils.model_targets")

CLASSES = {
    "gradcam": "GradCAM",
    "gradcam++": "GradCAMPlusPlus",
    "layercam": "LayerCAM",
    "eigencam": "EigenCAM",
}


def _resnet() -> tuple[nn.Module, str, torch.Tensor, Callable[[Any], Any] | None, dict[str, Any]]:
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18(num_classes=10).eval()
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    return model, "layer3", x, None, {"layout": "nchw"}


def _vit() -> tuple[nn.Module, str, torch.Tensor, Callable[[Any], Any] | None, dict[str, Any]]:
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
    ).eval()
    torch.nn.init.normal_(model.heads.head.weight, std=0.5)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))

    def reshape(t: torch.Tensor) -> torch.Tensor:
        return to_nchw(t, "tokens")

    return model, "encoder.layers.encoder_layer_0", x, reshape, {"layout": "tokens"}


def _module(model: nn.Module, name: str) -> nn.Module:
    return dict(model.named_modules())[name]


def _their_layer_maps(cam: Any, x: torch.Tensor, targets: list[int]) -> np.ndarray:
    """pytorch-grad-cam's map at the layer's resolution: its get_cam_image on its own
    activations and gradients, before ReLU and resizing."""
    wanted = [targets_mod.ClassifierOutputTarget(t) for t in targets]
    cam(input_tensor=x, targets=wanted)
    acts = cam.activations_and_grads.activations[0].cpu().numpy()
    grads = cam.activations_and_grads.gradients[0].cpu().numpy() if cam.uses_gradients else None
    return cam.get_cam_image(x, None, wanted, acts, grads, False)  # type: ignore[no-any-return]


@pytest.mark.parametrize("source", [_resnet, _vit], ids=["resnet18", "vit"])
@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "layercam", "eigencam"])
def test_gradient_methods_equal_pytorch_grad_cam(source: Callable[..., Any], method: str) -> None:
    model, layer, x, reshape, layout = source()
    result = compute_gradients(model, x, [layer])
    capture = result.captures[layer]
    ours = raw_cam(method, capture.activation, capture.gradient, **layout).numpy()
    with getattr(gradcam, CLASSES[method])(model, [_module(model, layer)], reshape) as cam:
        theirs = _their_layer_maps(cam, x, list(result.targets))
    assert ours.shape == theirs.shape
    scale = float(np.abs(theirs).max())
    assert scale > 0
    if method == "eigencam":  # the SVD's sign is arbitrary in theirs, fixed in ours
        pairs = zip(ours, theirs, strict=True)
        theirs = np.stack([t if np.dot(o.ravel(), t.ravel()) >= 0 else -t for o, t in pairs])
    np.testing.assert_allclose(ours, theirs, atol=1e-5 * scale, rtol=1e-4)
    scaled = scale_cams(torch.from_numpy(ours)).numpy()
    relu = np.maximum(theirs, 0)
    peak = relu.max(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(scaled, relu / np.where(peak > 0, peak, 1), atol=1e-4)


@pytest.mark.parametrize("source", [_resnet, _vit], ids=["resnet18", "vit"])
def test_score_cam_equals_pytorch_grad_cam(source: Callable[..., Any]) -> None:
    model, layer, x, reshape, layout = source()
    if source is _resnet:
        x = x[:1, :, :32, :32]  # 256 channels of layer3 on a 2x2 grid: 256 masked forwards
    result = compute_gradients(model, x, [layer])
    capture = result.captures[layer]
    targets = list(result.targets)
    ours = score_cam(model, x, capture.activation, targets, batch_size=40, **layout).numpy()
    with gradcam.ScoreCAM(model, [_module(model, layer)], reshape) as cam:
        cam.batch_size = 64
        theirs = _their_layer_maps(cam, x, targets)
    scale = float(np.abs(theirs).max())
    # Theirs collects the scores in float32; ours softmaxes them in float64.
    np.testing.assert_allclose(ours, theirs, atol=1e-5 * scale, rtol=1e-4)


def test_whole_maps_equal_pytorch_grad_cam_after_their_resize() -> None:
    import cv2

    model, layer, x, _, _ = _resnet()
    result = compute_gradients(model, x, [layer])
    capture = result.captures[layer]
    ours = scale_cams(raw_cam("gradcam++", capture.activation, capture.gradient)).numpy()
    wanted = [targets_mod.ClassifierOutputTarget(t) for t in result.targets]
    with gradcam.GradCAMPlusPlus(model, [_module(model, layer)]) as cam:
        theirs = cam(input_tensor=x, targets=wanted)
    for mine, ref in zip(ours, theirs, strict=True):
        up = cv2.resize(mine, (64, 64))
        up = (up - up.min()) / (1e-7 + up.max() - up.min())
        # Ours is the ReLU'd map over its peak: their min-max scaling of it is theirs.
        np.testing.assert_allclose(up, ref, atol=1e-4)


def test_method_names_forgive_spelling_and_refuse_unknown_ones() -> None:
    assert cam_method("Grad-CAM++") == "gradcam++"
    assert cam_method("score_cam") == "scorecam"
    assert cam_title("layercam") == "LayerCAM"
    with pytest.raises(UsageError, match="cam_method takes one of gradcam, gradcam"):
        cam_method("smoothgrad")
    with pytest.raises(ValueError, match="needs the gradient"):
        raw_cam("layercam", torch.ones(1, 2, 3, 3))


def test_scaled_maps_are_in_unit_range_and_blank_maps_stay_zero() -> None:
    raw = torch.tensor([[[-1.0, 2.0], [4.0, 0.0]], [[-1.0, -2.0], [-3.0, -4.0]]])
    scaled = scale_cams(raw)
    torch.testing.assert_close(scaled[0], torch.tensor([[0.0, 0.5], [1.0, 0.0]]))
    assert float(scaled[1].abs().max()) == 0.0 and not scaled.isnan().any()
