"""The table of model families: every torchvision name has one, list-layers takes every name,
and a model is fed and read as its family says."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision import models

from actviz.errors import UsageError
from actviz.models import list_layers
from actviz.models.families import (
    CLASSIFICATION,
    DETECTION,
    FAMILIES,
    QUANTIZED,
    SEGMENTATION,
    family_named,
    family_of,
    torchvision_family,
)
from actviz.models.sources.torchvision import TorchvisionSource

EVERY_NAME = models.list_models()


def test_every_torchvision_name_has_one_family() -> None:
    assert len(EVERY_NAME) == 121
    counts: dict[str, int] = {}
    for name in EVERY_NAME:
        family = torchvision_family(name)
        assert family is not None, name
        counts[family.key] = counts.get(family.key, 0) + 1
    assert counts == {
        "classification": 80,
        "segmentation": 6,
        "detection": 12,
        "video": 9,
        "optical_flow": 2,
        "quantized": 12,
    }
    assert torchvision_family("no_such_model") is None
    assert {f.key for f in FAMILIES} == set(counts)


def test_families_by_name_and_what_they_refuse() -> None:
    assert family_named("detection") is DETECTION
    assert family_named("optical-flow").key == "optical_flow"
    with pytest.raises(UsageError, match="unknown model family .boxes.; use one of "):
        family_named("boxes")
    assert DETECTION.refusal("optimize") is not None and DETECTION.refusal("run") is None
    assert QUANTIZED.gradients is not None and QUANTIZED.cpu_only is not None
    assert CLASSIFICATION.refusal("list-layers") is None
    fixes = ("use ", "pass ", "leave ", "optimize ", "run ", "--cam draws")
    for family in FAMILIES:  # every refusal is one line and names what to do instead
        for why in (family.refused, family.gradients, family.cpu_only, *family.commands.values()):
            assert why is None or ("\n" not in why and any(f in why for f in fixes)), why


def test_a_users_own_module_is_claimed_by_its_family() -> None:
    assert family_of(nn.Sequential(nn.Conv2d(3, 4, 3))) is CLASSIFICATION
    with torch.device("meta"):
        detector = models.get_model(
            "fasterrcnn_mobilenet_v3_large_320_fpn", weights=None, weights_backbone=None
        )
        segmenter = models.get_model(
            "lraspp_mobilenet_v3_large", weights=None, weights_backbone=None
        )

    class MyDetector(type(detector)):  # type: ignore[misc]
        pass

    assert family_of(detector) is DETECTION and family_of(segmenter) is SEGMENTATION
    detector.__class__ = MyDetector
    assert family_of(detector) is DETECTION


@pytest.mark.slow  # 121 models on the meta device: about 20 s in all
@pytest.mark.parametrize("name", EVERY_NAME)
def test_list_layers_takes_every_torchvision_name(name: str) -> None:
    family = torchvision_family(name)
    assert family is not None
    if family.meta is not None:
        # Built and calibrated on the CPU, seconds each: what list-layers says instead of
        # tracing on the meta device (tests/test_quantized.py lists one for real).
        build = TorchvisionSource().build_meta(name, None)
        assert build.module is None and build.on_cpu is not None
        assert "CPU" in family.meta
        return
    listing = list_layers(name)
    assert listing.family == family.key
    shaped = [row for row in listing.layers if row.shape is not None]
    assert shaped and shaped[0].calls >= 1
    if family is DETECTION:
        # The backbone's maps are at the model's own input size; what follows the box
        # selection is listed without shapes, and the note says why.
        assert listing.note is not None and "meta device" in listing.note
        assert listing.input_shape[2] in (300, 320, 800)
        assert any(row.name.startswith("backbone") and row.shape for row in listing.layers)
    else:
        assert len(shaped) >= len(listing.layers) * 0.8
    # The input as the model takes it: a clip of frames, a pair of pictures, or an image.
    along = {"video": 5, "optical_flow": 5}.get(family.key, 4)
    assert len(listing.input_shape) == along
    if family.key == "optical_flow":
        assert listing.input_shape[2] == 2
    elif family.key == "video":
        assert listing.input_shape[2] >= 8


def test_every_family_has_a_run_row_whose_options_and_pictures_are_run_s() -> None:
    import dataclasses

    from actviz.run import RunOptions
    from actviz.run.families import IMAGE_KINDS, RUN_FAMILIES, run_family

    assert [run_family(family).family for family in FAMILIES] == list(FAMILIES)
    assert sorted(row.family.key for row in RUN_FAMILIES) == sorted(f.key for f in FAMILIES)
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    taken = [option.name for row in RUN_FAMILIES for option in row.options]
    assert sorted(taken) == ["detection", "flow_updates", "frames", "score_threshold"]
    assert set(taken) <= fields
    names = [kind.name for kind in IMAGE_KINDS]
    assert names[0] == "input" and len(names) == len(set(names))
    assert set(names) == {
        "input",
        "segmentation",
        "optical_flow",
        "detections",
        "detection_heads",
        "detection_cam",
    }
    # Only a detector draws maps of its own with --cam; only image models take images.
    assert [row.family.key for row in RUN_FAMILIES if row.own_cam] == ["detection"]
    assert {f.key for f in FAMILIES if not f.inputs.images} == {"video", "optical_flow"}
