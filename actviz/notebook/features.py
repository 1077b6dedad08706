"""``actviz.browse`` on a sparse dictionary (``actviz sae``'s folder, its result, or
``actviz.load_dictionary``'s dictionary): the features instead of the channels, each with the
figures of its page (density, images, strength, peak, stability, classes) and its top images.

Read from the files ``actviz sae`` wrote (``sae.json``, ``sae-features/features.json``,
``top-images.json``); no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from actviz.cards import thumb_from_file
from actviz.errors import UsageError
from actviz.notebook.tops import MAX_CHANNELS, top_images

__all__ = ["DictionaryData", "dictionary_folder"]

_JSON = "sae.json"
_FEATURES = "sae-features/features.json"
_THUMB = (48, 48)
_SHEET = (480, 480)


def dictionary_folder(source: Any) -> Path | None:
    """The ``actviz sae`` folder ``source`` stands for, or None: a dictionary loaded from a
    file, an ``SaeResult``, ``sae.json``/``sae.safetensors``/``sae.html``, or a folder with
    ``sae.json`` and no run in it (a folder with both: pass its ``sae.json``)."""
    file = getattr(source, "file", None)
    if isinstance(file, Path) and file.suffix == ".safetensors":
        return file.parent  # load_dictionary's dictionary, or the SaeResult
    if not isinstance(source, str | Path):
        return None
    path = Path(source)
    if path.is_file() and path.name in (_JSON, "sae.safetensors", "sae.html"):
        return path.parent
    if path.is_dir() and (path / _JSON).is_file() and not (path / "manifest.json").is_file():
        return path
    return None


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class DictionaryData:
    """A browser's data from an ``actviz sae`` folder: one layer (the dictionary's), whose
    strip is its features (each one's thumbnail: its top image)."""

    unit = "features"

    def __init__(self, folder: Path) -> None:
        doc = _read(folder / _JSON)
        if not isinstance(doc, dict):
            raise UsageError(f"no sparse dictionary in {folder} (no readable {_JSON})")
        self.folder = folder
        self._doc = doc
        pages = _read(folder / _FEATURES)
        self._features: list[dict[str, Any]] = (pages or {}).get("features") or []
        self._pages: dict[str, Any] = pages or {}
        tops = _read(folder / "top-images.json")
        self._tops = tops if isinstance(tops, dict) else None
        self._layer = str((doc.get("layer") or {}).get("key", "?"))
        self._first = _first_tops(self._tops, self._layer)
        self._shown = self._features[:MAX_CHANNELS]
        self._thumbs: dict[str, Any] = {}
        self.source = f"{doc.get('model', '?')} sparse dictionary in {folder.name}"

    def layers(self) -> list[dict[str, Any]]:
        features, channels = self._doc.get("features"), self._doc.get("channels")
        return [
            {"key": self._layer, "type": "features", "shape": f"{features} of {channels} channels"}
        ]

    def _top(self, feature: int) -> list[dict[str, Any]]:
        return top_images(self._tops, self._layer, feature)

    def _thumb(self, path: str) -> Any:
        if path not in self._thumbs:
            self._thumbs[path] = thumb_from_file(path, path, _THUMB)
        return self._thumbs[path]

    def channels(self, layer: str) -> tuple[list[dict[str, Any]], str]:
        if not self._features:
            return [], (
                "no feature pages in this folder (actviz sae ran with --no-pages): "
                "run it again without --no-pages to browse its features"
            )
        strip = []
        for row in self._shown:
            f = int(row["feature"])
            first = self._first.get(f)
            thumb = self._thumb(first) if first else None
            strip.append(
                {
                    "index": f,
                    "uri": thumb.uri if thumb else "",
                    "width": thumb.width if thumb else _THUMB[0],
                    "height": thumb.height if thumb else _THUMB[1],
                    "title": f"feature {f}: density {row['density']:.3%}, images "
                    f"{row['images']:.0%}",
                }
            )
        more = (
            f"the first {len(self._shown)} of {len(self._features)} features"
            if len(self._shown) < len(self._features)
            else ""
        )
        banner = self._pages.get("random_weights")
        return strip, "; ".join(part for part in (banner, more) if part)

    def detail(self, layer: str, channel: int) -> dict[str, Any]:
        if channel < 0:
            metrics = self._doc.get("metrics") or {}
            keys = ("fve", "l0", "dead_share", "dense_share", "top1_changed_share")
            stats = {f"held-out {k}": metrics.get(k) for k in keys}
            stable = self._doc.get("stability") or {}
            stats["stability mean"] = stable.get("mean")
            return {
                "title": self._pages.get("summary") or f"{layer}: sparse dictionary",
                "uri": "",
                "width": 0,
                "stats": {k: v for k, v in stats.items() if v is not None},
                "top": [],
            }
        row = next((r for r in self._features if r["feature"] == channel), None)
        if row is None:
            return {}
        sheet = thumb_from_file(self.folder / row["sheet"], row["sheet"], _SHEET)
        classes = ", ".join(f"{name} ({share:.0%})" for name, share in row.get("classes") or [])
        stats = {
            "density (share of vectors)": row["density"],
            "images it fires on (share)": row["images"],
            "strength (mean where active)": row["strength"],
            "peak": row["peak"],
            "stability across seeds": row.get("stability"),
            "classes where it fires": classes or None,
            "page": row["page"],
        }
        return {
            "title": f"{layer}  feature {channel}  (over the whole folder: "
            f"{self._pages.get('images', '?')} images)",
            "uri": sheet.uri if sheet else "",
            "width": sheet.width if sheet else 0,
            "stats": {k: v for k, v in stats.items() if v is not None},
            "top": self._top(channel),
        }


def _first_tops(tops: dict[str, Any] | None, layer: str) -> dict[int, str]:
    """Each feature's top image, from the top-images run of the dictionary."""
    for entry in (tops or {}).get("layers") or []:
        if entry.get("name") == layer:
            return {
                int(found["channel"]): str(found["top"][0].get("path"))
                for found in entry.get("channels") or []
                if found.get("top")
            }
    return {}
