"""The cards of each command's result, built from the result's attributes only (its class is
never imported here: this package sits below every command family).

Each ``*_card`` reads a bounded part of the result: the first few layers and images, counts
of the rest; the ``__repr__`` and ``_repr_html_`` of the result classes call them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from actviz.cards.card import MAX_ROWS, MAX_THUMBS, Card, Table, Thumb, href
from actviz.cards.thumbs import thumb_from_file

__all__ = [
    "RANDOM_WARNING",
    "atlas_card",
    "diff_card",
    "fmt",
    "listing_card",
    "optimize_card",
    "run_card",
    "top_images_card",
    "weights_text",
]

#: Said on the card of any result whose model ran with random weights.
RANDOM_WARNING = "random weights: an untrained model, so the pictures show no learned features"


def fmt(value: object) -> str:
    """A number as a card shows it: 4 significant digits, ``-`` for none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}"
    return str(value)


def weights_text(weights: Any) -> str:
    """``pretrained ResNet18_Weights.IMAGENET1K_V1``, ``random (why)``, ``checkpoint a.pt``."""
    if weights is None:
        return "-"
    source = str(getattr(weights, "source", "?"))
    name = getattr(weights, "name", None)
    reason = getattr(weights, "reason", None)
    text = source if not name or source in ("random", "module") else f"{source} {name}"
    return f"{text} ({reason})" if reason else text


def _weights_warnings(weights: Any, warning: str | None, others: Sequence[str]) -> list[str]:
    """The random-weights warning first (the result's own words when it has them)."""
    first = []
    if warning:
        first.append(warning)
    elif getattr(weights, "random", False):
        first.append(RANDOM_WARNING)
    return first + [w for w in others if w not in first]


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _links(out: Path, named: Iterable[tuple[str, Path | str | None]]) -> list[tuple[str, str]]:
    links = [(label, href(path)) for label, path in named if path is not None]
    return [*links, ("folder", href(out))]


def _thumb(out: Path, rel: str | None, label: str) -> Thumb | None:
    return None if rel is None else thumb_from_file(out / rel, label)


def _thumbs(out: Path, named: Iterable[tuple[str | None, str]]) -> list[Thumb]:
    """The thumbnails of the first :data:`MAX_THUMBS` ``(file, label)`` pairs that have one."""
    found = (_thumb(out, rel, label) for rel, label in islice(named, MAX_THUMBS))
    return [t for t in found if t is not None]


# A run (and a stats run).
def _first_ok(images: Any) -> Any:
    """The first image processed, read back alone (a run's ledger is read one record at a
    time: the card of 20,000 images reads one)."""
    having = getattr(images, "having", None)
    found: Iterator[Any] = (
        having("ok") if having is not None else (i for i in images if i.status == "ok")
    )
    for image in islice(found, 1):
        return image
    return None


def _first_origin(result: Any, layer_order: Sequence[str]) -> str | None:
    """Where the first NaN (or else Inf) of a run came from: the earliest layer, in capture
    order, flagged in some image."""
    depth = {name: i for i, name in enumerate(layer_order)}
    for kind, word in (("nan", "NaN"), ("inf", "Inf")):
        found = result.flags([kind]) if result.stats is not None else []
        if found:
            image, flag = min(found, key=lambda f: depth.get(f[1].layer.split(":")[0], 1 << 30))
            return f"first {word} from layer {flag.layer} (image {image}): {flag.message}"
    return None


def _run_table(result: Any) -> Table:
    layers = ((result.stats or {}).get("run") or {}).get("layers") or []
    if not layers:
        return Table(
            ["layer"], [[name] for name in result.layers[:MAX_ROWS]], len(result.layers), "layers"
        )
    rows = []
    for layer in layers[:MAX_ROWS]:
        flagged = [k for k, n in (layer.get("flagged") or {}).items() if n]
        rows.append(
            [
                layer.get("name", "?"),
                fmt(layer.get("channels")),
                fmt(layer.get("mean")),
                fmt(layer.get("std")),
                f"{fmt(layer.get('min'))} .. {fmt(layer.get('max'))}",
                fmt(layer.get("dead_frac")),
                ", ".join(flagged) or "-",
            ]
        )
    headers = ["layer", "channels", "mean", "std", "range", "dead", "flags"]
    return Table(headers, rows, len(layers), "layers")


