"""The options of ``actviz atlas``: one frozen dataclass built once and checked when built, and
the parsing of ``--points`` and ``--color``. Imports no torch."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from actviz.command.options import ExecutionOptions, LoadOptions, check_choices, model_b_weights
from actviz.errors import UsageError

if TYPE_CHECKING:
    from torch import nn

__all__ = ["AtlasOptions", "Colour", "Points", "parse_colour", "parse_points"]

Reduce = Literal["umap", "pca"]
Icons = Literal["none", "fv"]

#: Dimensions PCA keeps before the layout (fewer when the layer or the points have fewer).
PCA_DIMS = 50


@dataclass(frozen=True)
class Points:
    """What one image gives: its pooled vector (``pooled``), or ``k`` vectors at positions of
    the layer's map drawn at random (``spatial``)."""

    kind: Literal["pooled", "spatial"]
    k: int = 1

    def __str__(self) -> str:
        return "pooled" if self.kind == "pooled" else f"spatial:{self.k}"


@dataclass(frozen=True)
class Colour:
    """How points are coloured: ``class`` (the image's folder), ``pred`` (the model's
    prediction), ``unit`` (the value of unit ``unit`` of each point's vector); None: class
    where the images sit in class folders, else the prediction, else one colour."""

    kind: Literal["class", "pred", "unit"]
    unit: int | None = None

    def __str__(self) -> str:
        return self.kind if self.unit is None else f"unit:{self.unit}"


def parse_points(text: str | Points) -> Points:
    """``pooled`` or ``spatial:K`` (K from 1 to 1024).

    Raises:
        UsageError: For anything else.
    """
    if isinstance(text, Points):
        return text
    given = str(text).strip().lower()
    if given == "pooled":
        return Points("pooled")
    kind, colon, count = given.partition(":")
    if kind == "spatial":
        try:
            k = int(count) if colon else 4
        except ValueError:
            k = 0
        if 1 <= k <= 1024:
            return Points("spatial", k)
    raise UsageError(
        f"--points takes pooled or spatial:K (K positions per image, 1 to 1024), not '{text}'"
    )


def parse_colour(text: str | Colour | None) -> Colour | None:
    """``class``, ``pred`` or ``unit:K``; None chooses from the folder and the model.

    Raises:
        UsageError: For anything else.
    """
    if text is None or isinstance(text, Colour):
        return text
    given = str(text).strip().lower()
    if given in ("class", "pred"):
        return Colour(given)  # type: ignore[arg-type]
    kind, colon, unit = given.partition(":")
    if kind == "unit" and colon and unit.isdigit():
        return Colour("unit", int(unit))
    raise UsageError(
        f"--color takes class (the image's folder), pred (the model's prediction) or unit:K "
        f"(unit K's value), not '{text}'"
    )


