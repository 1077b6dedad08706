"""Layouts: how one image's slice of a layer output becomes something drawable.

A captured output is not always ``(C, H, W)``. Vision transformers emit token sequences
``(1 + H*W, C)``; Swin blocks and the LayerNorm/Linear pair inside a ConvNeXt block work
channels-last ``(H, W, C)``; MaxViT's attention runs on windows ``(windows, tokens, C)``;
heads emit vectors ``(C,)``. Each is turned into ``(C, H, W)`` maps or a ``(C,)`` vector on
purpose, and :class:`Drawable` says what was done, or why nothing can be drawn.

The decision uses what the model's structure says about each module
(:func:`~actviz.contexts.layer_contexts`: channel counts, ``Permute`` modules, patch grids,
window partitions) together with the output's shape. Numbers alone decide one thing only: a
square token count when the model names no patch grid, and the note then says the grid was
inferred. A truly ambiguous ``(C, H, W)``/``(H, W, C)`` shape is drawn channels-first with a
note saying so.

:class:`LayerContext`, :func:`layer_contexts` (from :mod:`actviz.contexts`) and
:func:`default_selector` (from :mod:`actviz.models.defaults`) are importable from here too, as
callers deciding a layout need them together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast, get_args

import numpy as np
import numpy.typing as npt

from actviz.contexts import LayerContext, layer_contexts
from actviz.errors import UsageError
from actviz.models.defaults import default_selector

if TYPE_CHECKING:
    import torch

__all__ = [
    "LAYOUTS",
    "Drawable",
    "LayerContext",
    "Layout",
    "default_selector",
    "layer_contexts",
    "plan_layout",
    "to_drawable",
]

Layout = Literal["auto", "nchw", "nhwc", "tokens"]
#: The values ``--layout`` accepts.
LAYOUTS: tuple[str, ...] = get_args(Layout)

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Drawable:
    """One image's slice of an output, ready for ``render_grid`` or ``render_vector``.

    Attributes:
        kind: ``"maps"`` for ``render_grid``, ``"vector"`` for ``render_vector``, ``"clip"``
            for ``render_time_strips`` (a video layer's ``(C, T, H, W)``), ``"none"`` when it
            cannot be drawn.
        array: ``(C, H, W)`` float32 for maps, ``(C,)`` float32 for a vector, None otherwise
            (and always None from :func:`plan_layout`).
        layout: What was decided: ``"nchw"``, ``"nhwc"``, ``"tokens"``, ``"windows"``,
            ``"vector"`` or ``"none"``.
        note: A short sentence for the picture's legend and the manifest (what was dropped,
            reshaped or inferred), or why nothing was drawn.
        prefix: For a token layer laid out as a patch grid, its prefix tokens (class,
            register, distillation) that the maps leave out, ``(C, tokens)`` float32; None
            otherwise (and always None from :func:`plan_layout`).
        prefix_note: ``note`` for a picture that shows ``prefix`` beside the maps.
    """

    kind: Literal["maps", "vector", "clip", "none"]
    array: FloatArray | None
    layout: str
    note: str | None
    prefix: FloatArray | None = None
    prefix_note: str | None = None

    @property
    def drawn_shape(self) -> tuple[int, ...] | None:
        """The shape of ``array`` when there is one."""
        return None if self.array is None else tuple(self.array.shape)


# --------------------------------------------------------------------------------------------
# Deciding


@dataclass(frozen=True)
class _Plan:
    kind: Literal["maps", "vector", "clip", "none"]
    layout: str
    note: str | None
    convert: Callable[[FloatArray], FloatArray] | None = None
    skip: int = 0
    """Leading prefix tokens the maps leave out (a token layout)."""
    skip_note: str | None = None
    """``note`` when those tokens are drawn apart from the maps."""


def plan_layout(
    shape: Sequence[int], ctx: LayerContext | None, *, layout: Layout = "auto"
) -> Drawable:
    """Decide how an output of this per-image shape would be drawn, from the shape alone.

    This is the decision :func:`to_drawable` makes, without touching values, so it works for
    shape-only captures (``keep_tensors=False``, the ``meta`` device) such as a layer listing.

    Args:
        shape: One image's shape, without the batch dimension.
        ctx: What is known about the module (from :func:`layer_contexts`), or None.
        layout: ``auto``, or a forced ``nchw``, ``nhwc`` or ``tokens``.

    Returns:
        A :class:`Drawable` whose ``array`` is None.

    Raises:
        UsageError: If ``layout`` is not one of ``auto``, ``nchw``, ``nhwc``, ``tokens``.
    """
    plan = _decide(tuple(int(n) for n in shape), ctx, _check_layout(layout))
    if plan.kind == "maps" and _single_pixel(plan, tuple(int(n) for n in shape)):
        return Drawable("vector", None, "vector", _POOLED_NOTE)
    if plan.kind == "clip" and plan.layout != "tokens" and math.prod(shape) == max(shape):
        return Drawable("vector", None, "vector", _POOLED_NOTE)  # pooled (C, 1, 1, 1)
    return Drawable(plan.kind, None, plan.layout, plan.note)


def to_drawable(
    sample: torch.Tensor | npt.ArrayLike,
    ctx: LayerContext | None,
    *,
    layout: Layout = "auto",
) -> Drawable:
    """Turn one image's slice of a layer output into maps, a vector, or a reason.

    Never raises for a shape or dtype it cannot draw: that gives ``kind="none"`` and the
    reason in ``note``, so every output is accounted for.

    Args:
        sample: One image's output, without the batch dimension (a tensor or an array).
        ctx: What is known about the module (from :func:`layer_contexts`), or None.
        layout: ``auto`` decides from the module and the shape; ``nchw``, ``nhwc`` and
            ``tokens`` force an interpretation (one that does not fit gives ``"none"``).

    Returns:
        The drawable array and what was decided.

    Raises:
        UsageError: If ``layout`` is not one of ``auto``, ``nchw``, ``nhwc``, ``tokens``.

    Example:
        >>> d = to_drawable(acts["encoder.layers.encoder_layer_0"][0], ctx)
        >>> d.kind, d.array.shape, d.note
        ('maps', (768, 14, 14), 'class token dropped; 196 patch tokens as 14 x 14')
    """
    chosen = _check_layout(layout)
    array, refusal = _as_float_array(sample)
    if array is None:
        return Drawable("none", None, "none", refusal)
    plan = _decide(tuple(array.shape), ctx, chosen)
    if plan.kind == "none":
        return Drawable("none", None, "none", plan.note)
    out = plan.convert(array) if plan.convert is not None else array
    kind = plan.kind
    if kind == "clip" and out.shape[1] == 1:  # one frame left: an ordinary grid
        out, kind = out[:, 0], "maps"
    if kind == "maps" and out.ndim == 3 and out.shape[1] * out.shape[2] == 1:
        # Per-channel scaling makes a 1 x 1 tile one flat colour: pooled features and
        # squeeze-excitation outputs say more as a strip of values.
        vector = np.ascontiguousarray(out.reshape(out.shape[0]), dtype=np.float32)
        return Drawable("vector", vector, "vector", _POOLED_NOTE)
    maps = np.ascontiguousarray(out, dtype=np.float32)
    if kind in ("maps", "clip") and plan.skip > 0:
        prefix = np.ascontiguousarray(array[: plan.skip].T, dtype=np.float32)
        return Drawable(kind, maps, plan.layout, plan.note, prefix, plan.skip_note)
    return Drawable(kind, maps, plan.layout, plan.note)


_POOLED_NOTE = "1 x 1 maps drawn as a strip of values"


def _single_pixel(plan: _Plan, shape: tuple[int, ...]) -> bool:
    """Whether a maps plan of this per-image shape has 1 x 1 maps (either layout)."""
    if len(shape) != 3:
        return False
    spatial = shape[1:] if plan.layout == "nchw" else shape[:2] if plan.layout == "nhwc" else None
    return spatial is not None and spatial[0] * spatial[1] == 1


def _check_layout(layout: str) -> Layout:
    if layout not in LAYOUTS:
        raise UsageError(f"unknown layout '{layout}'; use one of {', '.join(LAYOUTS)}")
    return cast(Layout, layout)


def _as_float_array(sample: object) -> tuple[FloatArray | None, str | None]:
    """The sample as a float32 array (a view when it already is one), or None and why not."""
    if hasattr(sample, "detach") and hasattr(sample, "is_floating_point"):
        tensor = sample.detach()
        dtype = str(tensor.dtype).removeprefix("torch.")
        if tensor.is_complex():
            return None, f"complex ({dtype}) output; draw its abs() or real part instead"
        if not tensor.is_floating_point():
            return None, _integer_reason(dtype)
        if tensor.device.type == "meta":
            return None, "a meta tensor has shapes but no values"
        return tensor.to(device="cpu").float().numpy(), None
    array = np.asarray(sample)
    if array.dtype.kind == "c":
        return None, f"complex ({array.dtype}) output; draw its abs() or real part instead"
    if array.dtype.kind in "biu":
        return None, _integer_reason(str(array.dtype))
    if array.dtype.kind != "f":
        return None, f"{array.dtype} output is not numeric"
    return array.astype(np.float32, copy=False), None


def _integer_reason(dtype: str) -> str:
    return f"{dtype} output holds indices or a mask, not activations; nothing to draw as maps"


def _decide(shape: tuple[int, ...], ctx: LayerContext | None, layout: Layout) -> _Plan:
    if 0 in shape:
        return _Plan("none", "none", f"empty output {shape}")
    if len(shape) == 0:
        return _Plan("none", "none", "one number per image (shape ()); nothing to draw")
    if len(shape) == 1:
        # A vector has no layout to force, so a forced layout still draws a run's head.
        return _Plan("vector", "vector", None)
    if len(shape) == 2:
        return _decide_2d(shape, ctx, layout)
    if len(shape) == 3:
        return _decide_3d(shape, ctx, layout)
    if len(shape) == 4 and (layout != "auto" or ctx is None or ctx.frames) and layout != "tokens":
        return _decide_clip(shape, ctx, layout)
    return _Plan(
        "none",
        "none",
        f"{len(shape)}-D output {shape} per image (a volume or sequence of maps); "
        "select a layer with (C, H, W) output",
    )


def _decide_3d(shape: tuple[int, ...], ctx: LayerContext | None, layout: Layout) -> _Plan:
    a, b, c = shape
    if layout == "nchw":
        return _Plan("maps", "nchw", None)
    if layout == "nhwc":
        return _nhwc(shape, "forced by --layout nhwc")
    if layout == "tokens":
        return _Plan(
            "none",
            "none",
            f"--layout tokens needs (N, C) tokens per image, not {shape}; "
            "use --layout auto, nchw or nhwc",
        )
    if ctx is None:
        return _Plan("maps", "nchw", None)
    if ctx.windows is not None:
        windowed = _windows(shape, ctx.windows)
        if windowed is not None:
            return windowed
    hint = ctx.channels_hint
    first = hint is not None and a == hint
    last = hint is not None and c == hint
    if last and not first:
        return _nhwc(shape, f"its last dimension is the module's {hint} channels")
    if first and not last:
        return _Plan("maps", "nchw", None)
    if ctx.channels_last is True:
        return _nhwc(shape, "the model works channels-last here")
    if ctx.channels_last is False:
        return _Plan("maps", "nchw", None)
    return _Plan(
        "maps",
        "nchw",
        f"layout of {shape} is ambiguous; drawn channels-first, use --layout nhwc "
        "if channels are last",
    )


def _decide_clip(shape: tuple[int, ...], ctx: LayerContext | None, layout: Layout) -> _Plan:
    """A video layer's ``(C, T, H, W)``, or channels-last ``(T, H, W, C)`` (Swin3D)."""
    hint = ctx.channels_hint if ctx is not None else None
    last = layout == "nhwc" or (
        layout == "auto"
        and (
            (hint is not None and shape[3] == hint != shape[0])
            or (hint not in (shape[0], shape[3]) and ctx is not None and ctx.channels_last is True)
        )
    )
    if not last:
        return _Plan("clip", "ncthw", None)
    t, h, w, c = shape
    note = f"channels-last {shape} drawn as {c} channels of {t} frames of {h} x {w}"
    return _Plan("clip", "nthwc", note, lambda x: x.transpose(3, 0, 1, 2))


