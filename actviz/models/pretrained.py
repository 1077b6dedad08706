"""torchvision's pretrained weights: which weights a name means, where they are cached, and
how they are fetched.

Weights are found through torchvision's weights API, but fetched and loaded by hand so that a
cached file is always read with ``torch.load(weights_only=True)`` and a missing network fails
at once with a message that says where to put the file.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from actviz.errors import UnknownWeightsError, WeightsError, first_line
from actviz.models.checkpoints import StateDict, unwrap_state_dict
from actviz.output import atomic_path

if TYPE_CHECKING:
    from torchvision.models import WeightsEnum

__all__ = [
    "cached_weights_path",
    "default_weights",
    "fetch_pretrained",
    "looks_like_enum_name",
    "pick_weights",
    "weight_names",
    "weights_enum",
    "weights_label",
]

_DOWNLOAD_TIMEOUT_S = 30.0
# torch.hub names cached files "<name>-<sha256 prefix>.<ext>"; the prefix is checked on download.
_HASH_PREFIX = re.compile(r"-([a-f0-9]{8,})\.")


def cached_weights_path(weights: WeightsEnum) -> Path:
    """Where torch.hub keeps (or would keep) the file for these pretrained weights."""
    import torch

    filename = Path(urlparse(weights.url).path).name
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    # torch.hub opens the URL without a timeout; a silently dropping firewall would hang.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def fetch_pretrained(weights: WeightsEnum) -> StateDict:
    """The state_dict of pretrained weights: from the cache, or downloaded into it."""
    import torch

    path = cached_weights_path(weights)
    if not path.exists():
        _download(weights, path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt cache file
        raise WeightsError(
            f"the cached weights file {path} cannot be read ({first_line(exc)}); delete it "
            "and run again to download it afresh"
        ) from exc
    return unwrap_state_dict(state, path)


def _download(weights: WeightsEnum, path: Path) -> None:
    """Download the weights into the cache, checking the hash prefix in their file name."""
    import torch

    match = _HASH_PREFIX.search(path.name)
    with atomic_path(path) as tmp:
        try:
            with _socket_timeout(_DOWNLOAD_TIMEOUT_S):
                torch.hub.download_url_to_file(
                    weights.url, str(tmp), hash_prefix=match.group(1) if match else None
                )
        except (OSError, RuntimeError) as exc:  # URLError is an OSError; bad hash is Runtime
            why = getattr(exc, "reason", None) or exc
            raise WeightsError(
                f"pretrained weights {weights_label(weights)} are not cached and could not be "
                f"downloaded ({why}); on a connected machine download {weights.url} and put it "
                f"at {path}, or use --weights none for random weights"
            ) from exc


def weights_enum(name: str) -> type[WeightsEnum] | None:
    from torchvision import models

    try:
        enum_cls: type[WeightsEnum] = models.get_model_weights(name)
    except (ValueError, KeyError):  # models without pretrained weights
        return None
    return enum_cls


def default_weights(enum_cls: type[WeightsEnum] | None) -> WeightsEnum | None:
    if enum_cls is None:
        return None
    default: WeightsEnum | None = getattr(enum_cls, "DEFAULT", None)
    return default


def looks_like_enum_name(spec: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?", spec) is not None


def pick_weights(
    name: str, enum_cls: type[WeightsEnum] | None, spec: str, *, required: bool
) -> WeightsEnum | None:
    if enum_cls is None:
        if required:
            raise WeightsError(
                f"torchvision has no pretrained weights for {name}; use --weights none "
                "or a checkpoint path"
            )
        return None
    if spec.lower() in ("auto", "default"):
        return default_weights(enum_cls)
    member = spec.split(".")[-1]
    for weights in enum_cls:
        if weights.name == member:
            return weights
    raise UnknownWeightsError(
        f"unknown weights '{spec}' for {name}; valid: {weight_names(enum_cls)}"
        "auto, default, none or a checkpoint path"
    )


def weight_names(enum_cls: type[WeightsEnum] | None) -> str:
    """``"IMAGENET1K_V1, IMAGENET1K_V2 (default), "``: each enum name, the default marked."""
    if enum_cls is None:
        return ""
    default = default_weights(enum_cls)
    return "".join(f"{w.name}{' (default)' if w is default else ''}, " for w in enum_cls)


def weights_label(weights: WeightsEnum) -> str:
    return f"{type(weights).__name__}.{weights.name}"