@dataclass(frozen=True)
class AtlasOptions:
    """Everything ``actviz atlas`` takes besides the model and the inputs.

    Attributes:
        layer: The layer whose vectors are mapped: a module name, or a selector that matches
            one output (``actviz list-layers MODEL`` lists them).
        points: ``pooled`` (one vector per image, the spatial mean) or ``spatial:K`` (K
            positions of the map per image, drawn with ``seed``).
        reduce: The 2-D layout after PCA: ``umap`` (the ``atlas`` extra) or ``pca`` (the first
            two principal components).
        seed: Seeds UMAP, the spatial positions and the feature-visualization icons: the same
            seed gives the same map.
        neighbors: UMAP's ``n_neighbors``.
        grid: Cells per side of the grid the layout is binned into.
        min_count: Cells with fewer points are dropped (still counted in ``atlas.json``).
        nearest: Real images (or patches) shown per cell: the points nearest its mean.
        colour: How points are coloured (:class:`Colour`); None chooses.
        icons: ``fv``: a feature visualization of each cell's mean, through ``optimize``.
        icon_steps: Optimization steps of each icon.
        icon_size: Side of each icon in pixels.
        against: A checkpoint: model B is MODEL with it, mapped onto the same layout.
        against_model: A second model (name, ``file.py:factory`` or an ``nn.Module``).
        against_weights: Weights of ``against_model`` (default: as ``load.weights``).
        against_layer: Model B's layer (default: ``layer``).
        ridge: Ridge penalty of the map from B's vectors onto A's, relative to the mean
            variance of B's vectors.
        out: Output folder: ``atlas.html``, ``atlas.png``, ``atlas.json``, ``points.parquet``.
        report: Write ``atlas.html``.
        load: How the model is built.
        execution: Batch size, decoding workers, amp, channels-last, resume and overwrite.
    """

    layer: str | None = None
    points: Points = field(default_factory=lambda: Points("pooled"))
    reduce: Reduce = "umap"
    seed: int = 0
    neighbors: int = 15
    grid: int = 20
    min_count: int = 3
    nearest: int = 3
    colour: Colour | None = None
    icons: Icons = "none"
    icon_steps: int = 128
    icon_size: int = 64
    against: Path | None = None
    against_model: str | nn.Module | None = None
    against_weights: str | None = None
    against_layer: str | None = None
    ridge: float = 1e-3
    out: Path = Path("actviz-atlas")
    report: bool = True
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", parse_points(self.points))
        object.__setattr__(self, "colour", parse_colour(self.colour))
        object.__setattr__(self, "out", Path(self.out))
        check_choices(self)
        if self.layer is None or not str(self.layer).strip():
            raise UsageError(
                "atlas maps one layer: give --layer NAME (actviz list-layers MODEL lists them)"
            )
        if not 2 <= self.grid <= 200:
            raise UsageError(f"--grid must be 2 to 200 cells a side, not {self.grid}")
        if self.min_count < 1 or not 1 <= self.nearest <= 16:
            raise UsageError("--min-count must be at least 1 and --nearest 1 to 16")
        if not 2 <= self.neighbors <= 200:
            raise UsageError(f"--neighbors must be 2 to 200, not {self.neighbors}")
        if self.icon_steps < 1 or not 16 <= self.icon_size <= 512:
            raise UsageError("--icon-steps must be at least 1 and --icon-size 16 to 512")
        if not (math.isfinite(self.ridge) and self.ridge > 0):
            raise UsageError(f"--ridge must be a number above 0, e.g. 0.001; got {self.ridge}")
        if self.against is not None and self.against_model is not None:
            raise UsageError(
                "--against names a checkpoint of MODEL and --against-model another model; "
                "give one (with --against-weights for the other model's weights)"
            )
        if self.against is not None:
            object.__setattr__(self, "against", Path(self.against))
            if not self.against.is_file():
                what = "is a folder" if self.against.is_dir() else "does not exist"
                raise UsageError(f"--against {self.against} {what}; give model B's checkpoint")
        if not self.compares and (self.against_weights or self.against_layer):
            raise UsageError(
                "--against-weights and --against-layer describe model B: give --against "
                "CHECKPOINT or --against-model NAME"
            )
        if self.execution.engine != "local":
            raise UsageError("atlas runs on the local engine; drop --engine ray")
        if self.reduce == "umap":
            _need_umap()

    @property
    def compares(self) -> bool:
        """Whether a second model (or checkpoint) is mapped onto the same layout."""
        return self.against is not None or self.against_model is not None

    @property
    def weights_b(self) -> str:
        """Model B's weights, as ``--weights`` takes them."""
        return model_b_weights(self.against, self.against_weights, self.load)

    def forward_settings(self) -> dict[str, Any]:
        """What the forward part depends on: a ``--resume`` reuses an earlier run's vectors
        only when these match (the layout, cells and pictures are made again each time)."""
        load = self.load
        return {
            "layer": self.layer,
            "points": str(self.points),
            "seed": self.seed if self.points.kind == "spatial" else None,
            "weights": load.weights,
            "input_size": list(load.input_size) if load.input_size else None,
            "in_chans": load.in_chans,
            "against": str(self.against) if self.against is not None else None,
            "against_model": self.against_model
            if isinstance(self.against_model, str) or self.against_model is None
            else type(self.against_model).__name__,
            "against_weights": self.against_weights,
            "against_layer": self.against_layer,
        }


def _need_umap() -> None:
    """``--reduce umap`` without umap-learn: the fix, in one line."""

    if importlib.util.find_spec("umap") is None:
        raise UsageError(
            "--reduce umap needs umap-learn: pip install 'actviz[atlas]' (or pass --reduce pca "
            "for the first two principal components)"
        )
