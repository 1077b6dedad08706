"""What the report's blocks show, worked out from the manifest or ``stats.json`` alone.

The blocks themselves are macros of ``templates/blocks.html``; this module gives them the few
things that take more than a lookup: whether and why the random-weights banner shows, the run's
facts, the warnings worth a box, and lookups of rows and layers. Everything here is plain text
and data, never markup: the templates escape it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actviz._version import __version__

__all__ = [
    "Banner",
    "MetaRow",
    "by_name",
    "channel_page",
    "is_weights_warning",
    "made_rows",
    "run_meta",
    "run_warnings",
    "weights_banner",
]


@dataclass(frozen=True)
class Banner:
    """The random-weights banner: why the weights are random, and their seed when known."""

    reason: str
    seed: object = None


@dataclass(frozen=True)
class MetaRow:
    """One fact of the run; ``code`` shows it in a monospace font (names, selectors)."""

    label: str
    text: object  # None shows as nothing
    code: bool = False


# ---------------------------------------------------------------------- the run


def made_rows(record: Mapping[str, Any]) -> list[MetaRow]:
    """A page's last facts: the device its command ran on, and the actviz that made it,
    when."""
    return [
        MetaRow("device", str(record.get("device", "?"))),
        MetaRow("actviz", f"{record.get('actviz', '')}, {record.get('created', '')}"),
    ]


def weights_banner(manifest: Mapping[str, Any]) -> Banner | None:
    """The banner of a run drawn with random weights; None otherwise."""
    weights = manifest.get("weights") or {}
    if not weights.get("random"):
        return None
    reason = weights.get("reason") or (
        "--weights none was given"
        if weights.get("spec") == "none"
        else "no pretrained weights were found"
    )
    return Banner(str(reason), weights.get("seed"))


def run_warnings(manifest: Mapping[str, Any]) -> list[str]:
    """The run's warnings, as plain text, to show one box each."""
    warnings = [str(w) for w in manifest.get("warnings") or []]
    weights = manifest.get("weights") or {}
    if weights.get("random"):
        # The banner already says it, louder; the run's own warning would repeat it.
        warnings = [w for w in warnings if not is_weights_warning(w, weights)]
    return warnings


def is_weights_warning(warning: str, weights: Mapping[str, Any]) -> bool:
    """Whether ``warning`` is the one given because these weights came out random: the weights
    record names it; records written before it did are recognised by its opening words."""
    if "warning" in weights:
        return bool(warning == weights["warning"])
    return "RANDOM WEIGHTS" in warning


def run_meta(manifest: Mapping[str, Any], *, layers: int, drawn: int, failed: int) -> list[MetaRow]:
    """The run's facts: model, weights, device, selector, counts, versions, date, time.

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
        MetaRow("model", m.get("model", "?"), code=True),
        MetaRow("weights", weight_text),
        MetaRow("device", m.get("device", "?")),
        MetaRow("selector", m.get("selector", ""), code=True),
        MetaRow("layers", layers),
        MetaRow("images", f"{drawn} drawn, {failed} failed, {len(m.get('skipped', []))} skipped"),
        MetaRow("versions", ", ".join(f"{k} {v}" for k, v in versions.items())),
        MetaRow("created", m.get("created", "")),
    ]
    if m.get("seconds") is not None:
        rows.append(MetaRow("time", f"{m['seconds']} s"))
    return rows


# ---------------------------------------------------------------------- lookups


def by_name(rows: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """``stats.json`` layer rows by layer name."""
    return {str(r.get("name")): r for r in rows}


def channel_page(channel: Mapping[str, Any], layer: Mapping[str, Any]) -> str:
    """``c0042.html`` beside ``c0042.png``."""
    sheet = channel.get("sheet")
    if sheet:
        return Path(sheet).with_suffix(".html").name
    width = max(4, len(str(int(layer.get("channels_total", 1)) - 1)))
    return f"c{int(channel['channel']):0{width}d}.html"
