"""The pictures of ablate: each class's accuracy before and after (``classes.png``), a sweep's
curves (``curves.png``), and the most affected images with their class activation map before
and after (``cases/``), each a PNG written through :mod:`actviz.output`.

The maps are Grad-CAM of the image's class at the layer ``run --cam`` draws by default (the
last spatial layer whose positions reach the classifier); "after" is the same with the
ablation's edit in the forward, so the gradient flows through the edited layer.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from actviz import output
from actviz.ablate.passes import reference_values
from actviz.ablate.prepare import State
from actviz.ablate.split import LayerTap
from actviz.ablate.tables import Outcome, class_rows, ranked
from actviz.gradients.batch import patches_reach_readout
from actviz.gradients.core import compute_gradients
from actviz.gradients.methods import scale_cams
from actviz.gradients.registry import DEFAULT_CAM, cam_title, raw_cam
from actviz.hooks import eval_mode, layer_refs
from actviz.io.loader import decode_batches
from actviz.layouts import default_selector, layer_contexts
from actviz.render.overlay import cam_panel, input_view
from actviz.render.palette import palette_for
from actviz.render.png import picture_png
from actviz.selectors import select_layers

if TYPE_CHECKING:
    import torch

__all__ = ["CASES_DIR", "draw_pictures", "headline"]

CASES_DIR = "cases"
#: Classes a chart shows at most.
CHART_CLASSES = 24
CURVE_CLASSES = 6


def headline(ablations: Sequence[Mapping[str, Any]]) -> int:
    """The ablation the pictures show: the first of :func:`ranked`."""
    return next(iter(ranked(ablations)), 0)


def draw_pictures(
    state: State,
    ok: Sequence[Mapping[str, Any]],
    found: Sequence[Outcome],
    ablations: Sequence[Mapping[str, Any]],
    curves: Sequence[Mapping[str, Any]],
    random: bool,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Write the pictures; the cases and the other pictures by kind, relative to the folder."""
    out = state.opts.out
    k = headline(ablations)
    name = str(ablations[k]["name"])
    note = "\nrandom weights: an untrained model" if random else ""
    pictures: dict[str, str] = {}
    rows = _class_rows(found[k], state)
    if rows:
        title = f"ablate {state.layer}: {name} ({state.mode.spec}){note}"
        output.write_bytes(out / "classes.png", _classes_png(rows, title, state.labels.agreement))
        pictures["classes"] = "classes.png"
    if curves:
        title = f"{state.layer}: removing each class's most and least important units{note}"
        output.write_bytes(out / "curves.png", _curves_png(curves, title))
        pictures["curves"] = "curves.png"
    cases = _cases(state, ok, found[k], k, name, random) if state.opts.cases else []
    return cases, pictures


def _class_rows(outcome: Outcome, state: State) -> list[tuple[str, float, float]]:

    names = {int(c): state.class_name(int(c)) for c in np.unique(outcome.labels)}
    rows = [(r["class"], r["acc_before"], r["acc_after"]) for r in class_rows(outcome, names)]
    rows.sort(key=lambda r: (r[2] - r[1], r[0]))
    return rows[:CHART_CLASSES]


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _classes_png(rows: list[tuple[str, float, float]], title: str, agreement: bool) -> bytes:
    """Horizontal bars: each class's accuracy before (grey) and after (colour), the classes
    that lost most on top."""
    fig = _figure(9.0, 1.2 + 0.32 * len(rows))
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    before = [r[1] for r in rows]
    after = [r[2] for r in rows]
    from matplotlib.patches import Patch

    ax.barh(y + 0.2, before, height=0.4, color="#b0b0b0")
    kinds = {"lost": "#c62828", "gained": "#2e7d32", "unchanged": "#1565c0"}
    said = [
        "lost" if a < b else "gained" if a > b else "unchanged"
        for b, a in zip(before, after, strict=True)
    ]
    ax.barh(y - 0.2, after, height=0.4, color=[kinds[k] for k in said])
    handles = [Patch(color="#b0b0b0", label="before")]
    handles += [Patch(color=c, label=f"after: {k}") for k, c in kinds.items() if k in said]
    ax.set_yticks(y, [r[0][:40] for r in rows], fontsize=8)
    ax.set_xlim(0, 1)
    word = "agreement with the unablated model" if agreement else "accuracy (recall of the class)"
    ax.set_xlabel(word)
    ax.grid(True, axis="x", alpha=0.3)
    for row, b, a in zip(y, before, after, strict=True):
        ax.text(
            min(a, 0.9) + 0.01,
            row - 0.2,
            f"{a:.0%} ({100 * (a - b):+.0f})",
            va="center",
            fontsize=7,
        )
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title, fontsize=10)
    return _png(fig)


