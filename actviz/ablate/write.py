"""What ablate writes at the end, from every image's records: the per-class tables and the
flow of each ablation, for a sweep the ranking and the curves, ``ablate.json``,
``ablate.parquet`` (one row per image and ablation), the pictures and ``ablate.html``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz import output
from actviz.ablate.options import parse_fail_on
from actviz.ablate.pictures import draw_pictures
from actviz.ablate.prepare import State, describe_method
from actviz.ablate.result import RECORD, AblateResult
from actviz.ablate.tables import Outcome, class_rows, curve_accuracy, flow_rows, overall
from actviz.report import rebuild_run_report
from actviz.report.ablate import ablate_page

if TYPE_CHECKING:
    from actviz.command import Command
    from actviz.command.opening import Loaded

__all__ = ["RANDOM_NOTE", "TABLE", "outcomes", "write_outputs"]

TABLE = "ablate.parquet"
PAGE = "ablate.html"
RANDOM_NOTE = "random weights: these accuracies describe an untrained model"
RANKED_BY = "the mean drop of the class's logit over the class's ranking images"


def outcomes(state: State, ok: Sequence[Mapping[str, Any]]) -> list[Outcome]:
    """Each ablation's outcome over the images scored."""
    labels = np.asarray([r["label"] for r in ok], dtype=np.int64)
    pred = np.asarray([r["pred"] for r in ok], dtype=np.int64)
    logit = np.asarray([r["logit"] for r in ok], dtype=np.float64)
    count = state.ablations.count
    preds = np.asarray([r["preds"] for r in ok], dtype=np.int64).reshape(len(ok), count)
    logits = np.asarray([r["logits"] for r in ok], dtype=np.float64).reshape(len(ok), count)
    return [Outcome(labels, pred, preds[:, k], logit, logits[:, k]) for k in range(count)]


def _names(state: State, found: Sequence[Outcome]) -> dict[int, str]:
    seen: set[int] = set()
    for o in found:
        seen.update(
            int(v) for v in np.unique(np.concatenate([o.labels, o.pred_before, o.pred_after]))
        )
    return {i: state.class_name(i) for i in seen}


