"""Anomaly flags (NaN, Inf, dead channels, constant output, exploding or vanishing magnitude)
drawn from a depth-ordered list of layer summaries, and read back from ``stats.json``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actviz.errors import UsageError

if TYPE_CHECKING:
    from actviz.statistics.layerstats import LayerStats

__all__ = [
    "FLAG_KINDS",
    "Flag",
    "Thresholds",
    "find_flags",
    "first_bad_layer",
    "flag_anomalies",
    "flag_counts",
    "judges_dead",
    "parse_kinds",
]

FLAG_KINDS: tuple[str, ...] = ("nan", "inf", "dead", "constant", "exploding", "vanishing")
"""Every kind of flag :func:`flag_anomalies` can raise, in the order it checks them."""


def judges_dead(per_channel: int) -> bool:
    """Whether "never above zero" makes a channel dead: only where each channel has more
    than one value per image (a map of a unit that is meant to fire somewhere). A vector's
    one value per channel (logits, pooled features) is a score whose sign says nothing of
    its health: a negative logit is not a dead unit."""
    return per_channel > 1


@dataclass(frozen=True)
class Thresholds:
    """When :func:`flag_anomalies` raises each kind of flag.

    - ``nan``: the layer holds at least one NaN.
    - ``inf``: the layer holds at least one +Inf or -Inf.
    - ``dead``: at least ``dead_frac`` of the channels (default half) are never above 0.
      Vectors with one value per channel (logits, pooled features) are not judged: a negative
      logit is not a dead unit; nor are layers without finite values, flagged nan/inf.
    - ``constant``: every finite value is the same, within ``constant_rtol`` of the largest
      magnitude (default 1e-6, float32 rounding). Not raised when every channel is already
      flagged dead, which says more.
    - ``exploding``: the layer's RMS is more than ``explode_ratio`` (default 10) times the
      RMS of the nearest earlier layer with a usable magnitude.
    - ``vanishing``: the RMS is less than ``vanish_ratio`` (default 0.1) times that.

    The layers in ``readouts`` (module names: a detector's objectness logits and box
    offsets) give scores, not a signal the next layer carries on: a negative logit is not a
    dead unit, and a score's scale is not a shrinking signal. They are flagged for NaN, Inf
    and a constant output only, and are not the reference of the next layer's magnitude.

    RMS rather than std is compared because a layer whose values all shifted far from 0 has
    grown even if its spread has not. Magnitudes at or below ``min_magnitude`` (or NaN) are
    not compared and are not used as the reference for the next layer: an all-zero layer is
    reported as dead or constant instead, and does not make its successor look exploding.
    """

    dead_frac: float = 0.5
    constant_rtol: float = 1e-6
    explode_ratio: float = 10.0
    vanish_ratio: float = 0.1
    min_magnitude: float = 1e-12
    readouts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Flag:
    """One anomaly of one layer.

    ``severity`` ranks flags of one kind against each other (larger is worse): the share of
    NaN or Inf values, the dead fraction, 1 for constant, the RMS ratio for exploding and its
    inverse for vanishing. It is derived from the numbers the message already states, so it
    takes no part in equality and is left out of :meth:`to_dict`.
    """

    layer: str
    kind: str
    message: str
    severity: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict[str, str]:
        """``{"layer", "kind", "message"}``."""
        return {"layer": self.layer, "kind": self.kind, "message": self.message}


def flag_anomalies(
    layers: Sequence[tuple[str, LayerStats]], thresholds: Thresholds = Thresholds()
) -> list[Flag]:
    """Flag the anomalous layers of one image (or of a run's aggregate).

    Args:
        layers: ``(name, stats)`` in depth order, as the layers were captured.
        thresholds: When to flag; see :class:`Thresholds`.

    Returns:
        Flags in layer order; for one layer, in the order of :data:`FLAG_KINDS`.
    """
    t = thresholds
    flags: list[Flag] = []
    reference: tuple[str, float] | None = None
    for name, s in layers:
        readout = _module(name) in t.readouts
        if s.nan:
            message = f"{s.nan} NaN values ({_share(s.nan, s.count)})"
            flags.append(Flag(name, "nan", message, _fraction(s.nan, s.count)))
        if s.inf:
            message = f"{s.inf} infinite values ({_share(s.inf, s.count)})"
            flags.append(Flag(name, "inf", message, _fraction(s.inf, s.count)))
        # Without finite values every channel is "never positive"; the nan/inf flag says more.
        judged_dead = not readout and judges_dead(s.per_channel) and s.channels > 0 and s.finite > 0
        if judged_dead and s.dead_frac >= t.dead_frac:
            flags.append(
                Flag(
                    name,
                    "dead",
                    f"{s.dead_channels} of {s.channels} channels never positive "
                    f"({s.dead_frac:.0%})",
                    s.dead_frac,
                )
            )
        all_dead = judged_dead and s.dead_channels == s.channels
        if s.finite > 1 and not all_dead and _constant(s, t.constant_rtol):
            flags.append(Flag(name, "constant", f"every value is {s.min:.4g}", 1.0))
        magnitude = s.rms
        if readout or not (math.isfinite(magnitude) and magnitude > t.min_magnitude):
            continue
        if reference is not None:
            previous, before = reference
            ratio = magnitude / before
            if ratio > t.explode_ratio:
                flags.append(
                    Flag(
                        name,
                        "exploding",
                        f"RMS {magnitude:.3g} is {ratio:.3g}x that of {previous} ({before:.3g})",
                        ratio,
                    )
                )
            elif ratio < t.vanish_ratio:
                flags.append(
                    Flag(
                        name,
                        "vanishing",
                        f"RMS {magnitude:.3g} is {ratio:.3g}x that of {previous} ({before:.3g})",
                        1.0 / ratio,
                    )
                )
        reference = (name, magnitude)
    return flags


def _module(key: str) -> str:
    """The module of a capture key: ``rpn.head.cls_logits:2`` and ``backbone.fpn[pool]``
    are outputs of ``rpn.head.cls_logits`` and ``backbone.fpn``."""
    return key.split("[", 1)[0].split(":", 1)[0]


def _constant(s: LayerStats, rtol: float) -> bool:
    if not (math.isfinite(s.min) and math.isfinite(s.max)):
        return False
    return s.max - s.min <= rtol * max(abs(s.min), abs(s.max))


def _fraction(part: int, whole: int) -> float:
    return part / whole if whole else 1.0


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.2%}" if whole else "n/a"


def first_bad_layer(
    flags: Iterable[Flag], kinds: Iterable[str] = frozenset({"nan", "inf"})
) -> str | None:
    """The first layer (in the flags' depth order) with a flag of one of ``kinds``.

    With the default kinds this is where non-finite values first appear: the place to look.
    """
    wanted = set(kinds)
    return next((f.layer for f in flags if f.kind in wanted), None)


def find_flags(doc: Mapping[str, Any], kinds: Iterable[str]) -> list[tuple[str, Flag]]:
    """The per-image flags of a ``stats.json`` document whose kind is one of ``kinds``.

    What ``--fail-on`` checks: the run's aggregate is left out, since every NaN, Inf or dead
    layer it has is flagged in some image already.

    Format 1 holds every image's flags; format 2 holds, for each kind, only the worst images
    (one flag each, its most severe layer of that kind): :func:`flag_counts` gives the
    complete counts of both.

    Returns:
        ``(image key, flag)``: for format 1 in image and depth order; for format 2 kind by
        kind in the order of :data:`FLAG_KINDS`, most severe first.
    """
    wanted = set(kinds)
    if doc.get("format", 1) >= 2:
        worst = (doc.get("flags") or {}).get("worst") or {}
        return [
            (
                entry["image"],
                Flag(entry["layer"], kind, entry["message"], _severity(entry.get("severity"))),
            )
            for kind in FLAG_KINDS
            if kind in wanted
            for entry in worst.get(kind, [])
        ]
    return [
        (image, Flag(f["layer"], f["kind"], f["message"]))
        for image, section in (doc.get("images") or {}).items()
        for f in section.get("flags", [])
        if f["kind"] in wanted
    ]


def flag_counts(doc: Mapping[str, Any]) -> dict[str, int]:
    """How many images of a ``stats.json`` document have each kind of flag, in any layer.

    Works for both formats (format 1 counts them from its per-image sections); every kind of
    :data:`FLAG_KINDS` is a key, 0 where none was raised. The run's aggregate is left out, as
    in :func:`find_flags`.
    """
    counts = dict.fromkeys(FLAG_KINDS, 0)
    if doc.get("format", 1) >= 2:
        for kind, n in ((doc.get("flags") or {}).get("images") or {}).items():
            counts[kind] = int(n)
        return counts
    for section in (doc.get("images") or {}).values():
        for kind in {f["kind"] for f in section.get("flags", [])}:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _severity(value: Any) -> float:
    # JSON writes an infinite severity as null.
    return math.inf if value is None else float(value)


def parse_kinds(text: str) -> frozenset[str]:
    """Parse a comma-separated list of flag kinds, e.g. ``"nan,inf,dead"``.

    ``all`` stands for every kind; an empty string or ``none`` for no kind.

    Raises:
        UsageError: For a kind not in :data:`FLAG_KINDS`, naming the valid ones.
    """
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if words in ([], ["none"]):
        return frozenset()
    if "all" in words:
        return frozenset(FLAG_KINDS)
    unknown = [w for w in words if w not in FLAG_KINDS]
    if unknown:
        raise UsageError(
            f"unknown anomaly kind {', '.join(repr(w) for w in unknown)}; "
            f"choose from {', '.join(FLAG_KINDS)} (or all)"
        )
    return frozenset(words)
