"""An image's notes on its gradient and CAM pictures: each all-zero gradient or map, and why,
with the layers that share a note named together (the terminal says each once; the manifest
keeps them all)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actviz.gradients.registry import cam_word
from actviz.results import ImageResult

__all__ = ["layer_notes", "notes_of"]


def layer_notes(result: ImageResult) -> list[str]:
    """One image's notes on its pictures: each all-zero gradient or Grad-CAM map, and why;
    layers with the same note are named together."""
    return notes_of(
        (layer.key, layer.gradient, layer.cam_note, layer.cam_method) for layer in result.layers
    )


def notes_of(
    layers: Iterable[
        tuple[str, Mapping[str, Any] | None, str | None]
        | tuple[str, Mapping[str, Any] | None, str | None, str | None]
    ],
) -> list[str]:
    """:func:`layer_notes` of ``(layer, gradient record, CAM note[, CAM method])`` tuples:
    what an image's record holds (the method, ``--cam-method``'s name, is Grad-CAM when
    left out)."""
    found: dict[str, list[str]] = {}
    for key, gradient, cam_note, *method in layers:
        gradient = gradient or {}
        why = gradient.get("note")
        cam = cam_word(method[0] if method else None)
        if gradient.get("zero") and why is not None and why == cam_note:
            messages = [f"the gradient and the {cam} map are all zero: {why}"]
        else:
            messages = []
            if gradient.get("zero"):
                messages.append("the gradient is all zero" + (f": {why}" if why else ""))
            if cam_note:
                messages.append(f"the {cam} map is all zero: {cam_note}")
        for message in messages:
            found.setdefault(message, []).append(key)
    return [f"{_names(keys)}: {message}" for message, keys in found.items()]


def _names(keys: list[str]) -> str:
    if len(keys) <= 3:
        return ", ".join(keys)
    return f"{keys[0]}, {keys[1]} and {len(keys) - 2} more layers"
