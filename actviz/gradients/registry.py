"""Every map method in one table: the class activation maps drawn at a layer (``run --cam``) and
the attributions drawn at the input (``actviz attribute``), each a row with its name, its kind,
whether its values are signed, what it reads, and its function. ``run --cam-method``,
``cam-eval --methods`` and ``attribute --method`` look their names up here; nothing else
branches on a method's name.

A CAM row's function takes :class:`~actviz.gradients.methods.CamInputs` and returns raw
``(B, h, w)`` maps (before ReLU and scaling); an attribution row's takes an
:class:`~actviz.gradients.attribution.AttributionJob` and returns an
:class:`~actviz.gradients.attribution.Attribution`. Importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from actviz.errors import UsageError
from actviz.gradients import integrated, lrp, methods, rollout

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch
    from torch import nn

    from actviz.gradients.nchw import CamLayout

__all__ = [
    "DEFAULT_CAM",
    "MAP_METHODS",
    "MapKind",
    "MapMethod",
    "cam_method",
    "cam_title",
    "cam_word",
    "map_method",
    "map_title",
    "method_cams",
    "names",
    "raw_cam",
]

MapKind = Literal["cam", "attribution"]


@dataclass(frozen=True)
class MapMethod:
    """One map method.

    Attributes:
        name: How options take it (``gradcam++``, ``ig``).
        title: How pictures and tables show it (``Grad-CAM++``).
        kind: ``cam`` (a layer's maps, ``(B, h, w)``) or ``attribution`` (the input's).
        compute: Its function (see the module's docstring for what it takes).
        signed: Its values are signed (evidence for and against): drawn with a diverging
            colormap centred on 0, reduced over the input's channels by their sum.
        gradient: It reads a gradient of the class score (False: EigenCAM, Score-CAM,
            attention rollout).
        class_specific: Its map depends on the class (False: EigenCAM, attention rollout).
        runs_model: A CAM that runs the model again (Score-CAM): needs the model and input.
        axiom: What its record checks (``completeness``, ``conservation``, ``row sums``).
        extra: The actviz extra its library comes with (``lrp``: zennit); None: none.
        about: One line: what it computes.
        aliases: Further spellings options take (``gxi``).
        settings: The fields of :class:`~actviz.gradients.attribution.AttributionSettings`
            it reads: what its record keeps and a resumed run must share.
    """

    name: str
    title: str
    kind: MapKind
    compute: Callable[..., Any]
    signed: bool = False
    gradient: bool = True
    class_specific: bool = True
    runs_model: bool = False
    axiom: str | None = None
    extra: str | None = None
    about: str = ""
    aliases: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()


_ROWS = (
    MapMethod(
        "gradcam",
        "Grad-CAM",
        "cam",
        methods.gradcam_raw,
        about="each channel weighed by its mean gradient",
    ),
    MapMethod(
        "gradcam++",
        "Grad-CAM++",
        "cam",
        methods.gradcampp_raw,
        about="each channel weighed by its positive gradients, higher-order terms",
    ),
    MapMethod(
        "layercam",
        "LayerCAM",
        "cam",
        methods.layercam_raw,
        about="each position weighed by its positive gradient",
    ),
    MapMethod(
        "scorecam",
        "Score-CAM",
        "cam",
        methods.scorecam_raw,
        gradient=False,
        runs_model=True,
        about="each channel weighed by the class score of the input it masks",
    ),
    MapMethod(
        "eigencam",
        "EigenCAM",
        "cam",
        methods.eigencam_raw,
        gradient=False,
        class_specific=False,
        about="the activations' first principal component",
    ),
    MapMethod(
        "ig",
        "Integrated Gradients",
        "attribution",
        integrated.integrated_gradients,
        signed=True,
        axiom="completeness",
        about="the gradient integrated on the path from a baseline to the input",
        aliases=("integratedgradients",),
        settings=("steps", "integration", "baseline"),
    ),
    MapMethod(
        "smoothgrad",
        "SmoothGrad",
        "attribution",
        integrated.smoothgrad,
        about="the gradient averaged over noisy copies of the input",
        settings=("samples", "noise", "seed"),
    ),
    MapMethod(
        "gradxinput",
        "Gradient x Input",
        "attribution",
        integrated.gradient_x_input,
        signed=True,
        about="the gradient times the input",
        aliases=("inputxgradient", "gradientxinput", "gxi"),
    ),
    MapMethod(
        "lrp",
        "LRP",
        "attribution",
        lrp.lrp,
        signed=True,
        axiom="conservation",
        extra="lrp",
        about="layer-wise relevance propagation with zennit's rules (convolutional networks)",
        settings=("composite",),
    ),
    MapMethod(
        "rollout",
        "Attention rollout",
        "attribution",
        rollout.attention_rollout,
        gradient=False,
        class_specific=False,
        axiom="row sums",
        about="the product of every block's attention with the residual (vision transformers)",
        aliases=("attentionrollout",),
        settings=("head_fusion", "discard_ratio"),
    ),
    MapMethod(
        "grad-rollout",
        "Gradient rollout",
        "attribution",
        rollout.gradient_rollout,
        axiom="row sums",
        about="attention rollout of each block's attention weighed by its positive gradient",
        aliases=("gradientrollout", "gradattentionrollout"),
        settings=("discard_ratio",),
    ),
)

MAP_METHODS: dict[str, MapMethod] = {row.name: row for row in _ROWS}
"""Every map method by name, CAMs first, in the order options list them."""

DEFAULT_CAM = "gradcam"
"""The CAM ``run --cam`` draws unless ``--cam-method`` names another."""


def names(kind: MapKind | None = None) -> tuple[str, ...]:
    """The methods' names (of one ``kind``), in the table's order."""
    return tuple(row.name for row in _ROWS if kind is None or row.kind == kind)


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "").replace(" ", "")


_BY_KEY = {key: row for row in _ROWS for key in (_key(row.name), *row.aliases)}


def map_method(name: str, option: str = "--methods", *, kind: MapKind | None = None) -> MapMethod:
    """A method by name, forgiving case, dashes and underscores (``grad-cam++``,
    ``Score_CAM``, ``integrated_gradients``).

    Args:
        name: What the user typed.
        option: The option that took it, for the message.
        kind: Only methods of this kind (None: any).

    Raises:
        UsageError: For a name that is no method of ``kind``, listing them (and saying where
            a method of the other kind is drawn).
    """
    row = _BY_KEY.get(_key(name))
    if row is not None and (kind is None or row.kind == kind):
        return row
    message = f"{option} takes one of {', '.join(names(kind))}, not '{name}'"
    if row is not None and row.kind == "attribution":
        message += f" ({row.name} is drawn at the input: `actviz attribute --method {row.name}`)"
    elif row is not None:
        message += (
            f" ({row.name} is a class activation map: `actviz run --cam-method {row.name}`; "
            f"`actviz cam-eval -m {row.name},ig` compares the two kinds)"
        )
    raise UsageError(message)


def map_title(name: str) -> str:
    """``"Grad-CAM++"`` for ``gradcam++``: the name pictures and tables show (the name
    itself for one the table does not hold)."""
    row = MAP_METHODS.get(name)
    return row.title if row is not None else name


def cam_method(name: str, option: str = "--cam-method") -> str:
    """A CAM method's name, forgiving case, dashes and underscores (``grad-cam++``,
    ``Score_CAM``): :func:`map_method` of the CAM rows.

    Raises:
        UsageError: For a name that is not a CAM method, listing them.
    """
    return map_method(name, option, kind="cam").name


def cam_title(method: str) -> str:
    """``"Grad-CAM++"`` for ``gradcam++``: the name pictures and tables show."""
    return map_title(method)


def cam_word(method: str | None) -> str:
    """How a note on an all-zero map names its CAM: the default CAM by its title (a record
    that names no method drew it), any other by the name its option took."""
    return map_title(DEFAULT_CAM) if method is None or method == DEFAULT_CAM else method


def raw_cam(
    method: str,
    activation: torch.Tensor | npt.ArrayLike,
    gradient: torch.Tensor | npt.ArrayLike | None = None,
    *,
    layout: CamLayout = "nchw",
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
) -> torch.Tensor:
    """One gradient (or activation) method's map before ReLU and scaling, in float64.

    Args:
        method: ``gradcam``, ``gradcam++``, ``layercam`` or ``eigencam`` (Score-CAM needs the
            model: :func:`~actviz.gradients.methods.score_cam`).
        activation: A layer output, batched or not, laid out as ``layout`` (:func:`to_nchw`).
        gradient: The gradient of the class score with respect to it (not for ``eigencam``).

    Returns:
        ``(B, H, W)`` (or ``(H, W)``) float64 maps.

    Raises:
        ValueError: For mismatched shapes, a missing gradient or an unknown method.
    """
    row = MAP_METHODS.get(method)
    if row is None or row.kind != "cam" or row.runs_model:
        raise ValueError(f"unknown CAM method {method!r}: one of {', '.join(names('cam'))}")
    inputs = methods.CamInputs(activation, gradient, layout, grid, prefix_tokens)
    raw: torch.Tensor = row.compute(inputs)
    return raw


def method_cams(
    method: str,
    activation: torch.Tensor,
    gradient: torch.Tensor | None,
    *,
    layout: CamLayout = "nchw",
    grid: tuple[int, int] | None = None,
    prefix_tokens: int = 1,
    model: nn.Module | None = None,
    x: torch.Tensor | None = None,
    targets: Sequence[int] = (),
) -> torch.Tensor:
    """One CAM method's maps in ``[0, 1]``: :func:`~actviz.gradients.methods.scale_cams` of its
    row's function (Score-CAM's needs ``model``, ``x`` and ``targets``).

    Raises:
        ValueError: For a shape that does not fit the layout, or an unknown method.
    """
    row = MAP_METHODS.get(method)
    if row is None or row.kind != "cam":
        raise ValueError(f"unknown CAM method {method!r}: one of {', '.join(names('cam'))}")
    inputs = methods.CamInputs(activation, gradient, layout, grid, prefix_tokens, model, x, targets)
    return methods.scale_cams(row.compute(inputs))
