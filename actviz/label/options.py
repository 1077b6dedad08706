"""The options of ``actviz label``, as one frozen dataclass built once and checked when built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actviz.command.options import ExecutionOptions, LoadOptions, check_choices
from actviz.errors import UsageError
from actviz.label.metrics import metric

__all__ = ["MIN_PERMUTATIONS", "LabelOptions", "Score"]

Score = Literal["max", "mean"]
#: The fewest permutations: the smallest p-value is one over this plus one.
MIN_PERMUTATIONS = 1000


@dataclass(frozen=True)
class LabelOptions:
    """Everything ``actviz label`` takes besides the model and the folder.

    Attributes:
        layers: Selector of the layers whose units are labelled; None: the deepest layer of
            the architecture's default selection (with ``sae``, the dictionary's layer).
        tags: A CSV of ``image,tag`` rows: each tag a concept.
        classes: The folder's subfolders as concepts.
        masks: A folder of pixel masks, ``MASKS/<concept>/<image path>.png``: scored by IoU.
        clip: A local open_clip checkpoint, ``ARCH@FILE``: CLIP tags every image with its
            nearest ``words``.
        words: The word list for ``clip``, one concept a line.
        clip_top: Words CLIP tags each image with.
        sae: A sparse dictionary (``actviz sae``): its features are labelled instead of the
            layer's channels.
        metric: The metric that ranks labels and is tested: ``auprc`` (default), ``f1``,
            ``pearson`` or ``auc`` (which fails the sanity checks; said when chosen).
        score: A unit's score on an image: the ``max`` or ``mean`` of its map.
        fire: The share of images a unit fires on, for F1 (its top ``fire`` by score).
        quantile: With ``masks``: a unit marks the pixels where its map is in its top
            ``quantile`` of values over the whole folder (Network Dissection's 0.005).
        min_iou: With ``masks``: the IoU a label needs beside its significance.
        permutations: Permutations of the labels for each test (at least 1,000).
        max_permutations: The most a test may get, where Benjamini-Hochberg needs smaller
            p-values than the first round can give (0: ``2 tests / alpha``, enough for one
            discovery; see :mod:`actviz.label.significance`).
        alpha: The false-discovery rate the labels are held to (Benjamini-Hochberg over every
            unit and concept of a layer).
        min_positives: The fewest positive (and negative) images a concept needs to be tested.
        top: Labels shown per unit, at most.
        seed: Seed of the permutations and of the probes' folds.
        learnability: Fit the linear probes (layer vs pixels) of every concept.
        top_images: A folder ``actviz top-images`` wrote for the same model and layer: each
            unit's label links to its contact sheet there.
        out: Output folder: ``labels.json``, ``label.html``, ``label/``.
        report: Write the pages and the charts.
        load: How the model is built.
        execution: Batch size, decoding workers, resume and overwrite.
    """

    layers: str | None = None
    tags: Path | None = None
    classes: bool = False
    masks: Path | None = None
    clip: str | None = None
    words: Path | None = None
    clip_top: int = 3
    sae: Path | None = None
    metric: str = "auprc"
    score: Score = "max"
    fire: float = 0.1
    quantile: float = 0.005
    min_iou: float = 0.04
    permutations: int = MIN_PERMUTATIONS
    max_permutations: int = 0
    alpha: float = 0.05
    min_positives: int = 5
    top: int = 3
    seed: int = 0
    learnability: bool = True
    top_images: Path | None = None
    out: Path = Path("actviz-label")
    report: bool = True
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:

        for name in ("tags", "masks", "words", "sae", "top_images", "out"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value))
        object.__setattr__(self, "metric", metric(self.metric).name)
        check_choices(self)
        sources = [
            flag
            for flag, given in (
                ("--tags", self.tags is not None),
                ("--classes", self.classes),
                ("--masks", self.masks is not None),
                ("--clip", self.clip is not None),
            )
            if given
        ]
        if not sources:
            raise UsageError(
                "label needs concepts: --tags FILE.csv, --classes (the folder's subfolders), "
                "--masks DIR or --clip ARCH@FILE with --words FILE"
            )
        if len(sources) > 1:
            raise UsageError(f"give one source of concepts, not {' and '.join(sources)}")
        if (self.clip is None) != (self.words is None):
            raise UsageError("--clip and --words go together: CLIP tags images with the words")
        if self.permutations < MIN_PERMUTATIONS:
            raise UsageError(
                f"--permutations must be at least {MIN_PERMUTATIONS} (the smallest p-value is "
                f"one over it plus one), not {self.permutations}"
            )
        if self.max_permutations and self.max_permutations < self.permutations:
            raise UsageError(
                f"--max-permutations must be 0 (enough for one discovery) or at least "
                f"--permutations {self.permutations}, not {self.max_permutations}"
            )
        _within("--fire", self.fire, 0.0, 1.0)
        _within("--quantile", self.quantile, 0.0, 0.5)
        _within("--alpha", self.alpha, 0.0, 1.0)
        if not 0.0 <= self.min_iou <= 1.0:
            raise UsageError(f"--min-iou must be between 0 and 1, not {self.min_iou}")
        if self.min_positives < 2 or self.top < 1 or self.clip_top < 1:
            raise UsageError("--min-positives must be at least 2, --top and --clip-top at least 1")
        if self.execution.engine != "local":
            raise UsageError("label runs on the local engine; drop --engine ray")

    def settings(self) -> dict[str, Any]:
        """What a resumed run must share with the earlier one (besides model and layers)."""
        return {
            "tags": str(self.tags) if self.tags else None,
            "classes": self.classes,
            "masks": str(self.masks) if self.masks else None,
            "clip": self.clip,
            "words": str(self.words) if self.words else None,
            "clip_top": self.clip_top,
            "sae": str(self.sae) if self.sae else None,
            "score": self.score,
            "quantile": self.quantile,
        }


def _within(flag: str, value: float, low: float, high: float) -> None:
    if not low < value < high:
        raise UsageError(f"{flag} must be between {low:g} and {high:g} (exclusive), not {value}")
