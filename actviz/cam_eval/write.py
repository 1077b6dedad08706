"""What cam-eval writes at the end, from every image's record: ``cam-eval.json``, the curves
chart, the best and worst case of each method with every method's map, and ``cam-eval.html``."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from actviz import output
from actviz.cam_eval.chart import curves_png
from actviz.cam_eval.metrics import BASELINE_TITLES, BASELINES
from actviz.cam_eval.result import RECORD, CamEvalResult, EvalState
from actviz.cam_eval.summary import (
    BOOTSTRAP,
    METRICS,
    MIN_VERDICT_IMAGES,
    NEGLIGIBLE,
    SANITY_THRESHOLD,
    summarize,
)
from actviz.gradients.registry import cam_title
from actviz.io.loader import decode_batches
from actviz.render.overlay import cam_panel, input_view
from actviz.render.palette import palette_for
from actviz.render.png import picture_png
from actviz.report.cam_eval import cam_eval_page

if TYPE_CHECKING:
    from actviz.command import Command
    from actviz.command.opening import Loaded

__all__ = ["RANDOM_NOTE", "write_outputs"]

RANDOM_NOTE = "random weights: the maps and scores describe an untrained model"
CASES_DIR = "cases"


def write_outputs(
    cmd: Command,
    opened: Loaded,
    state: EvalState,
    records: Sequence[dict[str, Any]],
    settings: Mapping[str, Any],
    *,
    reused: int = 0,
) -> CamEvalResult:
    """Summarize the records and write every file; the result the command returns
    (``reused``: images an earlier run scored, taken from its ledger by ``--resume``)."""

    loaded, opts, out = state.loaded, state.opts, state.opts.out
    methods = list(opts.methods)
    names = methods + list(BASELINES)
    ok = [r for r in records if r.get("status") == "ok"]
    summary = summarize(ok, names, state.stages) if ok else {}
    random = bool(loaded.weights.random)
    titles = {n: cam_title(n) for n in names}
    protocol = dict(settings["protocol"])
    chart = None
    cases: list[dict[str, Any]] = []
    if ok:
        pixels = protocol["input_size"][0] * protocol["input_size"][1]
        step = protocol["step_pixels"]
        fractions = [min(i * step, pixels) / pixels for i in range(protocol["steps"] + 1)]

        title = f"cam-eval: {cmd.model} at {state.layer}, {len(ok)} images"
        if random:
            title += f"\n{RANDOM_NOTE}"
        chart = out / "curves.png"
        output.write_bytes(chart, curves_png(summary, titles, fractions=fractions, title=title))
        if opts.report:
            cases = _cases(state, ok, methods, random)
    record = {
        **cmd.head(opened),
        "command": "cam-eval",
        "random_weights": random,
        "layer": state.layer,
        "layout": state.shape.layout,
        "methods": methods,
        "baselines": list(BASELINES),
        "titles": {**{m: cam_title(m) for m in methods}, **BASELINE_TITLES},
        "target": opts.target,
        "protocol": protocol,
        **({"attribution": settings["attribution"]} if "attribution" in settings else {}),
        "metrics": {
            m: {"label": label, "better": "higher" if sign > 0 else "lower"}
            for m, (label, sign) in METRICS.items()
        },
        # What a verdict against a baseline needs: the images, and differences above this.
        "bootstrap": {**BOOTSTRAP, "min_images": MIN_VERDICT_IMAGES, "negligible": NEGLIGIBLE},
        "sanity": {
            "method": "cascading randomization (Adebayo et al., 2018): the blocks re-initialised "
            "one more at a time from the output down; Spearman rank correlation of each map to "
            "the original",
            "blocks": state.stages,
            "threshold": SANITY_THRESHOLD,
        },
        "summary": summary,
        "chart": chart.name if chart else None,
        "report": "cam-eval.html" if opts.report and ok else None,
        "cases": cases,
        "images": list(records),
        "skipped": [
            {"path": str(p), "reason": why} for p, why in (cmd.found.skipped if cmd.found else [])
        ],
        "warnings": list(cmd.warnings),
        "seconds": round(cmd.seconds(), 3),
    }
    path = out / RECORD
    output.write_json(path, record)
    report = None
    if opts.report and ok:
        report = out / "cam-eval.html"
        output.write_bytes(report, cam_eval_page(record))
    return CamEvalResult(
        out=out,
        record=path,
        layer=state.layer,
        methods=methods,
        summary=summary,
        images=list(records),
        random_weights=random,
        seconds=cmd.seconds(),
        device=str(loaded.device),
        chart=chart,
        report=report,
        skipped=list(cmd.found.skipped if cmd.found else []),
        warnings=list(cmd.warnings),
        reused=reused,
        model=cmd.model,
    )


def _balance_of(record: Mapping[str, Any], method: str) -> float:
    """Insertion minus deletion area of ``method``'s map on one image: higher is better."""
    s = record["scores"][method]
    return float(s["insertion_auc"] - s["deletion_auc"])


def _cases(
    state: EvalState, ok: Sequence[Mapping[str, Any]], methods: Sequence[str], random: bool
) -> list[dict[str, Any]]:
    """Per method its best and worst image by insertion minus deletion area, drawn with every
    method's map over what the model saw: ``cases/<method>_best.png``, ``..._worst.png``."""

    from actviz.render.legend import Header, new_canvas

    balance = _balance_of

    chosen: list[tuple[str, str, Mapping[str, Any]]] = []
    for m in methods:
        ranked = sorted(ok, key=functools.partial(_balance_of, method=m))
        chosen += [(m, "best", ranked[-1]), (m, "worst", ranked[0])]
    paths = list(dict.fromkeys(str(r["path"]) for _, _, r in chosen))
    pre = state.loaded.preprocess
    views: dict[str, Image.Image] = {}
    for batch in decode_batches([Path(p) for p in paths], pre, batch_size=len(paths)):
        for item in batch:
            if item.tensor is not None:
                views[paths[item.index]] = input_view(item.tensor.numpy(), pre.mean, pre.std)
    cases = []
    for m, which, r in chosen:
        view = views.get(str(r["path"]))
        if view is None:
            continue
        factor = -(-160 // max(view.size))
        if factor > 1:
            view = view.resize(
                (view.width * factor, view.height * factor), Image.Resampling.NEAREST
            )
        panels = [
            (f"{cam_title(n)} {balance(r, n):+.3f}", np.asarray(r["maps"][n], dtype=np.float32))
            for n in methods
        ]
        pixels = cam_panel(view, panels)
        label = r.get("label") or f"class {r['target']}"
        header = Header(
            title=f"{cam_title(m)}: {which} case   {r['image']}",
            info=(
                f"{label} ({r['probability']:.1%})  |  layer {state.layer}  |  each map: its "
                "insertion minus deletion AUC"
            ),
            labels=("0", "max"),
            nonfinite=False,
            notes=(RANDOM_NOTE,) if random else (),
        )
        height, width = pixels.shape[:2]
        canvas, top = new_canvas(height, width, header)
        rgb = palette_for("jet")[canvas]
        rgb[top:, :width] = pixels
        rel = f"{CASES_DIR}/{output.safe_name(m.replace('+', 'p'))}_{which}.png"
        output.write_bytes(state.opts.out / rel, picture_png(Image.fromarray(rgb)))
        cases.append(
            {"method": m, "case": which, "image": r["image"], "balance": balance(r, m), "file": rel}
        )
    return cases