def _clip_tokens(shape: tuple[int, ...], grid: tuple[int, int, int]) -> _Plan | None:
    """A video transformer's ``(1 + T*H*W, C)`` tokens (MViT) as ``(C, T, H, W)``, its class
    token apart; later stages pool H and W by powers of 2."""
    n, c = shape
    t = grid[0]
    for k in (1, 2, 4, 8, 16, 32):
        h, w = grid[1] // k, grid[2] // k
        if min(h, w) < 1 or n != 1 + t * h * w:
            continue

        def convert(x: FloatArray, h: int = h, w: int = w) -> FloatArray:
            return x[1:].reshape(t, h, w, c).transpose(3, 0, 1, 2)

        note = f"class token shown apart; {n - 1} tokens as {t} frames of {h} x {w}"
        return _Plan("clip", "tokens", note, convert, 1, note)
    return None


def _nhwc(shape: tuple[int, ...], why: str) -> _Plan:
    h, w, c = shape
    return _Plan(
        "maps",
        "nhwc",
        f"channels-last {shape} drawn as {c} maps of {h} x {w} ({why})",
        lambda x: x.transpose(2, 0, 1),
    )


def _windows(shape: tuple[int, ...], windows: tuple[int, int, int, bool]) -> _Plan | None:
    rows, cols, side, swapped = windows
    n_windows, n_tokens = (shape[1], shape[0]) if swapped else (shape[0], shape[1])
    if n_windows != rows * cols or n_tokens != side * side:
        return None
    c = shape[2]

    def convert(x: FloatArray) -> FloatArray:
        if swapped:
            x = x.transpose(1, 0, 2)
        # The inverse of the partition: (rows, cols, side, side, C) -> (C, rows*side, cols*side).
        x = x.reshape(rows, cols, side, side, c).transpose(4, 0, 2, 1, 3)
        return x.reshape(c, rows * side, cols * side)

    note = (
        f"partitioned tokens {shape} reassembled into {c} maps of {rows * side} x {cols * side} "
        f"({rows * cols} windows of {side} x {side})"
    )
    return _Plan("maps", "windows", note, convert)