def run_card(result: Any, pictures: bool = True) -> Card:
    """The card of a ``RunResult`` (``actviz.run`` and ``stats``)."""
    total = len(result.images)
    failed, reused = result.count("failed"), result.count("reused")
    counts = ", ".join(
        part
        for part in (f"{failed:,} failed" if failed else "", f"{reused:,} reused" if reused else "")
        if part
    )
    flags = result.flag_counts()
    raised = {kind: n for kind, n in flags.items() if n}
    flag_lines = []
    origin = (
        _first_origin(result, result.layers) if raised.get("nan") or raised.get("inf") else None
    )
    if origin:
        flag_lines.append(origin)
    flag_lines += [f"{kind}: {_plural(n, 'image')} flagged" for kind, n in raised.items()]
    first = _first_ok(result.images) if pictures else None
    thumbs: list[Thumb] = []
    more = 0
    if first is not None:
        if first.thumbnail:
            found = _thumb(result.out, first.thumbnail, f"{first.out_dir} (input)")
            thumbs += [found] if found else []
        drawn = [layer for layer in first.layers if layer.file]
        grids = _thumbs(result.out, ((layer.file, layer.key) for layer in drawn))
        thumbs += grids
        more = max(0, result.counts.grids - len(grids))
    summary = (
        f"RunResult(model={result.model!r}, weights={weights_text(result.weights)!r}, "
        f"images={total}{f' ({counts})' if counts else ''}, layers={len(result.layers)}, "
        f"flags={raised or 'none'}, out={str(result.out)!r})"
    )
    return Card(
        kind="run" if result.counts.grids or not result.stats else "stats",
        title=str(result.model),
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            ("device", str(result.device)),
            ("layers", f"{len(result.layers):,} (selector {result.selector!r})"),
            ("images", f"{total:,}" + (f" ({counts})" if counts else "")),
            ("files", f"{result.counts.grids:,} grids, {result.counts.files:,} files"),
            ("time", f"{result.seconds:.1f} s"),
        ],
        warnings=_weights_warnings(result.weights, result.weights_warning, result.warnings),
        flags=flag_lines + list(result.notes),
        table=_run_table(result),
        thumbs=thumbs,
        more_thumbs=more,
        links=_links(
            result.out,
            [
                ("report", result.report),
                ("manifest.json", result.manifest),
                ("stats.json", result.out / "stats.json" if result.stats else None),
            ],
        ),
    )


# top-images.
def top_images_card(result: Any, pictures: bool = True) -> Card:
    """The card of a ``TopImagesResult``."""
    rows = [
        [
            layer.key,
            fmt(layer.channels),
            fmt(layer.dead) if layer.dead_judged else "-",
            "-"
            if layer.selective_channel is None
            else f"{layer.selective_channel} ({layer.selective_label or layer.selective_class}: "
            f"{layer.selective_count}/{layer.top_count})",
        ]
        for layer in result.layers[:MAX_ROWS]
    ]
    named = ((layer.overview, layer.key) for layer in result.layers)
    thumbs = _thumbs(result.out, named) if pictures else []
    dead = [
        f"{layer.key}: {_plural(layer.dead, 'dead channel')}"
        for layer in result.layers
        if layer.dead_judged and layer.dead
    ]
    summary = (
        f"TopImagesResult(model={result.model!r}, images={result.images}, k={result.k}, "
        f"layers={len(result.layers)}, out={str(result.out)!r})"
    )
    return Card(
        kind="top-images",
        title=str(result.model),
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            (
                "images",
                f"{result.images:,}"
                + (f" ({result.failed_count:,} failed)" if result.failed_count else ""),
            ),
            ("ranked", f"top {result.k} by {result.score}, {_plural(len(result.layers), 'layer')}"),
            ("time", f"{result.seconds:.1f} s"),
        ],
        warnings=_weights_warnings(result.weights, None, result.warnings),
        flags=dead,
        table=Table(
            ["layer", "channels", "dead", "most selective"], rows, len(result.layers), "layers"
        ),
        thumbs=thumbs,
        more_thumbs=max(0, len(result.layers) - len(thumbs)),
        links=_links(result.out, [("report", result.report), ("top-images.json", result.json)]),
    )


