"""What the channel browser and the feature browser share: a channel's (or a feature's) top
images from a ``top-images.json``, as thumbnails."""

from __future__ import annotations

from typing import Any

from actviz.cards import thumb_from_file
from actviz.cards.results import fmt

__all__ = ["MAX_CHANNELS", "top_images"]

#: Channels (features) a layer's strip shows at most.
MAX_CHANNELS = 256


def top_images(tops: dict[str, Any] | None, layer: str, channel: int) -> list[dict[str, Any]]:
    """A channel's top images (their sheet, or each image file), for the detail view."""
    if tops is None:
        return []
    for entry in tops.get("layers") or []:
        if entry.get("name") != layer:
            continue
        for found in entry.get("channels") or []:
            if found.get("channel") != channel:
                continue
            out = []
            for rank, item in enumerate((found.get("top") or [])[:9]):
                thumb = thumb_from_file(item.get("path", ""), str(item.get("path")), (96, 96))
                if thumb is not None:
                    caption = f"#{rank + 1} {fmt(item.get('score'))}"
                    out.append(
                        {
                            "uri": thumb.uri,
                            "width": thumb.width,
                            "caption": caption,
                            "label": item.get("path"),
                        }
                    )
            return out
    return []
