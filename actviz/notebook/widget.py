"""The channel browser's widget: an anywidget (one ES module, ``browser.js``) whose state is
plain JSON: the layers, the chosen layer's channel thumbnails, the chosen channel's picture,
statistics and top images. The kernel computes each part when the user picks a layer or a
channel (:class:`BrowserData` answers), so only what is on screen travels.

anywidget is optional (``pip install 'actviz[notebook]'``); without it, making a browser
raises a one-line :class:`~actviz.errors.UsageError` with that command.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Protocol

from actviz.errors import import_extra

__all__ = ["ESM", "BrowserData", "browser_widget", "widget_class"]

#: The widget's front end, shipped as package data beside this module.
ESM = Path(__file__).with_name("browser.js")


class BrowserData(Protocol):
    """What a browser shows, computed on demand from a run, a folder or a live capture."""

    source: str

    def layers(self) -> list[dict[str, Any]]:
        """``{key, type, shape}`` per layer, in capture order."""

    def channels(self, layer: str) -> tuple[list[dict[str, Any]], str]:
        """``{index, uri, width, height}`` per channel thumbnail, and a message (why there
        are none, what is shown instead)."""

    def detail(self, layer: str, channel: int) -> dict[str, Any]:
        """``{title, uri, width, stats, top: [{uri, caption, label, width}]}`` of a channel,
        or of the layer itself for ``channel`` -1."""


@cache
def widget_class() -> type:
    """The widget class, made on first use (anywidget and traitlets are imported then)."""
    anywidget = import_extra("anywidget", "notebook", "the channel browser needs anywidget")
    import traitlets

    class ChannelBrowser(anywidget.AnyWidget):  # type: ignore[misc,name-defined]
        """actviz's channel browser (see :func:`actviz.browse`)."""

        _esm = ESM
        source = traitlets.Unicode("").tag(sync=True)
        layers = traitlets.List(traitlets.Dict()).tag(sync=True)
        layer = traitlets.Unicode("").tag(sync=True)
        channels = traitlets.List(traitlets.Dict()).tag(sync=True)
        channel = traitlets.Int(-1).tag(sync=True)
        detail = traitlets.Dict().tag(sync=True)
        message = traitlets.Unicode("").tag(sync=True)
        unit = traitlets.Unicode("channels").tag(sync=True)

        def __init__(self, data: BrowserData, layer: str | None = None) -> None:
            super().__init__()
            self._data = data
            self.source = data.source
            self.unit = getattr(data, "unit", "channels")
            self.layers = data.layers()
            self.observe(self._on_layer, names="layer")
            self.observe(self._on_channel, names="channel")
            first = layer or (self.layers[0]["key"] if self.layers else "")
            if first == self.layer:
                self._on_layer({"new": first})
            self.layer = first

        def _on_layer(self, change: dict[str, Any]) -> None:
            self.channels, self.message = self._data.channels(change["new"])
            self.channel = -1
            self.detail = self._data.detail(change["new"], -1)

        def _on_channel(self, change: dict[str, Any]) -> None:
            self.detail = self._data.detail(self.layer, int(change["new"]))

    return ChannelBrowser


def browser_widget(data: BrowserData, layer: str | None = None) -> Any:
    """A channel browser on ``data``, showing ``layer`` (default: the first)."""
    return widget_class()(data, layer)