# diff.
def diff_card(result: Any, pictures: bool = True) -> Card:
    """The card of a ``DiffResult``."""
    metric = result.metric
    rows = [
        [
            layer.name,
            fmt(layer.cka),
            fmt(layer.cosine),
            fmt(getattr(layer, "rel_l2", None)),
            layer.note or "",
        ]
        for layer in result.layers[:MAX_ROWS]
    ]
    lines = []
    if result.first_divergent:
        lines.append(
            f"first divergent layer ({metric} < {fmt(result.threshold)}): {result.first_divergent}"
        )
    if getattr(result, "first_changed", None):
        lines.append(f"first changed layer: {result.first_changed}")
    named = ((p.file, f"{p.layer} ({p.image})") for p in result.pictures)
    thumbs = _thumbs(result.out, named) if pictures else []
    if (
        pictures
        and result.chart is not None
        and (chart := thumb_from_file(result.chart, "similarity"))
    ):
        thumbs.insert(0, chart)
    warnings = _weights_warnings(result.a.weights, result.a.warning, [])
    warnings += _weights_warnings(result.b.weights, result.b.warning, result.warnings)
    summary = (
        f"DiffResult(a={result.a.label!r}, b={result.b.label!r}, layers={len(result.layers)}, "
        f"first_divergent={result.first_divergent!r}, out={str(result.out)!r})"
    )
    return Card(
        kind="diff",
        title=f"{result.a.label} vs {result.b.label}",
        summary=summary,
        facts=[
            ("A", f"{result.a.model}: {weights_text(result.a.weights)}"),
            ("B", f"{result.b.model}: {weights_text(result.b.weights)}"),
            ("images", f"{len(result.images):,}"),
            ("layers", f"{len(result.layers):,} (selector {result.selector!r})"),
            ("time", f"{result.seconds:.1f} s"),
        ],
        warnings=list(dict.fromkeys(warnings)),
        flags=lines,
        table=Table(
            ["layer", "CKA", "cosine", "rel L2", "note"], rows, len(result.layers), "layers"
        ),
        thumbs=thumbs,
        more_thumbs=max(0, len(result.pictures) - MAX_THUMBS),
        links=_links(result.out, [("report", result.report), ("diff.json", result.record)]),
    )


# optimize.
def optimize_card(result: Any, pictures: bool = True) -> Card:
    """The card of an ``OptimizeResult``."""
    rows = [
        [
            layer.key,
            layer.unit,
            fmt(len(layer.channels)),
            fmt(max((c.final for c in layer.channels), default=None)),
        ]
        for layer in result.layers[:MAX_ROWS]
    ]
    named = ((layer.sheet, layer.key) for layer in result.layers)
    thumbs = _thumbs(result.out, named) if pictures else []
    summary = (
        f"OptimizeResult(model={result.model!r}, layers={len(result.layers)}, "
        f"channels={result.channels}, steps={result.steps}, complete={result.complete}, "
        f"out={str(result.out)!r})"
    )
    return Card(
        kind="optimize",
        title=str(result.model),
        summary=summary,
        facts=[
            ("weights", weights_text(result.weights)),
            ("channels", f"{result.channels:,} in {_plural(len(result.layers), 'layer')}"),
            ("steps", f"{result.steps:,} at {result.size} px"),
            ("time", f"{result.seconds:.1f} s" + ("" if result.complete else " (stopped early)")),
        ],
        warnings=_weights_warnings(result.weights, None, result.warnings),
        table=Table(
            ["layer", "unit", "channels", "best objective"], rows, len(result.layers), "layers"
        ),
        thumbs=thumbs,
        more_thumbs=max(0, len(result.layers) - len(thumbs)),
        links=_links(result.out, [("report", result.report), ("optimize.json", result.json)]),
    )


