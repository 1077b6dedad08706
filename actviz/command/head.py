"""The head every command's JSON document starts with (``manifest.json``, ``top-images.json``,
``diff.json``, ``optimize.json``): the tool's version, the libraries' versions, when it was
made, the model (or models) and its weights, and the device."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from actviz._version import __version__
from actviz.command.session import versions_record, weights_record

if TYPE_CHECKING:
    from actviz.models import WeightsInfo

__all__ = ["json_head", "model_fields"]


def model_fields(
    model: str,
    info: Mapping[str, Any] | None,
    weights: WeightsInfo | Mapping[str, Any],
    warning: str | None = None,
) -> dict[str, Any]:
    """The ``model``, ``model_info`` and ``weights`` fields of a one-model document;
    ``weights`` is the model's :class:`~actviz.models.WeightsInfo` (recorded with
    ``warning``, see :func:`~actviz.command.session.weights_record`) or that record itself."""
    record = weights if isinstance(weights, Mapping) else weights_record(weights, warning)
    return {"model": model, "model_info": info, "weights": dict(record)}


def json_head(
    *,
    infos: Iterable[Mapping[str, Any] | None],
    device: str,
    model: Mapping[str, Any],
    created: bool = True,
    tool: bool = True,
) -> dict[str, Any]:
    """A document's first fields, in order: ``actviz`` (the version; ``tool``), ``versions``
    (torch, torchvision, Pillow and each model source's own library, from ``infos``: the
    models' ``LoadedModel.record()``), ``created`` (now, UTC; ``created``), the ``model``
    fields (:func:`model_fields`, or a comparison's models), then ``device``."""
    extra: dict[str, str] = {}
    for info in infos:
        extra.update((info or {}).get("versions") or {})
    head: dict[str, Any] = {"actviz": __version__} if tool else {}
    head["versions"] = versions_record(extra)
    if created:
        head["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {**head, **model, "device": device}