def _curves_png(curves: Sequence[Mapping[str, Any]], title: str) -> bytes:
    """Per class (the largest first): accuracy as its N most important units are removed
    together (solid) and its N least important (dashed)."""
    fig = _figure(9.0, 4.6)
    ax = fig.subplots()
    shown = sorted(curves, key=lambda c: (-int(c["n"]), str(c["class"])))[:CURVE_CLASSES]
    for index, curve in enumerate(shown):
        colour = f"C{index}"
        sizes = [0, *curve["sizes"]]
        for end, style in (("best", "-"), ("worst", "--")):
            values = [curve["acc_before"], *curve[end]]
            label = f"{str(curve['class'])[:30]} (n={curve['n']})" if end == "best" else None
            ax.plot(
                sizes, values, linestyle=style, marker="o", markersize=3, color=colour, label=label
            )
    ax.set_xscale("symlog", linthresh=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("units removed together (solid: most important first; dashed: least)")
    ax.set_ylabel("accuracy on the measuring images")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.suptitle(title, fontsize=10)
    return _png(fig)


def _cam_layer(state: State) -> str | None:
    """The layer ``run --cam`` takes by default."""

    module = state.loaded.module
    names = select_layers(layer_refs(module), default_selector(module), model=state.loaded.name)
    contexts = layer_contexts(module, state.loaded.input_size)
    reaching = [n for n in names if patches_reach_readout(n, contexts)]
    chosen = reaching or names
    return str(chosen[-1]) if chosen else None


def _chosen(outcome: Outcome, count: int) -> list[int]:
    """The most affected images: those that flipped from right to wrong first, then by the
    drop of their class's logit."""
    drop = outcome.logit_before - outcome.logit_after
    flipped = (outcome.pred_before == outcome.labels) & (outcome.pred_after != outcome.labels)
    order = np.lexsort((-drop, ~flipped))
    return [int(i) for i in order[:count] if drop[i] > 0 or flipped[i]]


def _cases(
    state: State,
    ok: Sequence[Mapping[str, Any]],
    outcome: Outcome,
    k: int,
    name: str,
    random: bool,
) -> list[dict[str, Any]]:
    """Each chosen image as one picture: what the model saw, its map before and after."""
    layer = _cam_layer(state)
    chosen = _chosen(outcome, state.opts.cases)
    if layer is None or not chosen:
        return []
    import torch

    paths = [Path(str(ok[i]["path"])) for i in chosen]
    pre = state.loaded.preprocess
    decoded = {
        item.index: item
        for batch in decode_batches(paths, pre, batch_size=len(paths))
        for item in batch
    }
    kept = [
        (i, decoded[n])
        for n, i in enumerate(chosen)
        if n in decoded and decoded[n].tensor is not None
    ]
    if not kept:
        return []
    x = torch.stack([item.tensor for _, item in kept if item.tensor is not None])
    x = x.to(state.loaded.device)
    targets = [int(outcome.labels[i]) for i, _ in kept]
    rels = [str(ok[i]["image"]) for i, _ in kept]
    maps = _maps(state, x, layer, targets, rels, k)
    cases = []
    for number, ((i, item), rel) in enumerate(zip(kept, rels, strict=True)):
        png = _case_png(state, item.tensor, maps, number, outcome, i, layer, name, random)
        file = f"{CASES_DIR}/{number + 1:02d}_{output.safe_name(Path(rel).stem)}.png"
        output.write_bytes(state.opts.out / file, png)
        cases.append(
            {
                "image": rel,
                "file": file,
                "class": state.class_name(int(outcome.labels[i])),
                "pred_before": state.class_name(int(outcome.pred_before[i])),
                "pred_after": state.class_name(int(outcome.pred_after[i])),
                "dlogit": float(outcome.logit_after[i] - outcome.logit_before[i]),
                "cam_layer": layer,
            }
        )
    return cases


def _maps(
    state: State, x: torch.Tensor, layer: str, targets: list[int], rels: list[str], k: int
) -> dict[str, Any]:
    """Grad-CAM of each image's class before and with ablation ``k`` in the forward, and the
    class's probability each time."""
    import torch

    ctx_layout = _layout(state, layer)
    mask = state.ablations.masks[k]
    with torch.inference_mode():
        reference = reference_values(state, rels, state.references, x.device)
    if reference is not None:
        reference = reference.clone()  # a normal tensor: the edit runs with autograd on

    def edit(a: torch.Tensor) -> torch.Tensor:
        old = state.coords.read(a)
        return state.coords.put(a, state.mode.values(old, reference), old, mask)

    out: dict[str, Any] = {}
    module = state.loaded.module
    with eval_mode(module):
        for when in ("before", "after"):
            with LayerTap(module, state.layer, edit=edit if when == "after" else None):
                result = compute_gradients(module, x, [layer], target=targets)
            capture = result.captures.get(layer)
            if capture is None:
                return {}
            raw = raw_cam(DEFAULT_CAM, capture.activation, capture.gradient, **ctx_layout)
            probabilities = result.logits.softmax(dim=1)
            out[when] = (
                scale_cams(raw).numpy(),
                [float(probabilities[i, t]) for i, t in enumerate(targets)],
            )
    return out


def _layout(state: State, layer: str) -> dict[str, Any]:

    ctx = layer_contexts(state.loaded.module, state.loaded.input_size).get(layer)
    if ctx is None:
        return {"layout": "nchw"}
    if ctx.token_grid:
        return {"layout": "tokens", "grid": ctx.token_grid, "prefix_tokens": ctx.prefix_tokens}
    return {"layout": "nhwc" if ctx.channels_last else "nchw"}


def _case_png(
    state: State,
    tensor: Any,
    maps: Mapping[str, Any],
    number: int,
    outcome: Outcome,
    i: int,
    layer: str,
    name: str,
    random: bool,
) -> bytes:

    from actviz.render.legend import Header, new_canvas

    pre = state.loaded.preprocess
    view = input_view(tensor.numpy(), pre.mean, pre.std)
    factor = -(-192 // max(view.size))
    if factor > 1:
        view = view.resize((view.width * factor, view.height * factor), Image.Resampling.NEAREST)
    label = state.class_name(int(outcome.labels[i]))
    panels = []
    for when in ("before", "after"):
        if when in maps:
            cams, probs = maps[when]
            pred = outcome.pred_before[i] if when == "before" else outcome.pred_after[i]
            panels.append(
                (f"{when}: {probs[number]:.0%}, top {state.class_name(int(pred))}", cams[number])
            )
    pixels = cam_panel(view, panels)
    change = outcome.logit_after[i] - outcome.logit_before[i]
    header = Header(
        title=f"{name} ({state.mode.spec}) at {state.layer}",
        info=f"{label}: logit {change:+.3f}  |  {cam_title(DEFAULT_CAM)} of {label} at {layer}",
        labels=("0", "max"),
        nonfinite=False,
        notes=("random weights: an untrained model",) if random else (),
    )
    height, width = pixels.shape[:2]
    canvas, top = new_canvas(height, width, header)
    rgb = palette_for("jet")[canvas]
    rgb[top:, :width] = pixels
    return picture_png(Image.fromarray(rgb))