# atlas.
def atlas_card(result: Any, pictures: bool = True) -> Card:
    """The card of an ``AtlasResult``: the picture, the largest cells and what they support."""
    cells = sorted(result.cells, key=lambda c: -int(c.get("count", 0)))
    rows = [
        [
            f"{c.get('row')},{c.get('col')}",
            fmt(c.get("count")),
            c.get("class_name") or ("-" if c.get("class") is None else f"class {c['class']}"),
            (c.get("colour") or {}).get("label") or fmt((c.get("colour") or {}).get("mean")),
            ", ".join(n.get("image", "") for n in (c.get("nearest") or [])[:2]),
        ]
        for c in cells[:MAX_ROWS]
    ]
    readout = result.readout or {}
    flags = []
    if not readout.get("linear"):
        flags.append(f"no supported class: {readout.get('reason') or 'no linear readout'}")
    against = result.against
    facts = [
        ("weights", weights_text(result.weights)),
        ("layer", str(result.layer)),
        ("points", f"{result.points:,} from {_plural(result.images, 'image')}"),
        (
            "cells",
            f"{len(result.cells):,} of {result.grid} x {result.grid} kept "
            f"(at least {result.min_count} points)",
        ),
        ("layout", f"{result.reduce}, coloured by {result.colour}"),
        ("time", f"{result.seconds:.1f} s ({result.forward_seconds:.1f} s forward)"),
    ]
    warnings = _weights_warnings(result.weights, result.weights_warning, [])
    if against:
        facts.insert(1, ("against", f"{against.get('model')}: R\u00b2 {fmt(against.get('r2'))}"))
        warnings = _weights_warnings(against.get("weights_info"), against.get("warning"), warnings)
    warnings = list(dict.fromkeys(warnings + list(result.warnings)))
    thumbs = []
    if pictures and (found := thumb_from_file(result.picture, "atlas.png", (480, 260))):
        thumbs.append(found)
    summary = (
        f"AtlasResult(model={result.model!r}, layer={result.layer!r}, points={result.points}, "
        f"cells={len(result.cells)}, out={str(result.out)!r})"
    )
    return Card(
        kind="atlas",
        title=str(result.model),
        summary=summary,
        facts=facts,
        warnings=warnings,
        flags=flags,
        table=Table(["cell", "points", "supports", "colour", "nearest"], rows, len(cells), "cells"),
        thumbs=thumbs,
        links=_links(
            result.out,
            [("page", result.report), ("atlas.json", result.record), ("points", result.table)],
        ),
    )


# list-layers.
def listing_card(listing: Any) -> Card:
    """The card of a ``LayerListing``: the selected layers first when a selector was given."""
    layers = list(listing.layers)
    chosen = [info for info in layers if info.selected] if listing.selector else layers
    rows = [
        [
            info.name,
            info.module_type,
            "x".join(str(n) for n in info.shape) if info.shape else "-",
            fmt(info.params),
            "" if info.calls == 1 else f"{info.calls} calls",
        ]
        for info in chosen[:MAX_ROWS]
    ]
    picked = f", {len(chosen):,} selected by {listing.selector!r}" if listing.selector else ""
    summary = (
        f"LayerListing(model={listing.model!r}, layers={len(layers)}"
        f"{f', selected={len(chosen)}' if listing.selector else ''}, "
        f"input={tuple(listing.input_shape)})"
    )
    return Card(
        kind="list-layers",
        title=str(listing.model),
        summary=summary,
        facts=[
            ("input", "x".join(str(n) for n in listing.input_shape)),
            ("modules", f"{len(layers):,}{picked}"),
            ("grids", f"{listing.grids:,} (one per selected output)"),
        ],
        table=Table(["layer", "type", "output", "params", ""], rows, len(chosen), "layers"),
    )


def stats_rows(stats: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Rows of ``name -> {mean, std, min, max, zero_frac, grad_norm}`` for a table."""
    return [
        [
            name,
            fmt(s.get("mean")),
            fmt(s.get("std")),
            f"{fmt(s.get('min'))} .. {fmt(s.get('max'))}",
            fmt(s.get("zero_frac")),
            fmt(s.get("grad_norm")),
        ]
        for name, s in islice(stats.items(), MAX_ROWS)
    ]