def _decide_2d(shape: tuple[int, ...], ctx: LayerContext | None, layout: Layout) -> _Plan:
    n, c = shape
    if layout in ("nchw", "nhwc"):
        return _Plan(
            "none",
            "none",
            f"--layout {layout} needs (C, H, W) per image, not {shape}; "
            "use --layout tokens or auto",
        )
    hint = ctx.channels_hint if ctx is not None else None
    if layout == "auto" and hint is not None and n == hint and c != hint:
        # A 1-D feature map (Conv1d, BatchNorm1d): channels first, one strip per channel.
        return _Plan(
            "maps",
            "nchw",
            f"1-D maps {shape} drawn as {n} strips of 1 x {c}",
            lambda x: x[:, None, :],
        )
    if layout == "auto" and n == 1:
        return _Plan("vector", "vector", f"one token {shape} drawn as a vector", lambda x: x[0])
    if ctx is not None and ctx.clip_grid is not None and layout in ("auto", "tokens"):
        clip = _clip_tokens(shape, ctx.clip_grid)
        if clip is not None:
            return clip
    grid = ctx.token_grid if ctx is not None else None
    prefix = ctx.prefix_tokens if ctx is not None else 0
    # Without a known grid, a square token count is only trusted when the module does not
    # say its channels are something else: a (H, W) mask or map is not a token sequence.
    guess = grid is None and (hint is None or hint == c)
    tokens = _token_plan(shape, grid, prefix, guess=guess)
    if tokens is None and grid is None and not guess and math.isqrt(n) ** 2 != n:
        # A module returning several token sequences (CrossViT's two branches) states one
        # width; the others are still one class token and a square grid, which no (H, W)
        # map of a square side can be taken for.
        tokens = _token_plan(shape, None, 0, guess=True, skips=(1,))
    if tokens is not None:
        return tokens
    if layout == "tokens":
        return _Plan(
            "maps",
            "tokens",
            f"{shape} fits no patch grid; drawn as one {n} x {c} map (rows are tokens)",
            lambda x: x[None],
        )
    if grid is not None:
        expected = f"{prefix} + {grid[0]} x {grid[1]}" if prefix else f"{grid[0]} x {grid[1]}"
        why = f"does not fit the model's {expected} patch tokens"
    else:
        why = "is not a token sequence of a known patch grid"
    return _Plan(
        "none",
        "none",
        f"2-D output {shape} {why}; use --layout tokens to draw it as one {n} x {c} map",
    )


