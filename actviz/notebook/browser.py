"""``actviz.browse``: the channel browser's data, from a live capture (``actviz.show``, or a
mapping of captured tensors), a ``RunResult`` or a run's folder, with a top-images run's
channels beside it when one is given.

Each channel's thumbnail and large picture use the colormap the grids use (``viridis``, or
``RdBu_r`` centred on 0 for signed maps); its statistics are those of the report (a run's
layer statistics, the top-images run's per-channel scores).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from actviz.cards import Thumb, thumb_from_array, thumb_from_file
from actviz.cards.results import fmt
from actviz.errors import UsageError
from actviz.layouts import to_drawable
from actviz.notebook.features import DictionaryData, dictionary_folder
from actviz.notebook.inline import Look
from actviz.notebook.tops import MAX_CHANNELS, top_images
from actviz.notebook.widget import browser_widget
from actviz.render.palette import choose_cmap, colormap_lut
from actviz.run.sink import read_images

__all__ = ["LiveData", "RunData", "browse", "channel_rgb"]

_THUMB = (48, 48)
_LARGE = (288, 288)


def browse(source: Any, *, top: Any = None, layer: str | None = None, context: Any = None) -> Any:
    """A channel browser in the notebook: pick a layer, see its channels, click one to see it
    large with its statistics and, when ``top`` is given, its top images.

    Args:
        source: A :class:`~actviz.notebook.Look` (``actviz.show``), a mapping of capture keys to
            tensors (``actviz.capture``), a ``RunResult``, or a run's folder; or a sparse
            dictionary (``actviz.sae``'s result, ``actviz.load_dictionary``'s, or the folder or
            ``sae.json`` of ``actviz sae``): its features instead of channels, with their
            density, strength, stability and top images.
        top: A ``TopImagesResult`` or its folder: each channel's top images.
        layer: The layer shown first.
        context: For a mapping of tensors: ``actviz.layouts.layer_contexts`` of the model
            (token and channels-last layouts).

    Raises:
        UsageError: Without anywidget (``pip install 'actviz[notebook]'``), or for a source
            that is none of those.
    """

    folder = dictionary_folder(source)
    if folder is not None:
        return browser_widget(DictionaryData(folder), layer)
    tops = _top_document(top)
    if isinstance(source, str | Path) or hasattr(source, "manifest"):
        data: Any = RunData(Path(getattr(source, "out", source)), tops)
    elif isinstance(source, Look | Mapping):  # actviz.capture's recorder is a Mapping
        data = LiveData(source, tops, context)
    else:
        raise UsageError(
            "browse() takes actviz.show(...), a mapping of captured tensors, a RunResult, a "
            f"run's folder or a sparse dictionary, not {type(source).__name__}"
        )
    return browser_widget(data, layer)


def channel_rgb(maps: Any, cmap: str | None = None) -> Any:
    """``(C, H, W)`` maps as ``(C, H, W, 3)`` uint8 colours, each channel scaled to its own
    range (or centred on 0, for signed maps), with the grids' colormaps."""

    data = np.nan_to_num(np.asarray(maps, dtype=np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    signed = bool(data.min() < 0 < data.max())
    name, centred = choose_cmap(cmap, signed)
    lut = colormap_lut(name, 256)
    flat = data.reshape(data.shape[0], -1)
    if centred:
        scale = np.abs(flat).max(axis=1)[:, None, None]
        levels = (data / np.where(scale > 0, scale, 1) + 1) / 2
    else:
        lo = flat.min(axis=1)[:, None, None]
        span = flat.max(axis=1)[:, None, None] - lo
        levels = (data - lo) / np.where(span > 0, span, 1)
    return lut[np.clip((levels * 255).round(), 0, 255).astype(np.intp)]


def _enlarged(rgb: Any, box: tuple[int, int], label: str) -> Thumb:
    """A map enlarged (nearest, whole factors) to fill ``box``, or shrunk to fit it."""

    height, width = rgb.shape[:2]
    factor = max(1, min(box[0] // max(width, 1), box[1] // max(height, 1)))
    big = np.repeat(np.repeat(rgb, factor, axis=0), factor, axis=1)
    return thumb_from_array(big, label, box)


def _stats(values: Any) -> dict[str, Any]:

    data = np.asarray(values, dtype=np.float64)
    finite = data[np.isfinite(data)]
    if not finite.size:
        return {"values": int(data.size), "finite": 0}
    return {
        "min": float(finite.min()),
        "max": float(finite.max()),
        "mean": float(finite.mean()),
        "std": float(finite.std()),
        "zero_frac": float((finite == 0).mean()),
        "nonfinite": int(data.size - finite.size),
    }


def _top_document(top: Any) -> dict[str, Any] | None:
    """The ``top-images.json`` of a top-images run (its result or its folder)."""
    if top is None:
        return None
    document = getattr(top, "document", None)
    if isinstance(document, dict) and document:
        return document
    path = Path(getattr(top, "json", None) or top)
    if path.is_dir():
        path = path / "top-images.json"
    try:
        loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"no top-images.json at {path}; give the --out folder of top-images"
        ) from exc
    return loaded


def _top_stats(tops: dict[str, Any] | None, layer: str, channel: int) -> dict[str, Any]:
    for entry in (tops or {}).get("layers") or []:
        if entry.get("name") == layer:
            for found in entry.get("channels") or []:
                if found.get("channel") == channel:
                    keys = ("max_score", "mean_score", "active_frac", "dead")
                    return {f"top-images {k}": found.get(k) for k in keys}
    return {}


def _strip(maps: Any, cmap: str | None = None) -> list[dict[str, Any]]:
    colours = channel_rgb(maps[:MAX_CHANNELS], cmap)
    strip = []
    for index, rgb in enumerate(colours):
        thumb = _enlarged(rgb, _THUMB, f"channel {index}")
        strip.append(
            {"index": index, "uri": thumb.uri, "width": thumb.width, "height": thumb.height}
        )
    return strip


def _channel_detail(
    maps: Any, layer: str, channel: int, tops: Any, cmap: str | None = None
) -> dict[str, Any]:
    if not 0 <= channel < maps.shape[0]:
        return {}
    rgb = channel_rgb(maps[channel : channel + 1], cmap)[0]
    large = _enlarged(rgb, _LARGE, f"{layer} channel {channel}")
    stats = {**_stats(maps[channel]), **_top_stats(tops, layer, channel)}
    return {
        "title": f"{layer}  channel {channel}  ({maps.shape[1]} x {maps.shape[2]})",
        "uri": large.uri,
        "width": large.width,
        "stats": {k: v for k, v in stats.items() if v is not None},
        "top": top_images(tops, layer, channel),
    }


class LiveData:
    """A browser's data from captured tensors (an ``actviz.show`` result or a mapping)."""

    def __init__(self, source: Any, tops: dict[str, Any] | None, context: Any = None) -> None:
        if not isinstance(source, Mapping):  # a Look
            self._arrays = {c.key: c.tensor for c in source.captures if c.tensor is not None}
            self._batched = True
            self._contexts = dict(source.contexts)
            self._layout = source.options.layout
            self._cmap = source.options.cmap
            self.source = f"{source.model} (live)"
        else:
            self._arrays = dict(source)
            # actviz.capture's recorder holds batches: the browser shows the first image.
            self._batched = hasattr(source, "captures")
            self._contexts = dict(context or {})
            self._layout, self._cmap = "auto", None
            self.source = "captured tensors"
        self._tops = tops
        self._types = {c.key: c.module_type for c in getattr(source, "captures", ())}
        # actviz.capture hands back what the hooks saw: where a tensor's rows are not the
        # images (an LSTM's (layers, B, H) state), its first row is no image to draw.
        self._refused = {
            c.key: c.refused for c in getattr(source, "captures", ()) if c.refused is not None
        }
        self._maps: dict[str, tuple[Any, str | None]] = {}

    def _drawable(self, layer: str) -> tuple[Any, str | None]:

        if layer in self._refused:
            return None, self._refused[layer]
        if layer not in self._maps:
            value = self._arrays[layer]
            array = value.detach().cpu().float().numpy() if hasattr(value, "detach") else value
            array = np.asarray(array)
            if self._batched or (array.ndim >= 2 and array.shape[0] == 1):
                array = array[0]
            ctx = self._contexts.get(layer.split(":")[0])
            drawable = to_drawable(array, ctx, layout=self._layout)
            maps = drawable.array if drawable.kind == "maps" else None
            self._maps[layer] = (maps, None if maps is not None else drawable.note or "no maps")
        return self._maps[layer]

    def layers(self) -> list[dict[str, Any]]:
        return [
            {
                "key": key,
                "type": self._types.get(key, ""),
                "shape": "x".join(str(n) for n in getattr(v, "shape", ())),
            }
            for key, v in self._arrays.items()
        ]

    def channels(self, layer: str) -> tuple[list[dict[str, Any]], str]:
        maps, why = self._drawable(layer)
        if maps is None:
            return [], f"{layer} has no channel maps: {why}"
        shown = min(len(maps), MAX_CHANNELS)
        more = f"the first {shown} of {len(maps)} channels" if shown < len(maps) else ""
        return _strip(maps, self._cmap), more

    def detail(self, layer: str, channel: int) -> dict[str, Any]:
        maps, _ = self._drawable(layer)
        if maps is None or channel < 0:
            return {}
        return _channel_detail(maps, layer, channel, self._tops, self._cmap)


class RunData:
    """A browser's data from a run's folder: its layers, the first image's grids and, where
    the run saved tensors (``--save-tensors npy``), each channel."""

    def __init__(self, folder: Path, tops: dict[str, Any] | None) -> None:

        self.folder = folder
        manifest = folder / "manifest.json"
        try:
            self._manifest = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"no run in {folder} (no readable manifest.json)") from exc
        self._image = next((r for r in read_images(folder) if r.get("status") == "ok"), {})
        self._records = {r["name"]: r for r in self._image.get("layers") or []}
        stats = self._manifest.get("stats")
        self._stats: dict[str, Any] = {}
        if isinstance(stats, str):
            try:
                document = json.loads((folder / stats).read_text(encoding="utf-8"))
                self._stats = {x["name"]: x for x in (document.get("run") or {}).get("layers", [])}
            except (OSError, ValueError, KeyError):
                self._stats = {}
        self._tops = tops
        self.source = f"{self._manifest.get('model', '?')} run in {folder.name}"

    def layers(self) -> list[dict[str, Any]]:
        return [
            {
                "key": name,
                "type": self._records.get(name, {}).get("type", ""),
                "shape": "x".join(str(n) for n in self._records.get(name, {}).get("shape", [])),
            }
            for name in self._manifest.get("layers") or []
        ]

    def _maps(self, layer: str) -> Any:

        tensor = self._records.get(layer, {}).get("tensor")
        if not tensor or not str(tensor).endswith(".npy"):
            return None
        array = np.load(self.folder / tensor, allow_pickle=False)
        array = array[0] if array.ndim == 4 else array
        return array if array.ndim == 3 else None

    def channels(self, layer: str) -> tuple[list[dict[str, Any]], str]:
        maps = self._maps(layer)
        if maps is not None:
            return _strip(maps), ""
        return [], (
            "channels need the run's tensors (--save-tensors npy) or a live capture "
            "(actviz.show); the layer's grid of the first image is shown"
        )

    def detail(self, layer: str, channel: int) -> dict[str, Any]:
        maps = self._maps(layer)
        if maps is not None and channel >= 0:
            return _channel_detail(maps, layer, channel, self._tops)
        record = self._records.get(layer, {})
        grid = (
            thumb_from_file(self.folder / record["file"], layer, (640, 640))
            if record.get("file")
            else None
        )
        stats = {
            k: v
            for k, v in self._stats.get(layer, {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        return {
            "title": f"{layer}  (run statistics over {fmt(stats.get('images'))} images)",
            "uri": grid.uri if grid else "",
            "width": grid.width if grid else 0,
            "stats": stats,
            "top": top_images(self._tops, layer, channel) if channel >= 0 else [],
        }
