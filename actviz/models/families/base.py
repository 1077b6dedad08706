"""What a model family is: how a decoded batch reaches the model, what it needs as input, what
its output means, and what makes sense for it.

A family is one frozen row of :data:`actviz.models.families.FAMILIES`. Everything that differs
between "an image batch in, class scores out" and a detector, a video model, an optical-flow
model or a quantized model is answered here, so the commands ask the row instead of testing
model types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from actviz.models.families.inputs import IMAGES, Inputs
from actviz.models.segmentation import output_classes as classes

if TYPE_CHECKING:
    from torch import nn

    from actviz.models.preprocessing import Preprocessing

__all__ = ["Family", "plain_call", "same_preprocessing"]


def plain_call(module: Any, x: Any) -> Any:
    """``module(x)``: one stacked ``(B, C, H, W)`` batch in, the model's output back."""
    return module(x)


def same_preprocessing(preprocess: Preprocessing, module: nn.Module) -> Preprocessing:
    """The source's preprocessing, as it is (the weights' transforms)."""
    return preprocess


def no_kwargs(input_size: tuple[int, int] | None) -> dict[str, Any]:
    """No builder arguments of the family's own."""
    return {}


def no_selector(module: nn.Module) -> str | None:
    """No default selector of the family's own: the architecture's."""
    return None


def output_classes(module: nn.Module) -> int | None:
    """How many classes the model scores: a segmentation head's output channels, else the
    classifier's outputs (:func:`actviz.models.segmentation.output_classes`)."""

    return classes(module)


def never(module: nn.Module) -> bool:
    """A family no module is detected as (a family only named)."""
    return False


@dataclass(frozen=True)
class Family:
    """One model family: a row of :data:`actviz.models.families.FAMILIES`.

    Attributes:
        key: ``classification``, ``segmentation``, ``detection``, ``video``,
            ``optical_flow`` or ``quantized``: the manifest and ``actviz models --family``
            use it.
        label: How ``actviz models`` shows it (``optical-flow``).
        torchvision: The ``torchvision.models`` submodule whose registry names are this
            family's (``detection``, ``quantization``); ``""`` for the top level
            (classification); None when no torchvision name is (a family only detected).
        claims: True for a module of this family (a user's own model, a module object);
            the table asks the rows in order and the first that claims a module wins.
        call: How a decoded batch (a ``(B, C, H, W)`` tensor from the loader) is fed to the
            model: ``module(x)``, a detector's list of images, ...
        preprocessing: The preprocessing the family needs, from the source's (the weights'
            transforms) and the built module: a detector takes 0..1 images and resizes and
            pads them itself.
        classifies: The output is ``(B, classes)`` scores: top-k predictions, the class
            targets of gradients and of Grad-CAM.
        refused: None when ``run`` and ``stats`` take the family's models; otherwise one
            line saying why not (``list-layers`` and ``actviz models`` still do).
        gradients: None when gradients and Grad-CAM of a class make sense; otherwise why not.
        cpu_only: None when the model runs on any device; otherwise why it runs on the CPU
            only (``--device cuda`` is then a usage error).
        commands: Command name -> why that command makes no sense for the family.
        meta: None when ``list-layers`` can build the model on the meta device; otherwise
            why it is built (and run once) on the CPU instead.
        meta_stops: Why a trace on the meta device stops before the end of the forward (a
            detector's boxes have data-dependent shapes); ``list-layers`` then lists the
            modules after that point without shapes and says so. None: it runs to the end.
        builder_kwargs: Extra arguments for torchvision's builders of the family, given
            ``--input-size`` (None without it): ``quantize=True`` and the CPU's engine for
            quantized models, a detector's ``min_size`` and ``max_size``.
        outputs: How the family's output is read, in one line (the manifest and the docs).
        selector: The default ``--layers`` for a model of the family; None leaves it to the
            architecture (:func:`actviz.models.default_selector`).
        classes: How many classes a model of the family scores (its weights' category
            list must have as many names to be used); None when it does not say.
        inputs: What its models take (:data:`~actviz.models.families.inputs.IMAGES`,
            ``CLIPS``, ``PAIRS``): how a command finds them among its paths, and what
            progress bars and summaries call them.
        one_size: How a user gets maps of one size from images of several shapes, as the
            messages advise: ``--input-size`` crops every image to one size, but a detector
            resizes each image itself, keeping its aspect ratio.
        readouts: Patterns (``fnmatch``) of the modules whose outputs are scores, not a
            signal path (a detector's objectness logits and box offsets): the anomaly
            flags judge them neither dead nor vanishing
            (:attr:`actviz.statistics.Thresholds.readouts`).
    """

    key: str
    label: str
    torchvision: str | None = None
    claims: Callable[[nn.Module], bool] = never
    call: Callable[[Any, Any], Any] = plain_call
    preprocessing: Callable[[Preprocessing, nn.Module], Preprocessing] = same_preprocessing
    classifies: bool = True
    refused: str | None = None
    gradients: str | None = None
    cpu_only: str | None = None
    commands: Mapping[str, str] = field(default_factory=dict)
    meta: str | None = None
    meta_stops: str | None = None
    builder_kwargs: Callable[[tuple[int, int] | None], dict[str, Any]] = no_kwargs
    outputs: str = ""
    selector: Callable[[nn.Module], str | None] = no_selector
    classes: Callable[[nn.Module], int | None] = output_classes
    inputs: Inputs = IMAGES
    readouts: tuple[str, ...] = ()
    one_size: str = "pass --input-size H,W to crop every image to one size"

    @property
    def runnable(self) -> bool:
        """Whether ``run`` and ``stats`` take the family's models."""
        return self.refused is None

    def refusal(self, command: str) -> str | None:
        """Why ``command`` makes no sense for this family, or None when it does."""
        if self.refused is not None and command not in ("list-layers", "models"):
            return self.refused
        return self.commands.get(command)

    def readouts_among(self, names: Iterable[str]) -> tuple[str, ...]:
        """The modules among ``names`` whose outputs are scores (:attr:`readouts`)."""

        return tuple(n for n in names if any(fnmatchcase(n, p) for p in self.readouts))

    def record(self) -> dict[str, Any]:
        """The family as the manifest records it."""
        return {"key": self.key, "outputs": self.outputs or None}
