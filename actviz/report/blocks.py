"""The blocks the report pages are made of, each built from the manifest or ``stats.json`` alone.

The random-weights banner, the run's metadata, the failed and skipped inputs, a layer's table
row, statistics and pictures, a list of flags: none of them needs to know which page it lands
on or how pages link to each other, which is what :mod:`~actviz.report.pages` decides. Text is
escaped and paths are encoded with :mod:`~actviz.report.markup`; ``base`` arguments are the
relative way from the page back to the output folder (``""`` or ``"../../"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actviz._version import __version__
from actviz.report.markup import badges, esc, image_tag, link_to, num, pct, shape_text

__all__ = [
    "by_name",
    "failed_tables",
    "find_layer",
    "flag_list",
    "kinds_of",
    "layer_pictures",
    "layer_table",
    "run_meta",
    "run_warnings",
    "stats_table",
    "summary_line",
    "weights_banner",
]

_STAT_COLUMNS = (
    ("mean", "mean", False),
    ("std", "std", False),
    ("min", "min", False),
    ("p01", "p1", False),
    ("p99", "p99", False),
    ("max", "max", False),
    ("zero_frac", "zeros", True),
    ("neg_frac", "neg", True),
    ("dead_frac", "dead ch.", True),
    ("nan", "NaN", False),
    ("inf", "Inf", False),
)
_STAT_HEAD = "".join(f"<th class=n>{label}</th>" for _, label, _ in _STAT_COLUMNS)


# ---------------------------------------------------------------------- the run


def weights_banner(manifest: Mapping[str, Any]) -> str:
    """The red banner of a run drawn with random weights, saying why; empty otherwise."""
    weights = manifest.get("weights") or {}
    if not weights.get("random"):
        return ""
    reason = weights.get("reason") or (
        "--weights none was given"
        if weights.get("spec") == "none"
        else "no pretrained weights were found"
    )
    seed = weights.get("seed")
    seeded = f" (seed {esc(seed)})" if seed is not None else ""
    return (
        '<div class="banner" role="alert">RANDOM WEIGHTS: these pictures show an untrained '
        f"network{seeded}, not what a trained model sees. Reason: {esc(reason)}</div>"
    )


def run_warnings(manifest: Mapping[str, Any]) -> list[str]:
    """The run's warnings, as plain text, to show one box each."""
    warnings = [str(w) for w in manifest.get("warnings") or []]
    if (manifest.get("weights") or {}).get("random"):
        # The banner already says it, louder; the run's own warning would repeat it.
        warnings = [w for w in warnings if not w.startswith("RANDOM WEIGHTS")]
    return warnings


def run_meta(manifest: Mapping[str, Any], *, layers: int, drawn: int, failed: int) -> str:
    """The run's facts as a definition list: model, weights, device, selector, counts, versions.

    Args:
        manifest: The run's manifest.
        layers: Number of distinct layers captured.
        drawn: Number of images drawn (or reused).
        failed: Number of images that failed.
    """
    m = manifest
    weights = m.get("weights") or {}
    if weights.get("random"):
        weight_text = f"random initialisation, seed {weights.get('seed')}"
        if weights.get("spec") not in (None, "none"):
            weight_text += f" (asked for {weights.get('spec')})"
    else:
        name, source = weights.get("name"), weights.get("source")
        weight_text = f"{name} ({source})" if name and source else str(name or source or "?")
    versions = dict(m.get("versions") or {})
    versions.setdefault("actviz", m.get("actviz", __version__))
    rows = [
        ("model", f"<code>{esc(m.get('model', '?'))}</code>"),
        ("weights", esc(weight_text)),
        ("device", esc(m.get("device", "?"))),
        ("selector", f"<code>{esc(m.get('selector', ''))}</code>"),
        ("layers", esc(layers)),
        (
            "images",
            f"{drawn} drawn, {failed} failed, {len(m.get('skipped', []))} skipped",
        ),
        ("versions", esc(", ".join(f"{k} {v}" for k, v in versions.items()))),
        ("created", esc(m.get("created", ""))),
    ]
    if m.get("seconds") is not None:
        rows.append(("time", f"{esc(m['seconds'])} s"))
    items = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="meta">{items}</dl>'


def failed_tables(failed: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, Any]]) -> str:
    """The failed images and the skipped inputs, each with its reason; empty when none."""
    parts = []
    if failed:
        items = "".join(
            f"<tr><td><code>{esc(im.get('path', ''))}</code></td><td>{esc(im.get('error'))}"
            "</td></tr>"
            for im in failed
        )
        parts.append(
            f"<h2>Failed images ({len(failed)})</h2><table><thead><tr><th>image</th>"
            f"<th>error</th></tr></thead><tbody>{items}</tbody></table>"
        )
    if skipped:
        items = "".join(
            f"<tr><td><code>{esc(s.get('path', ''))}</code></td><td>{esc(s.get('reason'))}"
            "</td></tr>"
            for s in skipped
        )
        parts.append(
            f"<h2>Skipped inputs ({len(skipped)})</h2><table><thead><tr><th>input</th>"
            f"<th>reason</th></tr></thead><tbody>{items}</tbody></table>"
        )
    return "".join(parts)


