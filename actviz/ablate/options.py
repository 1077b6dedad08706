"""The options of ``actviz ablate``, as one frozen dataclass checked when built."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actviz.ablate.modes import Mode, parse_mode
from actviz.ablate.targets import parse_indices
from actviz.command.options import ExecutionOptions, LoadOptions
from actviz.errors import UsageError

__all__ = ["FAIL_METRICS", "AblateOptions", "FailOn", "parse_fail_on"]

#: What ``--fail-on`` compares, per class and ablation: name -> (what it is, how it is read
#: off a row of the per-class table).
FAIL_METRICS: dict[str, str] = {
    "dacc": "accuracy after minus before",
    "dbalanced": "balanced accuracy after minus before",
    "dlogit": "mean change of the class's logit",
    "acc": "accuracy after",
}


@dataclass(frozen=True)
class FailOn:
    """``--fail-on METRIC<VALUE`` (or ``>``): a class of an ablation whose metric crosses
    the value makes the command exit 4."""

    metric: str
    op: str
    value: float

    @property
    def spec(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    def crossed(self, row: dict[str, Any]) -> float | None:
        """The row's value when it crosses, else None."""
        value = _metric(row, self.metric)
        if value is None:
            return None
        return value if (value < self.value if self.op == "<" else value > self.value) else None


def _metric(row: dict[str, Any], metric: str) -> float | None:
    pairs = {"dacc": "acc", "dbalanced": "balanced_acc"}
    if metric in pairs:
        before, after = row.get(f"{pairs[metric]}_before"), row.get(f"{pairs[metric]}_after")
        return None if before is None or after is None else float(after - before)
    value = row.get("acc_after" if metric == "acc" else metric)
    return None if value is None else float(value)


def parse_fail_on(text: str) -> FailOn:
    """``dacc<-0.2``: a metric of :data:`FAIL_METRICS`, ``<`` or ``>``, a number.

    Raises:
        UsageError: For anything else.
    """
    found = re.fullmatch(r"\s*([a-z_]+)\s*([<>])\s*([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)\s*", text)
    if found is None or found.group(1) not in FAIL_METRICS:
        names = ", ".join(FAIL_METRICS)
        raise UsageError(
            f"--fail-on takes METRIC<VALUE or METRIC>VALUE with a metric of {names}, e.g. "
            f"'dacc<-0.2' (a class losing more than 20 points); got '{text}'"
        )
    try:
        value = float(found.group(3))
    except ValueError:
        raise UsageError(f"--fail-on '{text}': '{found.group(3)}' is not a number") from None
    return FailOn(found.group(1), found.group(2), value)


@dataclass(frozen=True)
class AblateOptions:
    """Everything ``actviz ablate`` takes besides the model and the folder.

    Attributes:
        layer: The one module whose output is edited (a name, or a selector matching one).
        units: Channels to remove: ``17,42`` or ranges ``0-63``.
        sae: A dictionary ``actviz sae`` trained on this layer (``--features`` its features).
        features: The dictionary's features to remove: ``5,9`` or ranges.
        direction: A ``.npy`` (or ``.safetensors``) vector of the layer's channel length.
        each: Remove every listed unit (or feature) on its own, one result each, ranked
            per class, with the importance curves.
        mode: ``zero``, ``mean``, ``resample``, ``scale:A`` or ``steer:A``.
        labels: None (class subfolders if every image is in one, else agreement), ``folders``,
            ``none`` (agreement with the model's own predictions) or a CSV of image,label.
        rank_share: With ``each``: the share of each class's images that rank the units;
            the curves are measured on the rest.
        seed: Seed of resample's donors and of the ranking split.
        cases: The most affected images drawn with their CAM before and after (0: none).
        shortcut: Use the linear-readout identity where the layer reaches a linear
            classifier through global pooling (False: every ablation through the rest).
        fail_on: Exit 4 when a class crosses this (``dacc<-0.2``).
        out: Output folder.
        report: Write ``ablate.html`` and the pictures.
        load: How the model is built.
        execution: Batch size, decoding workers, resume and overwrite.
    """

    layer: str | None = None
    units: str | None = None
    sae: Path | None = None
    features: str | None = None
    direction: Path | None = None
    each: bool = False
    mode: str = "zero"
    labels: str | None = None
    rank_share: float = 0.5
    seed: int = 0
    cases: int = 6
    shortcut: bool = True
    fail_on: str | None = None
    out: Path = Path("actviz-ablate")
    report: bool = True
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        if not self.layer:
            raise UsageError("ablate needs --layer: the module whose output is edited")
        given = [
            n
            for n, v in (
                ("--units", self.units),
                ("--sae", self.sae),
                ("--direction", self.direction),
            )
            if v is not None
        ]
        if len(given) != 1:
            both = f" (not {' and '.join(given)})" if given else ""
            raise UsageError(
                "say what to remove with one of --units 17,42, --sae FILE --features 5,9 "
                f"or --direction FILE.npy{both}"
            )
        if (self.sae is None) != (self.features is None):
            raise UsageError(
                "--sae and --features go together: the dictionary and which of its features"
            )
        if self.direction is not None and self.each:
            raise UsageError(
                "--each removes listed units or features one at a time; a direction is one: "
                "drop --each"
            )
        if self.units is not None:
            parse_indices(self.units, "--units")
        if self.features is not None:
            parse_indices(self.features, "--features")
        self.parsed_mode()
        if not 0.0 < self.rank_share < 1.0:
            raise UsageError(f"--rank-share must be between 0 and 1, not {self.rank_share}")
        if self.cases < 0:
            raise UsageError("--cases must be at least 0")
        if self.fail_on is not None:
            parse_fail_on(self.fail_on)
        if self.execution.engine != "local" or self.execution.amp:
            raise UsageError("ablate runs on the local engine in float32; drop --engine and --amp")

    def parsed_mode(self) -> Mode:
        return parse_mode(self.mode)

    def indices(self) -> list[int]:
        """The units or features named."""
        text = self.units if self.units is not None else self.features
        option = "--units" if self.units is not None else "--features"
        return parse_indices(text or "", option)