def _token_plan(
    shape: tuple[int, ...],
    grid: tuple[int, int] | None,
    prefix: int,
    *,
    guess: bool,
    skips: tuple[int, ...] | None = None,
) -> _Plan | None:
    n, c = shape
    inferred = False
    candidates: list[tuple[int, tuple[int, int]]] = []
    merged: dict[tuple[int, int], int] = {}
    if grid is not None:
        candidates = [(prefix, grid)] + ([(0, grid)] if prefix else [])
        # Hierarchical transformers (Swin) merge 2 x 2 patches per stage: the patch grid
        # halved, as their patch-merging layers make it.
        for k in (2, 4, 8, 16, 32):
            halved = (grid[0] // k, grid[1] // k)
            if min(halved) >= 1 and halved not in merged:
                merged[halved] = k
                candidates.append((0, halved))
    elif guess:
        # No patch grid is known: a perfect square after the known prefix (or after one
        # leading class token when none is known) is taken as the grid, and the note says so.
        # A model may state a class token its blocks have not seen yet (XCiT and CaiT add it
        # after them): with a prefix stated, the whole count is tried as well.
        inferred = True
        for skip in skips or dict.fromkeys([prefix, 1 if prefix == 0 else 0]):
            side = math.isqrt(max(n - skip, 0))
            if side >= 2 and side * side == n - skip:
                candidates.append((skip, (side, side)))
    for skip, (rows, cols) in candidates:
        if n != skip + rows * cols:
            continue
        guessed = inferred and skip > 0 and skip != prefix
        patches = f"{rows * cols} patch tokens as {rows} x {cols}"
        if (rows, cols) in merged and (rows, cols) != grid:
            patches += f" (patches merged {merged[(rows, cols)]}x)"
        if inferred:
            patches += " (grid inferred from the token count)"
        note = f"{_dropped(skip, inferred=guessed)}{patches}"
        shown = f"{_shown(skip, inferred=guessed)}{patches}" if skip else None

        def convert(
            x: FloatArray, skip: int = skip, rows: int = rows, cols: int = cols
        ) -> FloatArray:
            return x[skip:].reshape(rows, cols, c).transpose(2, 0, 1)

        return _Plan("maps", "tokens", note, convert, skip, shown)
    return None


def _dropped(skip: int, *, inferred: bool) -> str:
    if skip == 0:
        return ""
    if inferred:
        return "first token dropped (taken for a class token); "
    return "class token dropped; " if skip == 1 else f"{skip} prefix tokens dropped; "


def _shown(skip: int, *, inferred: bool) -> str:
    if inferred:
        what = "first token (taken for a class token)"
    else:
        what = "class token" if skip == 1 else f"{skip} prefix tokens"
    return f"{what} shown in the band above each tile; "
