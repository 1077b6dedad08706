"""Reports of runs written before the current formats: a manifest that lists every image's
record, and a ``stats.json`` of format 1 (per-image sections), read as today's inputs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from actviz.errors import UsageError
from actviz.report.blocks import by_name
from actviz.report.inputs import LINKED_FIRST, LISTED, OK, WORST_LINKED, ReportImages, image_row

__all__ = ["images_from_manifest", "upgrade_stats"]


def images_from_manifest(
    manifest: Mapping[str, Any], stats: Mapping[str, Any] | None
) -> ReportImages:
    """The :class:`ReportImages` of a manifest whose ``"images"`` lists every image's record
    (as ``manifest.json`` did before it pointed at the run's ledger), with the flags of a
    ``stats.json`` of format 1 (a manifest that points at its ledger instead raises
    :class:`~actviz.errors.UsageError`). It picks the linked images as a run does: the first
    :data:`LINKED_FIRST`, the first :data:`WORST_LINKED` of each flag kind, the first
    :data:`LISTED` failures."""
    records = manifest.get("images")
    if isinstance(records, Mapping):
        raise UsageError(
            "this manifest.json points at its run's ledger rather than listing its images: "
            "pass the report its images (ReportImages, with rows read from the ledger)"
        )
    records = records if isinstance(records, list) else []
    sections = _sections(stats)
    full: list[dict[str, Any]] = [
        _with_stats(r, sections.get(str(r.get("out_dir")))) for r in records
    ]
    linked: list[dict[str, Any]] = []
    drawn = failed = 0
    per_kind: dict[str, int] = {}
    for record in full:
        if record.get("status") == "failed":
            failed += 1
            if failed <= LISTED:
                linked.append(record)
            continue
        if record.get("status") not in OK:
            continue
        drawn += 1
        kinds = {str(f.get("kind")) for f in record.get("flags") or []}
        worst = False
        for kind in kinds:
            per_kind[kind] = per_kind.get(kind, 0) + 1
            worst = worst or per_kind[kind] <= WORST_LINKED
        if drawn <= LINKED_FIRST or worst:
            linked.append(record)
    rows = [image_row(r) for r in full]
    return ReportImages(
        total=len(full), failed=failed, linked=linked, rows=lambda: iter(rows), folders=True
    )


def _sections(stats: Mapping[str, Any] | None) -> Mapping[str, Mapping[str, Any]]:
    """A format-1 ``stats.json``'s per-image sections by image key; empty for format 2."""
    if not stats or stats.get("format", 1) >= 2:
        return {}
    images = stats.get("images") or {}
    return images if isinstance(images, Mapping) else {}


def _with_stats(record: Mapping[str, Any], section: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record with its flags, first non-finite layer and each layer's statistics from its
    format-1 ``stats.json`` section."""
    out = dict(record)
    if section is None:
        return out
    out.setdefault("flags", list(section.get("flags") or []))
    out.setdefault("first_nonfinite", section.get("first_nonfinite"))
    rows = by_name(section.get("layers") or [])
    layers = []
    for entry in record.get("layers") or []:
        row = rows.get(str(entry.get("name", "")))
        if entry.get("stats") is None and row is not None:
            entry = {**entry, "stats": {k: v for k, v in row.items() if k != "name"}}
        layers.append(entry)
    out["layers"] = layers
    return out


def upgrade_stats(stats: Mapping[str, Any], linked: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``stats.json`` as format 2 shows it: a format-1 document's run-level parts are worked
    out from its per-image sections (the earlier form held them all)."""
    if stats.get("format", 1) >= 2:
        return dict(stats)
    sections = _sections(stats)
    kinds = list(stats.get("flag_kinds") or [])
    run = stats.get("run")
    if run is None and len(sections) == 1:
        run = next(iter(sections.values()))  # pooled over one image is that image
    counts: dict[str, int] = dict.fromkeys(kinds, 0)
    per_layer: dict[str, dict[str, int]] = {}
    firsts: dict[tuple[str, str], list[Any]] = {}
    nonfinite: dict[str, list[Any]] = {}
    worst: dict[str, list[dict[str, Any]]] = {}
    values: dict[str, dict[str, list[float]]] = {}
    flagged = 0
    for key, section in sections.items():
        flags = section.get("flags") or []
        flagged += bool(flags)
        seen: set[str] = set()
        for flag in flags:
            kind, layer = str(flag.get("kind")), str(flag.get("layer"))
            per_layer.setdefault(layer, {}).setdefault(kind, 0)
            if (layer, kind) not in firsts:
                firsts[(layer, kind)] = [0, key]
            if kind in seen:
                continue
            seen.add(kind)
            counts[kind] = counts.get(kind, 0) + 1
            if len(worst.setdefault(kind, [])) < WORST_LINKED:
                entry = {"image": key, "layer": layer, "message": flag.get("message")}
                worst[kind].append({**entry, "severity": None})
        for layer, kind in {(str(f.get("layer")), str(f.get("kind"))) for f in flags}:
            per_layer[layer][kind] += 1
            firsts[(layer, kind)][0] += 1
        first = section.get("first_nonfinite")
        if first:
            nonfinite.setdefault(str(first), [0, key])[0] += 1
        for row in section.get("layers") or []:
            found = values.setdefault(str(row.get("name")), {})
            for name, value in _row_values(row).items():
                found.setdefault(name, []).append(value)
    layers = []
    for row in (run or {}).get("layers") or []:
        name = str(row.get("name"))
        found = values.get(name, {})
        layers.append(
            {
                **row,
                "images": len(found.get("max", [])),
                "across_images": {k: _quantiles(v) for k, v in found.items()},
                "flagged": per_layer.get(name, {}),
            }
        )
    return {
        **stats,
        "run": {**run, "layers": layers} if run else None,
        "flags": {
            "images": counts,
            "layers": [
                {"layer": layer, "kind": kind, "images": n, "first": first}
                for (layer, kind), (n, first) in firsts.items()
            ],
            "worst": worst,
            "first_nonfinite": [
                {"layer": layer, "images": n, "first": first}
                for layer, (n, first) in nonfinite.items()
            ],
        },
        "images": {"count": len(sections), "flagged": flagged},
    }


def _row_values(row: Mapping[str, Any]) -> dict[str, float]:
    """What the summary compares across images: mean, RMS, max, dead fraction (finite)."""
    out: dict[str, float] = {}
    mean, std = row.get("mean"), row.get("std")
    for name in ("mean", "max", "dead_frac"):
        value = row.get(name)
        if isinstance(value, int | float) and math.isfinite(value):
            out[name] = float(value)
    if isinstance(mean, int | float) and isinstance(std, int | float):
        out["rms"] = math.sqrt(mean * mean + std * std)
    return out


def _quantiles(values: list[float]) -> dict[str, float]:
    """p1, p50 and p99 interpolated between the two nearest values, as ``numpy.quantile``
    (and as the sketches of later versions' ``stats.json``)."""
    ordered = sorted(values)
    n = len(ordered)

    def rank(q: float) -> float:
        position = q * (n - 1)
        low = math.floor(position)
        high = min(low + 1, n - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {"p01": rank(0.01), "p50": rank(0.5), "p99": rank(0.99)}
