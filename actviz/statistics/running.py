"""Running summaries of a run's statistics, whose size depends on the layers, not the images.

:class:`RunningLayer` (in :mod:`actviz.statistics.pooled`) folds one layer's per-image
:class:`~actviz.statistics.layerstats.LayerStats` into what
:func:`~actviz.statistics.layerstats.aggregate` would pool from all of them, plus quantile
sketches of the images' means, RMS, maxima and dead fractions. :class:`RunningStats` does it
for a whole run, with flag counts, the worst images of each kind of flag and where non-finite
values start, and writes ``stats.json`` format 2 from them.

Every sum is kept exactly, as an integer times a power of two (which every float is), so
nothing is lost to rounding or cancellation, and the result is the same whatever order the
images arrive in or however they are split between summaries merged later (resume, the Ray
engine): the pooled moments are the exact ones, rounded once.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from actviz.statistics.anomalies import (
    FLAG_KINDS,
    Flag,
    Thresholds,
    first_bad_layer,
    flag_anomalies,
)
from actviz.statistics.layerstats import LayerStats, _json_float
from actviz.statistics.pooled import ACROSS_IMAGES, RunningLayer
from actviz.statistics.sketch import Sketch

__all__ = ["ACROSS_IMAGES", "WORST", "RunningLayer", "RunningStats", "Sketch"]

WORST = 20
"""How many images :class:`RunningStats` keeps for each kind of flag, the most severe."""

# One shared default: Thresholds is frozen, so sharing it between calls is safe.
_DEFAULT_THRESHOLDS = Thresholds()


class RunningStats:
    """A run's statistics and flags, folded image by image, in memory bounded by the number
    of layers times the kinds of flags, never by the number of images.

    "First" always means the smallest image key, and layers are ordered by their first
    appearance over the images in key order, so the summary (and :meth:`to_json`) is the same
    whatever order the images arrive in or however they are split between summaries merged
    with :meth:`merge`; those must hold different images.
    """

    __slots__ = (
        "_first_nonfinite",
        "_flagged",
        "_images",
        "_kinds",
        "_layers",
        "_order",
        "_per_kind",
        "_worst",
    )

    def __init__(self) -> None:
        self._images = 0
        self._flagged = 0
        self._layers: dict[str, RunningLayer] = {}
        self._order: dict[str, tuple[str, int]] = {}  # layer -> (first image key, depth there)
        self._per_kind = dict.fromkeys(FLAG_KINDS, 0)  # kind -> images with it in any layer
        self._kinds: dict[tuple[str, str], tuple[int, str]] = {}  # (layer, kind) -> (n, first)
        self._first_nonfinite: dict[str, tuple[int, str]] = {}  # layer -> (n, first)
        # kind -> (-severity, image, layer, message), most severe first, at most WORST.
        self._worst: dict[str, list[tuple[float, str, str, str]]] = {k: [] for k in FLAG_KINDS}

    @property
    def images(self) -> int:
        """Number of images with statistics added."""
        return self._images

    @property
    def flagged(self) -> int:
        """Number of those with at least one flag."""
        return self._flagged

    def add_image(
        self,
        image: str,
        layers: Sequence[tuple[str, LayerStats]],
        thresholds: Thresholds = _DEFAULT_THRESHOLDS,
    ) -> list[Flag]:
        """Fold in one image's layers (in depth order) and return its flags.

        Args:
            image: The image's key (its output folder as posix text).
            layers: ``(name, stats)`` in depth order; an image without any adds nothing.
            thresholds: When to flag.

        Returns:
            :func:`~actviz.statistics.anomalies.flag_anomalies` of the image's layers.
        """
        flags = flag_anomalies(layers, thresholds)
        if not layers:
            return flags
        self._images += 1
        self._flagged += bool(flags)
        for depth, (name, s) in enumerate(layers):
            self._layer(name).add(s)
            _keep_min(self._order, name, (image, depth))
        worst: dict[str, Flag] = {}
        for flag in flags:
            _tally(self._kinds, (flag.layer, flag.kind), 1, image)
            held = worst.get(flag.kind)
            if held is None or _severity(flag) > _severity(held):
                worst[flag.kind] = flag
        for kind, flag in worst.items():
            self._per_kind[kind] = self._per_kind.get(kind, 0) + 1
            self._rank(kind, [(-_severity(flag), image, flag.layer, flag.message)])
        bad = first_bad_layer(flags)
        if bad is not None:
            _tally(self._first_nonfinite, bad, 1, image)
        return flags

    def _layer(self, name: str) -> RunningLayer:
        layer = self._layers.get(name)
        if layer is None:
            layer = self._layers[name] = RunningLayer()
        return layer

    def _rank(self, kind: str, entries: list[tuple[float, str, str, str]]) -> None:
        held = self._worst.setdefault(kind, [])
        for entry in entries:
            if len(held) < WORST or entry < held[-1]:
                bisect.insort(held, entry)
                del held[WORST:]

    def merge(self, other: RunningStats) -> None:
        """Fold in the summary of other images (from another worker, or a resumed part)."""
        self._images += other._images
        self._flagged += other._flagged
        for name, layer in other._layers.items():
            self._layer(name).merge(layer)
        for name, order in other._order.items():
            _keep_min(self._order, name, order)
        for kind, n in other._per_kind.items():
            self._per_kind[kind] = self._per_kind.get(kind, 0) + n
        for key, (n, first) in other._kinds.items():
            _tally(self._kinds, key, n, first)
        for name, (n, first) in other._first_nonfinite.items():
            _tally(self._first_nonfinite, name, n, first)
        for kind, entries in other._worst.items():
            self._rank(kind, entries)

    def to_state(self) -> dict[str, Any]:
        """The whole summary as JSON-ready data (big integers and non-finite floats included,
        as Python's json writes them), for :meth:`from_state`: what a resumed run starts from."""
        return {
            "images": self._images,
            "flagged": self._flagged,
            "layers": {name: layer.to_state() for name, layer in self._layers.items()},
            "order": [[name, image, depth] for name, (image, depth) in self._order.items()],
            "per_kind": list(self._per_kind.items()),
            "kinds": [[layer, kind, n, first] for (layer, kind), (n, first) in self._kinds.items()],
            "first_nonfinite": [
                [name, n, first] for name, (n, first) in self._first_nonfinite.items()
            ],
            "worst": {kind: [list(entry) for entry in held] for kind, held in self._worst.items()},
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> RunningStats:
        """The summary :meth:`to_state` gave, equal to the one it was taken from.

        Raises:
            KeyError, TypeError, ValueError: If ``data`` is not such a state.
        """
        stats = cls()
        stats._images = int(data["images"])
        stats._flagged = int(data["flagged"])
        stats._layers = {str(k): RunningLayer.from_state(v) for k, v in data["layers"].items()}
        stats._order = {str(name): (str(image), int(depth)) for name, image, depth in data["order"]}
        stats._per_kind = {str(kind): int(n) for kind, n in data["per_kind"]}
        stats._kinds = {
            (str(layer), str(kind)): (int(n), str(first)) for layer, kind, n, first in data["kinds"]
        }
        stats._first_nonfinite = {
            str(name): (int(n), str(first)) for name, n, first in data["first_nonfinite"]
        }
        stats._worst = {
            str(kind): [(float(s), str(i), str(layer), str(m)) for s, i, layer, m in held]
            for kind, held in data["worst"].items()
        }
        return stats

    def layer_names(self) -> list[str]:
        """Every layer seen, pooled or not, in run order."""
        return sorted(self._order, key=self._order.__getitem__)

    def pooled(self) -> list[tuple[str, LayerStats]]:
        """``(layer, pooled stats)`` in run order, as pooling the same images in one go
        gives them: a layer whose channel count differed between images is left out."""
        results = ((name, self._layers[name].result()) for name in self.layer_names())
        return [(name, s) for name, s in results if s is not None]

    def flag_images(self) -> dict[str, int]:
        """Number of images with each kind of flag, in any layer (every kind a key)."""
        return dict(self._per_kind)

    def worst(self, kind: str) -> list[tuple[str, Flag]]:
        """The images most severely flagged ``kind`` (at most :data:`WORST`), most severe
        first, ties by image key: ``(image key, its most severe flag of that kind)``."""
        return [
            (image, Flag(layer, kind, message, -negated))
            for negated, image, layer, message in self._worst.get(kind, [])
        ]

    def to_json(
        self,
        thresholds: Thresholds = _DEFAULT_THRESHOLDS,
        table: str = "stats.parquet",
        csv: str | None = "stats.csv",
    ) -> dict[str, Any]:
        """``stats.json`` format 2 (see docs/outputs.md), the run's section pooled over
        every image at once (exactly) and ``None`` when no image had statistics.

        Args:
            thresholds: For the run's flags, and recorded.
            table: The per-image table's file name, relative to ``stats.json``.
            csv: The CSV table's file name, or None when there is none.
        """
        names = self.layer_names()
        pooled = self.pooled()
        run: dict[str, Any] | None = None
        if self._images:
            run_flags = flag_anomalies(pooled, thresholds)
            run = {
                "layers": [self._layer_json(name, s) for name, s in pooled],
                "flags": [f.to_dict() for f in run_flags],
                "first_nonfinite": first_bad_layer(run_flags),
            }
        layer_kinds = [
            {"layer": name, "kind": kind, "images": n, "first": first}
            for name in names
            for kind in FLAG_KINDS
            for n, first in [self._kinds.get((name, kind), (0, ""))]
            if n
        ]
        return {
            "format": 2,
            "flag_kinds": list(FLAG_KINDS),
            "thresholds": asdict(thresholds),
            "images": {
                "count": self._images,
                "flagged": self._flagged,
                "table": table,
                "csv": csv,
            },
            "run": run,
            "flags": {
                "images": self.flag_images(),
                "layers": layer_kinds,
                "worst": {
                    kind: [
                        {
                            "image": image,
                            "layer": flag.layer,
                            "message": flag.message,
                            "severity": _json_float(flag.severity),
                        }
                        for image, flag in self.worst(kind)
                    ]
                    for kind in FLAG_KINDS
                },
                "first_nonfinite": [
                    {"layer": name, "images": n, "first": first}
                    for name in names
                    if name in self._first_nonfinite
                    for n, first in [self._first_nonfinite[name]]
                ],
            },
        }

    def _layer_json(self, name: str, s: LayerStats) -> dict[str, Any]:
        layer = self._layers[name]
        return {
            "name": name,
            **s.to_dict(),
            "images": layer.images,
            "across_images": layer.across_images(),
            "flagged": {kind: self._kinds.get((name, kind), (0, ""))[0] for kind in FLAG_KINDS},
        }


def _severity(flag: Flag) -> float:
    return 0.0 if math.isnan(flag.severity) else flag.severity


def _keep_min(held: dict[str, tuple[str, int]], key: str, value: tuple[str, int]) -> None:
    if key not in held or value < held[key]:
        held[key] = value


def _tally(held: dict[Any, tuple[int, str]], key: Any, n: int, first: str) -> None:
    if key in held:
        count, earliest = held[key]
        held[key] = (count + n, min(earliest, first))
    else:
        held[key] = (n, first)
