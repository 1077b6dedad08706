"""EigenCAM: the first-component projection against pytorch-grad-cam's, with a fixed sign."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actviz.gradients.cam import to_nchw
from actviz.gradients.eigen import eigen_cam, first_component_projection

svd = pytest.importorskip("pytorch_grad_cam.utils.svd_on_activations")


def _resnet18_layer4(batch: int = 2) -> torch.Tensor:
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18().eval()
    seen: list[torch.Tensor] = []
    handle = model.layer4.register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
    try:
        with torch.inference_mode():
            model(torch.rand(batch, 3, 128, 128, generator=torch.Generator().manual_seed(1)))
    finally:
        handle.remove()
    return seen[0]


def _vit_tokens(batch: int = 2) -> torch.Tensor:
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32
    ).eval()
    seen: list[torch.Tensor] = []
    block = model.encoder.layers.encoder_layer_0
    handle = block.register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
    try:
        with torch.inference_mode():
            model(torch.rand(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1)))
    finally:
        handle.remove()
    return to_nchw(seen[0], "tokens")


@pytest.mark.parametrize("source", [_resnet18_layer4, _vit_tokens])
def test_projection_equals_get_2d_projection_up_to_sign(source: object) -> None:
    acts = source()  # type: ignore[operator]
    ours = first_component_projection(acts).numpy()
    theirs = svd.get_2d_projection(acts.numpy())
    assert ours.shape == theirs.shape == (acts.shape[0], *acts.shape[2:])
    for mine, ref in zip(ours, theirs, strict=True):
        sign = 1.0 if np.dot(mine.ravel(), ref.ravel()) >= 0 else -1.0
        scale = np.abs(ref).max()
        np.testing.assert_allclose(mine, sign * ref, atol=2e-5 * scale, rtol=0)
    # With the Seg-Eigen-CAM sign rule the two agree exactly, not only up to sign.
    fixed = svd.get_2d_projection_with_sign_correction(acts.numpy())
    np.testing.assert_allclose(ours, fixed, atol=2e-5 * np.abs(fixed).max(), rtol=0)


def test_sign_does_not_depend_on_the_svd_backend_or_channel_order() -> None:
    gen = torch.Generator().manual_seed(3)
    acts = torch.rand(4, 6, 5, 7, generator=gen) ** 3
    base = first_component_projection(acts)
    # Reordering channels changes the SVD's internal arithmetic, not the component's direction.
    shuffled = first_component_projection(acts[:, torch.randperm(6, generator=gen)])
    torch.testing.assert_close(base, shuffled, atol=1e-5, rtol=1e-5)
    for p in base:
        assert p.max() >= -p.min()  # the strongest response is positive
    torch.testing.assert_close(first_component_projection(acts.numpy()), base)


def test_a_tie_keeps_the_component_with_a_positive_first_loading() -> None:
    # Two positions, one channel: the centred projection is (-d, +d), a tie in magnitude.
    up = first_component_projection(torch.tensor([[[[0.0, 1.0]]]]))
    down = first_component_projection(torch.tensor([[[[1.0, 0.0]]]]))
    torch.testing.assert_close(up, torch.tensor([[[-0.5, 0.5]]]))
    torch.testing.assert_close(down, torch.tensor([[[0.5, -0.5]]]))


def test_eigen_cam_is_the_relu_of_the_projection_over_its_peak() -> None:
    acts = _resnet18_layer4()
    cams = eigen_cam(acts)
    projection = first_component_projection(acts)
    assert cams.shape == (2, 4, 4) and cams.dtype == torch.float32
    expected = projection.clamp(min=0) / projection.amax(dim=(1, 2), keepdim=True)
    torch.testing.assert_close(cams, expected)
    assert float(cams.amin()) == 0.0 and torch.allclose(cams.amax(dim=(1, 2)), torch.ones(2))
    # Unbatched, NaN as zero, and a constant map is all zero rather than NaN.
    torch.testing.assert_close(eigen_cam(acts[0]), cams[0])
    holed = acts.clone()
    holed[0, 0, 0, 0] = float("nan")
    zeroed = acts.clone()
    zeroed[0, 0, 0, 0] = 0.0
    torch.testing.assert_close(eigen_cam(holed), eigen_cam(zeroed))
    flat = eigen_cam(torch.ones(1, 3, 4, 4))
    assert not flat.isnan().any() and float(flat.abs().max()) == 0.0


def test_eigen_cam_equals_pytorch_grad_cam_eigencam_with_the_same_sign() -> None:
    import cv2
    from pytorch_grad_cam import EigenCAM
    from torchvision.models import resnet18

    class SignedEigenCAM(EigenCAM):  # type: ignore[misc]
        def get_cam_image(self, *args: object, **kwargs: object) -> np.ndarray:
            activations = args[3] if len(args) > 3 else kwargs["activations"]
            return svd.get_2d_projection_with_sign_correction(activations)  # type: ignore[no-any-return]

    torch.manual_seed(0)
    model = resnet18().eval()
    x = torch.rand(2, 3, 128, 128, generator=torch.Generator().manual_seed(1))
    seen: list[torch.Tensor] = []
    handle = model.layer4.register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
    try:
        with torch.inference_mode():
            model(x)
    finally:
        handle.remove()
    with SignedEigenCAM(model, [model.layer4]) as ref:
        theirs = ref(input_tensor=x, targets=None)
    ours = eigen_cam(seen[0]).numpy()
    # pytorch-grad-cam resizes to the input with OpenCV and min-max scales (min is 0 after ReLU).
    resized = np.stack([cv2.resize(m, (128, 128)) for m in ours])
    resized = (resized - resized.min(axis=(1, 2), keepdims=True)) / (
        1e-7 + resized.max(axis=(1, 2), keepdims=True) - resized.min(axis=(1, 2), keepdims=True)
    )
    np.testing.assert_allclose(resized, theirs, atol=1e-4)
