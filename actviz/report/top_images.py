"""The pages of ``actviz top-images``, from ``top-images.json`` alone.

:func:`build_top_images_report` returns ``relative path -> bytes`` for ``actviz.output`` to write:

- ``top-images.html``: the run (model, weights with the red banner when they are random,
  device, selector, k, score, images) and one row and overview per layer; it links to the run
  report ``index.html`` when one is in the same output folder.
- ``top-images/<NN>_<layer>/index.html``: the layer's overview and a table of its channels
  (activity, mean and highest score, the class their top images share), filterable.
- ``top-images/<NN>_<layer>/c<NNNN>.html``: one channel's contact sheet, health and top images.

The markup is the template ``templates/top_images.html`` on the report's page shell and
blocks; every name and path is escaped and every link percent-encoded, as in the run report.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actviz.report.blocks import MetaRow, channel_page, run_warnings, weights_banner
from actviz.report.markup import render
from actviz.report.optimize import optimized_images

__all__ = ["INDEX", "build_top_images_report", "channel_page"]

INDEX = "top-images.html"
_TEMPLATE = "top_images.html"


def build_top_images_report(doc: Mapping[str, Any], out: Path | None = None) -> dict[str, bytes]:
    """Build the pages of a top-images run.

    Args:
        doc: What ``top-images.json`` holds.
        out: The output folder, to find a run report (``index.html``) to link to.

    Returns:
        Paths relative to the output folder -> file content.
    """

    banner = weights_banner(doc)
    optimized = optimized_images(out)
    layers = list(doc.get("layers") or [])
    pages: dict[str, bytes] = {}
    score_word = "maximum" if doc.get("score") == "max" else "mean"
    rows = []
    for i, layer in enumerate(layers):
        folder = layer.get("folder") or f"top-images/{i:02d}"
        selective = _most_selective(layer)
        rows.append(
            {
                "name": layer["name"],
                "type": layer.get("type", ""),
                "maps": _maps(layer),
                "field": _field(layer),
                "channels": layer.get("channels_total", 0),
                "dead": layer.get("dead_channels", 0),
                "page": f"{folder}/index.html",
                "overview": layer.get("overview"),
                "selective": None
                if selective is None
                else {
                    "channel": selective["channel"],
                    "page": f"{folder}/{channel_page(selective, layer)}",
                    "text": _share(selective),
                },
            }
        )
        previous = f"../../{layers_page(layers, i - 1)}" if i > 0 else None
        next_ = f"../../{layers_page(layers, i + 1)}" if i + 1 < len(layers) else None
        pages[f"{folder}/index.html"] = _layer_page(layer, banner, previous, next_, score_word)
        channels = list(layer.get("channels") or [])
        for j, channel in enumerate(channels):
            pages[f"{folder}/{channel_page(channel, layer)}"] = render(
                _TEMPLATE,
                page="channel",
                base="../../",
                layer=layer,
                channel=channel,
                banner=banner,
                share=_share(channel),
                score_word=score_word,
                previous=channel_page(channels[j - 1], layer) if j > 0 else None,
                next=channel_page(channels[j + 1], layer) if j + 1 < len(channels) else None,
                optimized=optimized.get((str(layer["name"]), int(channel["channel"]))),
            )
    run_report = "index.html" if out is not None and (out / "index.html").is_file() else None
    pages[INDEX] = render(
        _TEMPLATE,
        page="index",
        base="",
        doc=doc,
        banner=banner,
        warnings=run_warnings(doc),
        meta=_meta(doc),
        layers=rows,
        unranked=list(doc.get("unranked") or []),
        failed=[{"path": f["path"], "error": f.get("reason")} for f in doc.get("failed") or []],
        skipped=list(doc.get("skipped") or []),
        failed_total=doc.get("failed_count"),
        skipped_total=doc.get("skipped_count"),
        run_report=run_report,
        score_words=score_word,
    )
    return pages


def layers_page(layers: list[Mapping[str, Any]], index: int) -> str:
    """The page of the ``index``-th layer, relative to the output folder."""
    layer = layers[index]
    return f"{layer.get('folder') or f'top-images/{index:02d}'}/index.html"


def _layer_page(
    layer: Mapping[str, Any],
    banner: Any,
    previous: str | None,
    next_: str | None,
    score_word: str,
) -> bytes:
    rows = []
    for channel in layer.get("channels") or []:
        top = channel.get("top") or []
        rows.append(
            {
                "channel": channel["channel"],
                "page": channel_page(channel, layer),
                "dead": channel.get("dead"),
                "active": channel.get("active_frac"),
                "mean": channel.get("mean_score"),
                "max": channel.get("max_score"),
                "share": _share(channel) or "",
                "best": Path(top[0]["path"]).name if top else "",
            }
        )
    return render(
        _TEMPLATE,
        page="layer",
        base="../../",
        index=INDEX,
        layer=layer,
        banner=banner,
        maps=_maps(layer),
        field=_field(layer),
        rows=rows,
        previous=previous,
        next=next_,
        score_word=score_word,
    )


def _most_selective(layer: Mapping[str, Any]) -> Mapping[str, Any] | None:
    best = None
    for channel in layer.get("channels") or []:
        chosen = channel.get("selectivity")
        if chosen and (best is None or chosen["count"] > best["selectivity"]["count"]):
            best = channel
    return best


def _share(channel: Mapping[str, Any]) -> str | None:
    chosen = channel.get("selectivity")
    if not chosen:
        return None
    name = chosen.get("label") or f"class {chosen.get('class')}"
    count = len(channel.get("top") or [])
    return f"{chosen.get('count')} of {count} top images predicted {name}"


def _maps(layer: Mapping[str, Any]) -> str:
    maps = layer.get("maps") or []
    if len(maps) != 3:
        return "?"
    return f"{maps[0]} maps of {maps[1]} x {maps[2]}"


def _field(layer: Mapping[str, Any]) -> str:
    field = layer.get("receptive_field") or {}
    text = f"{field.get('height', '?')} x {field.get('width', '?')} px"
    if field.get("whole_image"):
        text += " (whole image)"
    return text


def _meta(doc: Mapping[str, Any]) -> list[MetaRow]:
    weights = doc.get("weights") or {}
    failed = doc.get("failed_count", len(doc.get("failed") or []))
    return [
        MetaRow("model", doc.get("model"), code=True),
        MetaRow("weights", weights.get("name") or weights.get("source")),
        MetaRow("device", doc.get("device")),
        MetaRow("selector", doc.get("selector"), code=True),
        MetaRow("ranking", f"top {doc.get('k')} images per channel by the {doc.get('score')}"),
        MetaRow("input size", " x ".join(str(n) for n in doc.get("input_size") or [])),
        MetaRow("images", f"{doc.get('images')} scored, {failed} failed"),
        MetaRow("actviz", doc.get("actviz")),
    ]
