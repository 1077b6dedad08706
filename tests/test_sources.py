"""The model-source table: every entry point dispatches through it, and a new row is enough."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actviz.errors import UnknownModelError, UsageError
from actviz.models import load_model, sources
from actviz.models.listing import list_layers
from actviz.models.preprocessing import Preprocessing
from actviz.models.registry import check_model_name, list_models
from actviz.models.sources import Built, MetaBuild, ModelEntry, source_for
from actviz.models.weights import WeightsInfo


class _Toy:
    """A source of one tiny model, ``toy:net``, as a new source module would define it."""

    key = "toy"

    def claims(self, model: str) -> bool:
        return model.startswith("toy:")

    def list_models(self, pattern: str | None, *, include_all: bool) -> list[ModelEntry]:
        return [
            ModelEntry(n, "classification", True) for n in sources.matching(["toy:net"], pattern)
        ]

    def check_name(self, model: str) -> None:
        if model != "toy:net":
            raise UnknownModelError(f"unknown toy model '{model}'")

    def _net(self) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
        )

    def load(
        self,
        model: str,
        weights: str,
        *,
        trust_checkpoint: bool,
        input_size: tuple[int, int] | None,
    ) -> Built:
        self.check_name(model)
        return Built(self._net(), WeightsInfo(spec=weights, source="random"), preset=("a", "b"))

    def build_meta(self, model: str, input_size: tuple[int, int] | None) -> MetaBuild:
        with torch.device("meta"):
            return MetaBuild(self._net())

    def preprocessing(
        self, model: str, preset: object, *, input_size: tuple[int, int] | None, in_chans: int
    ) -> Preprocessing:
        return Preprocessing.fitted(resize=40, crop=32, input_size=input_size, in_chans=in_chans)

    def class_names(self, module: nn.Module, preset: object) -> list[str] | None:
        return list(preset) if isinstance(preset, tuple) else None

    def versions(self) -> dict[str, str]:
        return {"toy": "1.0"}


@pytest.fixture
def toy_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "SOURCES", (_Toy(), *sources.SOURCES))


def test_names_go_to_the_source_that_claims_them() -> None:
    assert source_for("resnet18").key == "torchvision"
    assert source_for("nets/tiny.py:build").key == "factory"
    assert source_for("pkg.models:build").key == "factory"
    assert source_for("timm/convnext_tiny.fb_in1k").key == "timm"
    assert source_for("hf:google/vit-base-patch16-224").key == "hf"


def test_one_row_makes_a_source_loadable_listable_and_checked(toy_row: None) -> None:
    loaded = load_model("toy:net", device="cpu")
    assert loaded.source == "toy" and loaded.versions == {"toy": "1.0"}
    assert loaded.categories == ["a", "b"]
    assert loaded.input_size == (32, 32) and loaded.preprocess.resize_size == 40
    assert not loaded.module.training

    listing = list_layers("toy:net", layers="0")
    assert listing.input_shape == (1, 3, 32, 32)
    shapes = {row.name: row.shape for row in listing.layers}
    assert shapes["0"] == (1, 4, 30, 30) and shapes["3"] == (1, 2)
    assert [row.name for row in listing.layers if row.selected] == ["0"]

    assert [e.name for e in list_models(source="toy")] == ["toy:net"]
    with pytest.raises(UnknownModelError, match="unknown toy model"):
        check_model_name("toy:other")


def test_an_unknown_source_names_the_known_ones() -> None:
    with pytest.raises(UsageError, match="use one of hf, timm, factory, torchvision"):
        list_models(source="nope")
