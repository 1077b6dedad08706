"""What ablate removes, as coordinates of the layer's output: units (``--units``: a channel at
every position, a ViT's class token included), the component along a direction
(``--direction``), or a sparse dictionary's feature codes (``--sae --features``).

Each kind reads its coordinates' values from a batch of outputs (``(B, J, *positions)``) and
puts new values back. Units are set in place; a direction and features are edited by adding
the change of their values times their direction, so that everything else (for a dictionary,
its reconstruction error) passes through unchanged: values that do not change leave the output
as it was, bit for bit. Each kind also gives its write directions in channel space, which the
linear-readout shortcut multiplies by the classifier's weights.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.errors import UsageError
from actviz.top_images.plan import as_maps, positions

if TYPE_CHECKING:
    import torch

    from actviz.dictionary import SparseDictionary
    from actviz.top_images.plan import LayerPlan

__all__ = [
    "Coordinates",
    "Direction",
    "Features",
    "LayerGeometry",
    "Units",
    "load_direction",
    "parse_indices",
]


@dataclass(frozen=True)
class LayerGeometry:
    """How the ablated layer's output is laid out.

    Attributes:
        name: The module.
        shape: One image's output shape.
        axis: The channel axis of a batch of outputs (1, or the last for channels-last
            blocks and tokens).
        plan: The output read as ``(C, H, W)`` maps (top-images' plan): where a dictionary's
            vectors come from.
    """

    name: str
    shape: tuple[int, ...]
    axis: int
    plan: LayerPlan

    @property
    def channels(self) -> int:
        return int(self.shape[self.axis - 1])

    @property
    def pools(self) -> bool:
        """Whether averaging every position of a channel gives the layer's pooled features:
        a channels-first map or a vector (the linear-readout shortcut's condition)."""
        return self.axis == 1 and self.plan.mode == "nchw"

    def describe(self) -> dict[str, Any]:
        return {
            "module": self.name,
            "output_shape": list(self.shape),
            "channels": self.channels,
            "channel_axis": self.axis,
            "layout": self.plan.layout,
        }


class Coordinates(abc.ABC):
    """The coordinates of the layer's output that ablations change."""

    kind: str
    labels: list[str]
    """Each coordinate's name: a unit's number, ``direction``, a feature's number."""

    @property
    def count(self) -> int:
        return len(self.labels)

    @abc.abstractmethod
    def read(self, a: torch.Tensor) -> torch.Tensor:
        """``(B, J, *positions)`` float32 values of every coordinate in a batch of outputs."""

    @abc.abstractmethod
    def put(
        self, a: torch.Tensor, new: torch.Tensor, old: torch.Tensor, changed: torch.Tensor
    ) -> torch.Tensor:
        """A copy of ``a`` whose coordinates where ``changed`` (``(J,)`` bool) hold ``new``
        instead of ``old`` (both as :meth:`read` gives them)."""

    @abc.abstractmethod
    def directions(self) -> torch.Tensor:
        """``(J, C)``: how one unit of each coordinate moves the channels."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """What the JSON records of them."""


def _channels_first(a: torch.Tensor, axis: int) -> torch.Tensor:
    return a if axis == 1 else a.movedim(axis, 1)


class Units(Coordinates):
    """Channels of the output, each at every position."""

    kind = "units"

    def __init__(self, units: Sequence[int], geometry: LayerGeometry) -> None:
        channels = geometry.channels
        outside = [u for u in units if not 0 <= u < channels]
        if outside:
            raise UsageError(
                f"--units {outside[0]} is outside {geometry.name}'s {channels} channels "
                f"(0-{channels - 1}); pick units in that range"
            )
        self.units = list(units)
        self.labels = [str(u) for u in units]
        self.axis = geometry.axis
        self.channels = channels

    def read(self, a: torch.Tensor) -> torch.Tensor:
        index = _index(self.units, a.device)
        return _channels_first(a, self.axis).index_select(1, index).float()

    def put(
        self, a: torch.Tensor, new: torch.Tensor, old: torch.Tensor, changed: torch.Tensor
    ) -> torch.Tensor:
        out = a.clone()
        view = _channels_first(out, self.axis)
        picked = changed.nonzero().flatten().to(a.device)
        index = _index(self.units, a.device)[picked]
        view[:, index] = new.index_select(1, picked.to(new.device)).to(a.dtype)
        return out

    def directions(self) -> torch.Tensor:
        import torch

        return torch.eye(self.channels)[self.units]

    def describe(self) -> dict[str, Any]:
        return {"kind": "units", "units": self.units}


class Direction(Coordinates):
    """The component along one direction ``d`` of the channels: the value ``a.d / d.d`` at
    each position, edited by adding its change times ``d``."""

    kind = "direction"

    def __init__(self, vector: torch.Tensor, geometry: LayerGeometry, source: Path) -> None:
        self.vector = vector.float()
        self.axis = geometry.axis
        self.labels = ["direction"]
        self.source = source
        self.norm2 = float((self.vector * self.vector).sum())

    def _shaped(self, a: torch.Tensor) -> torch.Tensor:
        d = self.vector.to(a.device)
        return d.reshape(1, -1, *([1] * (a.ndim - 2)))

    def read(self, a: torch.Tensor) -> torch.Tensor:
        view = _channels_first(a, self.axis).float()
        return (view * self._shaped(a)).sum(dim=1, keepdim=True) / self.norm2

    def put(
        self, a: torch.Tensor, new: torch.Tensor, old: torch.Tensor, changed: torch.Tensor
    ) -> torch.Tensor:
        if not bool(changed[0]):
            return a.clone()
        step = (new - old).to(a.device) * self._shaped(a)
        moved = step if self.axis == 1 else step.movedim(1, self.axis)
        return a + moved.to(a.dtype)

    def directions(self) -> torch.Tensor:
        return self.vector[None].cpu()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "direction",
            "file": str(self.source),
            "norm": self.norm2**0.5,
        }


class Features(Coordinates):
    """Codes of a sparse dictionary's features at each position its vectors are read from
    (as ``run --sae`` splices it: a ViT's class token is not one of them). The output is
    edited by adding the change of the codes decoded, so the dictionary's reconstruction
    error passes through unchanged and ablating nothing changes nothing."""

    kind = "features"

    def __init__(
        self, features: Sequence[int], sae: SparseDictionary, geometry: LayerGeometry
    ) -> None:
        outside = [f for f in features if not 0 <= f < sae.features]
        if outside:
            raise UsageError(
                f"--features {outside[0]} is outside the dictionary's {sae.features} features "
                f"(0-{sae.features - 1})"
            )
        self.features = list(features)
        self.labels = [str(f) for f in features]
        self.sae = sae
        self.plan = geometry.plan
        self._where: torch.Tensor | None = None

    def read(self, a: torch.Tensor) -> torch.Tensor:

        codes = self.sae.encode_maps(as_maps(a, self.plan).float())
        return codes.index_select(1, _index(self.features, codes.device))

    def put(
        self, a: torch.Tensor, new: torch.Tensor, old: torch.Tensor, changed: torch.Tensor
    ) -> torch.Tensor:
        import torch

        if self._where is None or self._where.device != a.device:
            self._where = positions(self.plan, a.device)
        step = (new - old) * changed.to(new.device, new.dtype).reshape(1, -1, 1, 1)
        delta = torch.einsum("bjhw,jc->bchw", step, self.directions().to(step.device))
        flat = a.reshape(a.shape[0], -1).clone()
        flat.index_add_(1, self._where, delta.reshape(a.shape[0], -1).to(a.dtype))
        return flat.reshape(a.shape)

    def directions(self) -> torch.Tensor:
        index = _index(self.features, self.sae.w_dec.device)
        return (self.sae.w_dec.index_select(0, index) * self.sae.scale).float().cpu()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "features",
            "features": self.features,
            "dictionary": str(self.sae.file) if self.sae.file is not None else None,
            "dictionary_features": self.sae.features,
            "k": self.sae.k,
        }


def _index(values: Sequence[int], device: Any) -> torch.Tensor:
    import torch

    return torch.as_tensor(list(values), dtype=torch.long, device=device)


def parse_indices(text: str, option: str) -> list[int]:
    """``17,42`` and ranges ``0-63`` as sorted indices, each once.

    Raises:
        UsageError: For anything else than non-negative integers and ranges.
    """
    found: set[int] = set()
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        low, dash, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise UsageError(
                f"{option} takes numbers and ranges, e.g. 17,42 or 0-63; got '{part}'"
            ) from None
        if first < 0 or last < first:
            raise UsageError(f"{option} '{part}': give a range low-high with 0 <= low <= high")
        found.update(range(first, last + 1))
    if not found:
        raise UsageError(f"{option} names nothing; e.g. {option} 17,42 or 0-63")
    return sorted(found)


def load_direction(path: Path, channels: int, layer: str) -> torch.Tensor:
    """``--direction``: a vector of the layer's channel length from ``.npy`` (or a
    ``.safetensors`` file holding one tensor).

    Raises:
        UsageError: For a file that cannot be read, another shape, or a zero vector.
    """
    import torch

    expected = f"a vector of {layer}'s {channels} channels, shape ({channels},)"
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors.numpy import load_file

            tensors = load_file(str(path))
            if len(tensors) != 1:
                raise UsageError(
                    f"--direction {path} holds {len(tensors)} tensors; it must hold one, {expected}"
                )
            array = next(iter(tensors.values()))
        else:
            array = np.load(path, allow_pickle=False)
    except UsageError:
        raise
    except FileNotFoundError:
        raise UsageError(f"--direction {path}: no such file") from None
    except Exception as exc:  # numpy and safetensors raise several kinds for a bad file
        raise UsageError(
            f"--direction {path} cannot be read ({type(exc).__name__}: {exc}); save "
            f"{expected} with numpy.save"
        ) from None
    vector = np.asarray(array, dtype=np.float64)
    if vector.ndim == 2 and 1 in vector.shape:
        vector = vector.reshape(-1)
    if vector.shape != (channels,):
        raise UsageError(
            f"--direction {path} has shape {tuple(np.shape(array))}; ablate at {layer} "
            f"expects {expected}"
        )
    if not np.all(np.isfinite(vector)) or not np.any(vector):
        raise UsageError(f"--direction {path} is zero or not finite: it names no direction")
    return torch.from_numpy(vector.astype(np.float32))