# ---------------------------------------------------------------------- layers


def layer_table(
    layers: Sequence[Mapping[str, Any]],
    rows: Mapping[str, Mapping[str, Any]],
    flags: Sequence[Mapping[str, Any]],
) -> str:
    """One image's layers, each row linking to its section (``#L<position>``) on the page.

    Args:
        layers: The image's manifest layer entries, in capture order.
        rows: The image's ``stats.json`` layer rows by name; empty without statistics.
        flags: The image's flags.
    """
    # Statistic columns only when statistics were computed: a column of dashes says nothing.
    with_stats = bool(rows)
    kinds_by_layer: dict[str, list[str]] = {}
    for flag in flags:
        kinds_by_layer.setdefault(str(flag.get("layer")), []).append(str(flag.get("kind")))
    body = []
    for position, entry in enumerate(layers):
        key = entry.get("name", "")
        kinds = kinds_by_layer.get(str(key), [])
        row = rows.get(key) or {}
        cells = (
            f"<td class=n>{num(row.get('mean'))}</td><td class=n>{num(row.get('std'))}"
            f"</td><td class=n>{pct(row.get('zero_frac'))}</td>"
            f"<td class=n>{pct(row.get('dead_frac'))}</td><td>{badges(kinds)}</td>"
            if with_stats
            else ""
        )
        body.append(
            f"<tr{' class=flagged' if kinds else ''}><td class=n>{position}</td>"
            f"<td><a href='#L{position}'><code>{esc(key)}</code></a></td>"
            f"<td>{esc(entry.get('type', ''))}</td><td>{esc(shape_text(entry.get('shape')))}</td>"
            f"{cells}</tr>"
        )
    head = (
        "<th class=n>mean</th><th class=n>std</th><th class=n>zeros</th>"
        "<th class=n>dead ch.</th><th>flags</th>"
        if with_stats
        else ""
    )
    return (
        "<table><thead><tr><th class=n>#</th><th>layer</th><th>type</th><th>shape</th>"
        f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def stats_table(row: Mapping[str, Any]) -> str:
    """Every statistic of one ``stats.json`` layer row, as a one-row table."""
    cells = "".join(
        f"<td class=n>{pct(row.get(key)) if frac else num(row.get(key))}</td>"
        for key, _, frac in _STAT_COLUMNS
    )
    return f"<table><thead><tr>{_STAT_HEAD}</tr></thead><tbody><tr>{cells}</tr></tbody></table>"


def summary_line(row: Mapping[str, Any]) -> str:
    """The few statistics that fit under a card: mean, std, zeros, dead channels."""
    return (
        f"mean {num(row.get('mean'))} &middot; std {num(row.get('std'))} &middot; "
        f"zeros {pct(row.get('zero_frac'))} &middot; dead {pct(row.get('dead_frac'))}"
    )


def flag_list(flags: Sequence[Mapping[str, Any]]) -> str:
    """Flags as a list of badge, layer and message; empty when there are none."""
    if not flags:
        return ""
    items = "".join(
        f"<li>{badges([f.get('kind', '')])} <code>{esc(f.get('layer'))}</code> "
        f"{esc(f.get('message'))}</li>"
        for f in flags
    )
    return f'<ul class="flags">{items}</ul>'


def layer_pictures(entry: Mapping[str, Any], base: str) -> str:
    """A layer's grid (and overlay), each linking to the full-size PNG; or why it is missing.

    Args:
        entry: The layer's manifest entry.
        base: The way from the page back to the output folder, which the paths are relative to.
    """
    file = entry.get("file")
    if not file:
        return f'<p class="warn">Not drawn: {esc(entry.get("note") or "no picture")}</p>'
    size = ""
    if entry.get("width") and entry.get("height"):
        size = f' width="{int(entry["width"])}" height="{int(entry["height"])}"'
    pictures = link_to(
        base + file,
        image_tag(base + file, f"feature maps of {entry.get('name', '')}", "grid", size),
        raw=True,
    )
    overlay = entry.get("overlay")
    if overlay:
        alt = f"overlay of {entry.get('name', '')} on the input"
        pictures += link_to(base + overlay, image_tag(base + overlay, alt, "overlay", ""), raw=True)
    return pictures


# ---------------------------------------------------------------------- lookups


def kinds_of(flags: Sequence[Mapping[str, Any]], layer: str) -> list[str]:
    """The kinds of the flags raised on ``layer``, in order."""
    return [str(f.get("kind")) for f in flags if f.get("layer") == layer]


def by_name(rows: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """``stats.json`` layer rows by layer name."""
    return {str(r.get("name")): r for r in rows}


def find_layer(image: Mapping[str, Any], key: str) -> tuple[int, Mapping[str, Any]] | None:
    """The position and manifest entry of layer ``key`` in one image, or None."""
    for position, entry in enumerate(image.get("layers") or []):
        if entry.get("name") == key:
            return position, entry
    return None
