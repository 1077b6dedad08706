"""The page of ``actviz optimize`` (``optimize.html``), from ``optimize.json`` alone, and the
links between it and the ``top-images`` pages of the same channels.

:func:`build_optimize_report` returns ``relative path -> bytes`` for ``actviz.output`` to
write; :func:`optimized_images` reads what a top-images channel page links to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actviz.report.blocks import MetaRow, channel_page, run_warnings, weights_banner
from actviz.report.markup import render

__all__ = ["INDEX", "build_optimize_report", "optimized_images"]

INDEX = "optimize.html"
_JSON = "optimize.json"
_EXAMPLES_JSON = "top-images.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def optimized_images(out: Path | None) -> dict[tuple[str, int], str]:
    """``(layer, channel) -> optimized PNG`` (relative to ``out``) from the ``optimize.json``
    in ``out``; empty when there is none."""
    doc = _read(out / _JSON) if out is not None else None
    if doc is None:
        return {}
    found = {}
    for layer in doc.get("layers") or []:
        for channel in layer.get("channels") or []:
            found[(str(layer.get("name")), int(channel["channel"]))] = str(channel["png"])
    return found


def _top_images_pages(out: Path | None) -> dict[tuple[str, int], str]:
    """``(layer, channel) -> top-images channel page`` in ``out``, when it has them."""
    doc = _read(out / _EXAMPLES_JSON) if out is not None else None
    if doc is None or out is None:
        return {}
    pages = {}
    for i, layer in enumerate(doc.get("layers") or []):
        folder = layer.get("folder") or f"top-images/{i:02d}"
        for channel in layer.get("channels") or []:
            page = f"{folder}/{channel_page(channel, layer)}"
            pages[(str(layer.get("name")), int(channel["channel"]))] = page
    return pages


def build_optimize_report(doc: Mapping[str, Any], out: Path | None = None) -> dict[str, bytes]:
    """Build the page of an optimize run.

    Args:
        doc: What ``optimize.json`` holds.
        out: The output folder, to find ``top-images`` pages of the same channels.

    Returns:
        Paths relative to the output folder -> file content.
    """
    examples = _top_images_pages(out)
    settings = doc.get("settings") or {}
    layers = []
    for layer in doc.get("layers") or []:
        rows = [
            {**c, "examples": examples.get((str(layer.get("name")), int(c["channel"])))}
            for c in layer.get("channels") or []
        ]
        layers.append({**layer, "rows": rows})
    what = {
        "channel": "channel's mean",
        "neuron": "channel's centre unit",
        "logit": "class logit",
        "output": "output dimension",
    }.get(str(settings.get("objective")), "objective")
    weights = doc.get("weights") or {}
    meta = [
        MetaRow("model", doc.get("model"), code=True),
        MetaRow("weights", weights.get("name") or weights.get("source")),
        MetaRow("device", doc.get("device")),
        MetaRow("layers", settings.get("layers") or "default", code=True),
        MetaRow(
            "optimization",
            f"{settings.get('steps')} Adam steps (lr {settings.get('lr')}) at "
            f"{settings.get('size')} px, seed {settings.get('seed')}",
        ),
    ]
    has_examples = out is not None and (out / "top-images.html").is_file()
    page = render(
        "optimize.html",
        doc=doc,
        banner=weights_banner(doc),
        warnings=run_warnings(doc),
        meta=meta,
        layers=layers,
        what=what,
        top_images="top-images.html" if has_examples else None,
    )
    return {INDEX: page}