def _curves(
    state: State,
    curves: Mapping[str, Any] | None,
    names: Mapping[int, str],
    ok: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The curves per class, and each class's units in order of importance."""
    if curves is None:
        return [], []
    plan = curves["plan"]
    points = curves["points"]
    labels = {r["image"]: int(r["label"]) for r in ok}
    before = {r["image"]: int(r["pred"]) for r in ok}
    out = []
    for c, order in plan.order.items():
        images = [rel for rel, label in labels.items() if label == c and rel in points]
        if not images:
            continue
        truth = np.full(len(images), c, dtype=np.int64)
        row: dict[str, Any] = {
            "class": names.get(c, state.class_name(c)),
            "index": c,
            "n": len(images),
            "sizes": list(plan.sizes),
            "acc_before": float(np.mean([before[rel] == c for rel in images])),
        }
        for end in ("best", "worst"):
            preds = np.asarray([points[rel][end] for rel in images], dtype=np.int64).T
            row[end] = curve_accuracy(truth, preds, [c])[c]
        row["order"] = [state.coords.labels[j] for j in order]
        out.append(row)
    ranking = [
        {
            "class": names.get(c, state.class_name(c)),
            "index": c,
            "units": [
                {"unit": state.coords.labels[int(j)], "drop": round(float(d), 6)}
                for j, d in zip(order, drops, strict=True)
            ],
        }
        for c, (order, drops) in sorted(curves["ranked"].items())
    ]
    return out, ranking


def write_outputs(
    cmd: Command,
    opened: Loaded,
    state: State,
    records: Sequence[dict[str, Any]],
    curves: Mapping[str, Any] | None,
    settings: Mapping[str, Any],
) -> AblateResult:
    """Summarize the records and write every file; the result the command returns."""
    opts, loaded, out = state.opts, state.loaded, state.opts.out
    ok = [r for r in records if r.get("status") == "ok"]
    failed = [r for r in records if r.get("status") != "ok"]
    found = outcomes(state, ok) if ok else []
    names = _names(state, found)
    ablations, table = [], []
    for name, mask, outcome in zip(
        state.ablations.names, state.ablations.masks, found, strict=False
    ):
        rows = class_rows(outcome, names)
        table += [{"ablation": name, **row} for row in rows]
        ablations.append(
            {
                "name": name,
                "coordinates": [state.coords.labels[j] for j in mask.nonzero().flatten().tolist()],
                "overall": overall(outcome),
                "flow": flow_rows(outcome, names),
            }
        )
    curve_rows, ranking = _curves(state, curves, names, ok)
    random = bool(loaded.weights.random)
    cases: list[dict[str, Any]] = []
    pictures: dict[str, str] = {}
    if opts.report and ok:
        cases, pictures = draw_pictures(state, ok, found, ablations, curve_rows, random)
    fail = _failures(opts.fail_on, table)
    record = {
        **cmd.head(opened),
        "command": "ablate",
        "random_weights": random,
        "layer": state.geometry.describe(),
        "remove": state.coords.describe(),
        "mode": _mode(state),
        "labels": state.labels.describe(),
        "protocol": {
            **describe_method(state),
            "each": state.ablations.each,
            "rank_share": opts.rank_share if opts.each else None,
            "seed": opts.seed,
            "ranked_by": RANKED_BY if opts.each else None,
            "rank_images": len((curves or {}).get("rank_images") or []),
        },
        "ablations": ablations,
        "classes": table,
        "ranking": ranking,
        "curves": curve_rows,
        "cases": cases,
        "pictures": pictures,
        "fail_on": fail,
        "table": TABLE if ok else None,
        "report": PAGE if opts.report and ok else None,
        "images": {
            "ok": len(ok),
            "failed": [{"image": r["image"], "error": r.get("error")} for r in failed],
        },
        "skipped": [
            {"path": str(p), "reason": why} for p, why in (cmd.found.skipped if cmd.found else [])
        ],
        "warnings": list(cmd.warnings),
        "settings": dict(settings),
        "seconds": round(cmd.seconds(), 3),
    }
    if ok:
        _write_table(state, ok, found)
    path = out / RECORD
    output.write_json(path, record)
    report = None
    if opts.report and ok:
        report = out / PAGE
        output.write_bytes(report, ablate_page(record))
        for rel, data in rebuild_run_report(out).items():  # a run's index here links it
            output.write_bytes(out / rel, data)
    return AblateResult(
        out=out,
        record=path,
        model=cmd.model,
        layer=state.layer,
        mode=state.mode.spec,
        labels=state.labels.source,
        ablations=ablations,
        classes=table,
        curves=curve_rows,
        cases=cases,
        pictures=pictures,
        images=len(ok),
        failed=[(r["image"], str(r.get("error"))) for r in failed],
        random_weights=random,
        weights=loaded.weights,
        warning=opened.warning,
        fail_on=fail,
        seconds=cmd.seconds(),
        device=str(loaded.device),
        table=out / TABLE if ok else None,
        report=report,
        skipped=list(cmd.found.skipped if cmd.found else []),
        warnings=list(cmd.warnings),
    )


def _mode(state: State) -> dict[str, Any]:
    """The mode as the JSON records it; resample's donor of each image."""
    record = state.mode.describe()
    refs = state.references
    if refs is not None and refs.donors:
        record["donors"] = {rel: state.rels[str(p)] for rel, p in sorted(refs.donors.items())}
    return record


def _failures(spec: str | None, table: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``--fail-on``: the classes that crossed it, worst first."""
    if spec is None:
        return None

    rule = parse_fail_on(spec)
    crossed = []
    for row in table:
        value = rule.crossed(dict(row))
        if value is not None:
            crossed.append({"ablation": row["ablation"], "class": row["class"], "value": value})
    crossed.sort(key=lambda c: c["value"], reverse=rule.op == ">")
    return {"rule": rule.spec, "crossed": crossed}


def _write_table(state: State, ok: Sequence[Mapping[str, Any]], found: Sequence[Outcome]) -> None:
    """``ablate.parquet``: one row per image and ablation."""
    import pyarrow as pa

    images = [str(r["image"]) for r in ok]
    schema = pa.schema(
        [
            ("image", pa.string()),
            ("label", pa.int32()),
            ("pred_before", pa.int32()),
            ("pred_after", pa.int32()),
            ("logit_before", pa.float32()),
            ("logit_after", pa.float32()),
            ("ablation", pa.dictionary(pa.int32(), pa.string())),
        ]
    )
    parts = output.ParquetParts(state.opts.out / TABLE, schema, compression="zstd")
    try:
        names = pa.array(state.ablations.names, pa.string())
        for k, outcome in enumerate(found):
            batch = pa.record_batch(
                [
                    pa.array(images, pa.string()),
                    pa.array(outcome.labels.astype(np.int32)),
                    pa.array(outcome.pred_before.astype(np.int32)),
                    pa.array(outcome.pred_after.astype(np.int32)),
                    pa.array(outcome.logit_before.astype(np.float32)),
                    pa.array(outcome.logit_after.astype(np.float32)),
                    pa.DictionaryArray.from_arrays(
                        pa.array(np.full(len(images), k, dtype=np.int32)), names
                    ),
                ],
                schema=schema,
            )
            parts.write(batch)
        parts.finish()
    except BaseException:
        parts.abort()
        raise
