"""The options of ``actviz top-images``: one frozen dataclass built once and passed typed.

The model and execution groups are the ones ``run`` uses (:class:`~actviz.command.LoadOptions`,
:class:`~actviz.command.ExecutionOptions`); what is particular to dataset examples (how many
images per channel, how they are scored, what is drawn) lives here. Importing this module
imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actviz.command.options import ExecutionOptions, LoadOptions, check_choices
from actviz.errors import UsageError
from actviz.render import colormap_lut

__all__ = ["SCORES", "TopImagesOptions", "Score"]

Score = Literal["max", "mean"]
#: What ``--score`` accepts.
SCORES: tuple[str, ...] = ("max", "mean")

_MAX_K = 100
_MIN_TILE, _MAX_TILE = 32, 512


@dataclass(frozen=True)
class TopImagesOptions:
    """Everything ``actviz top-images`` takes besides the model and the inputs.

    Attributes:
        layers: Selector for the layers to rank images for; None picks the deepest layer of
            the architecture's default selection (the last convolution of a CNN, the last
            encoder block of a ViT, the last stage of Swin and ConvNeXt).
        out: Output folder; gets ``top-images.json``, ``top-images/`` and the report.
        k: Images kept per channel.
        score: How one image scores for a channel: ``max`` (the spatial maximum of the
            channel's map) or ``mean`` (its spatial mean).
        channels: Channels drawn in each layer's overview picture (0: all).
        tile: Side in pixels of one crop in the pictures.
        cmap: The matplotlib colormap of the heat maps blended over the crops.
        report: Write the HTML pages.
        png_compression: Deflate level 0-9 of the PNGs.
        sae: A dictionary ``actviz sae`` trained (``sae.safetensors``): its layer's images
            are ranked per feature instead of per channel.
        load: How the model is built (as for ``run``).
        execution: Batch size, decoding workers, resume and overwrite (as for ``run``).
    """

    layers: str | None = None
    out: Path = Path("actviz-out")
    k: int = 9
    score: Score = "max"
    channels: int = 16
    tile: int = 96
    cmap: str = "turbo"
    report: bool = True
    png_compression: int = 1
    sae: Path | None = None
    load: LoadOptions = field(default_factory=LoadOptions)
    execution: ExecutionOptions = field(default_factory=ExecutionOptions)

    def __post_init__(self) -> None:
        if not 1 <= self.k <= _MAX_K:
            raise UsageError(f"-k must be between 1 and {_MAX_K} images per channel, not {self.k}")
        check_choices(self)
        if self.channels < 0:
            raise UsageError(f"--channels must be 0 (all) or more, not {self.channels}")
        if not _MIN_TILE <= self.tile <= _MAX_TILE:
            raise UsageError(f"tile must be {_MIN_TILE} to {_MAX_TILE} pixels, not {self.tile}")
        if not 0 <= self.png_compression <= 9:
            raise UsageError("--png-compression must be between 0 and 9")

        try:
            colormap_lut(self.cmap)
        except ValueError as exc:
            raise UsageError(f"--cmap: {exc}") from None

    def settings(self) -> dict[str, Any]:
        """What an earlier, interrupted run must have used for ``--resume`` to continue it:
        everything that changes which images are kept (not how they are drawn)."""
        return {
            "k": self.k,
            "score": self.score,
            "in_chans": self.load.in_chans,
            **({"sae": str(self.sae)} if self.sae is not None else {}),
        }
