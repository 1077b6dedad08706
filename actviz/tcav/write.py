"""What ``tcav`` computes and writes once the vectors are gathered: per run each concept's
vector and a random-vs-random one, the scores of each class, the test, then ``tcav.json``, the
vectors (``.npy`` per concept for ``ablate --direction``, and every run in one safetensors file),
the chart and the page."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from actviz import output
from actviz.label.significance import benjamini_hochberg
from actviz.report.tcav import tcav_page
from actviz.tcav.cav import CAVS, TEST_PERMUTATIONS, tcav_scores, two_sided_test, welch_t
from actviz.tcav.chart import tcav_chart
from actviz.tcav.options import TcavOptions
from actviz.tcav.result import RECORD, TcavResult
from actviz.tcav.vectors import Layer

if TYPE_CHECKING:
    from actviz.command import Command
    from actviz.command.opening import Loaded

__all__ = ["PAGE", "RANDOM_NOTE", "Draws", "draws", "write_outputs"]

PAGE = "tcav.html"
CHART = "tcav.png"
VECTORS = "cavs"
RANDOM_NOTE = "random weights: these scores describe an untrained model"
F64 = npt.NDArray[np.float64]
Draws = list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp]]]


def draws(concept: int, randoms: int, runs: int, size: int, seed: int, index: int) -> Draws:
    """Per run, the concept's images it draws and two disjoint random sets, each of ``size``:
    the first the concept vector's negatives, the second the positives of the random vector
    it is tested against. The random draws are the same for every concept (``index``: which
    concept, for its own draw)."""
    out = []
    for r in range(runs):
        negatives = np.random.default_rng([seed, r, 0]).permutation(randoms)
        mine = np.random.default_rng([seed, r, 1, index])
        chosen = (
            mine.choice(concept, size=size, replace=False) if size < concept else np.arange(concept)
        )
        out.append((np.sort(chosen), negatives[:size], negatives[size : 2 * size]))
    return out


def _matrix(found: Mapping[str, Any], paths: Sequence[Path], channels: int) -> F64:
    rows = [found[str(p)] for p in paths if found.get(str(p)) is not None]
    return np.stack(rows).astype(np.float64) if rows else np.zeros((0, channels))


@dataclass(frozen=True)
class Tested:
    """Every concept's vectors and every score.

    Attributes:
        concepts: Per concept its row of ``tcav.json``.
        scores: Per concept and class its row, with its q-value.
        saved: Per concept its direction, its runs' vectors and the random ones.
        randoms: How many random images there are.
        inputs: Per class how many of its images have a gradient.
    """

    concepts: list[dict[str, Any]]
    scores: list[dict[str, Any]]
    saved: dict[str, tuple[F64, F64, F64]]
    randoms: int
    inputs: dict[int, int]


def write_outputs(
    cmd: Command,
    opened: Loaded,
    layer: Layer,
    opts: TcavOptions,
    sets: dict[str, list[Path]],
    folders: dict[str, list[str]],
    targets: list[tuple[int, str]],
    gathered: dict[str, dict[str, Any]],
    failed: dict[str, dict[str, Any]],
    *,
    reused: int,
) -> TcavResult:
    """The vectors, the scores and the test; every file; the result."""
    loaded = opened.model
    tested = _test(layer, opts, sets, folders, targets, gathered, loaded.categories)
    _write_vectors(opts.out, tested.saved, cmd.model, layer, opts)
    random = bool(loaded.weights.random)
    failures = sorted(failed.values(), key=lambda r: (str(r.get("set")), str(r.get("path"))))
    images = sum(tested.inputs.values())
    document = _document(
        cmd, opened, layer, opts, folders, targets, tested, failures, reused=reused
    )
    record = opts.out / RECORD
    output.write_json(record, document)
    if opts.report:
        title = f"TCAV: {cmd.model} at {layer.plan.key}, {opts.runs} runs ({opts.cav})"
        output.write_bytes(opts.out / CHART, tcav_chart(tested.scores, title=title, random=random))
        output.write_bytes(opts.out / PAGE, tcav_page(document))
    return TcavResult(
        model=cmd.model,
        out=opts.out,
        record=record,
        layer=layer.plan.key,
        cav=opts.cav,
        runs=opts.runs,
        seed=opts.seed,
        concepts=tested.concepts,
        scores=tested.scores,
        vectors=opts.out / VECTORS / "cavs.safetensors",
        images=images,
        random_weights=random,
        weights=loaded.weights,
        report=opts.out / PAGE if opts.report else None,
        chart=opts.out / CHART if opts.report else None,
        failed=failures,
        warnings=list(cmd.warnings),
        reused=reused,
        seconds=cmd.seconds(),
        device=str(loaded.device),
    )


def _document(
    cmd: Command,
    opened: Loaded,
    layer: Layer,
    opts: TcavOptions,
    folders: dict[str, list[str]],
    targets: list[tuple[int, str]],
    tested: Tested,
    failures: list[dict[str, Any]],
    *,
    reused: int,
) -> dict[str, Any]:
    """``tcav.json`` (schema in docs/outputs.md)."""
    loaded = opened.model
    random = bool(loaded.weights.random)
    images = sum(tested.inputs.values())
    return {
        **cmd.head(opened),
        "command": "tcav",
        "random_weights": random,
        "layer": layer.plan.key,
        "module": layer.module,
        "maps": [layer.plan.channels, layer.plan.height, layer.plan.width],
        "space": "channel",
        "cav": opts.cav,
        "cav_title": CAVS[opts.cav].title,
        "protocol": _protocol(opts, folders, tested.randoms),
        "concepts": tested.concepts,
        "targets": [
            {
                "target": index,
                "name": _class_name(loaded.categories, index),
                "given": target,
                "folders": folders[f"class:{target}"],
                "images": tested.inputs[index],
            }
            for index, target in targets
        ],
        "scores": tested.scores,
        "vectors": f"{VECTORS}/cavs.safetensors",
        "images": {
            "scored": images,
            "reused": reused,
            "failed": failures[:100],
            "failed_count": len(failures),
        },
        "report": PAGE if opts.report else None,
        "chart": CHART if opts.report else None,
        "warnings": list(cmd.warnings),
        "seconds": round(cmd.seconds(), 3),
    }


def _test(
    layer: Layer,
    opts: TcavOptions,
    sets: dict[str, list[Path]],
    folders: dict[str, list[str]],
    targets: list[tuple[int, str]],
    gathered: dict[str, dict[str, Any]],
    categories: Sequence[str] | None,
) -> Tested:
    """Per concept, its vector and a random one in every run, their scores for every class,
    the two-sided test and Benjamini-Hochberg over concepts and classes."""
    channels = layer.plan.channels
    method = CAVS[opts.cav]
    randoms = _matrix(gathered["random"], sets["random"], channels)
    grads = {
        index: _matrix(gathered[f"gradient:{index}"], sets[f"class:{name}"], channels)
        for index, name in targets
    }
    concepts, rows, saved = [], [], {}
    for c, (name, _) in enumerate(opts.concepts):
        positives = _matrix(gathered[f"concept:{name}"], sets[f"concept:{name}"], channels)
        # Checked when the sets were read; fewer here only when images could not be read.
        size = min(opts.per_run or len(positives), len(positives), len(randoms) // 2)
        vectors, nulls = [], []
        for r, (chosen, neg, pos) in enumerate(
            draws(len(positives), len(randoms), opts.runs, size, opts.seed, c)
        ):
            vectors.append(method.train(positives[chosen], randoms[neg], opts.seed + r))
            nulls.append(method.train(randoms[pos], randoms[neg], opts.seed + r))
        v, n = np.stack(vectors), np.stack(nulls)
        mean = v.mean(axis=0)
        direction = mean / max(float(np.linalg.norm(mean)), 1e-12)
        saved[name] = (direction, v, n)
        concepts.append(
            {
                "concept": name,
                "folder": folders[f"concept:{name}"][0],
                "images": int(len(positives)),
                "per_run": int(size),
                "vector": f"{VECTORS}/{output.safe_name(name)}.npy",
                "agreement": float(np.mean(v @ direction)),
            }
        )
        for index, target in targets:
            rows.append(_score(name, index, target, v, n, grads[index], opts, categories))
    q = benjamini_hochberg(np.array([r["p"] for r in rows], dtype=np.float64))
    for row, value in zip(rows, q.tolist(), strict=True):
        row["q"] = float(f"{value:.6g}")
        row["significant"] = bool(value <= opts.alpha)
    inputs = {index: int(len(g)) for index, g in grads.items()}
    return Tested(concepts, rows, saved, int(len(randoms)), inputs)


def _class_name(categories: Sequence[str] | None, index: int) -> str | None:
    return categories[index] if categories and index < len(categories) else None


def _score(
    concept: str,
    index: int,
    target: str,
    vectors: F64,
    nulls: F64,
    grads: F64,
    opts: TcavOptions,
    categories: Sequence[str] | None,
) -> dict[str, Any]:
    """One concept and class: the runs' scores, the random vectors', and the test."""
    scores, magnitudes = tcav_scores(grads, vectors)
    random, _ = tcav_scores(grads, nulls)
    p = two_sided_test(scores, random, seed=opts.seed) if len(grads) else float("nan")
    return {
        "concept": concept,
        "target": index,
        "target_name": _class_name(categories, index) or (target if not target.isdigit() else None),
        "score": _num(scores.mean()),
        "spread": _num(scores.std(ddof=1)),
        "scores": [_num(v) for v in scores],
        "magnitude": _num(magnitudes.mean()),
        "random": _num(random.mean()),
        "random_spread": _num(random.std(ddof=1)),
        "random_scores": [_num(v) for v in random],
        "p": _num(p),
        "runs": int(len(scores)),
        "welch_t": welch_t(scores, random) if len(grads) else None,
        "images": int(len(grads)),
    }


def _protocol(opts: TcavOptions, folders: Mapping[str, list[str]], randoms: int) -> dict[str, Any]:
    return {
        "runs": opts.runs,
        "seed": opts.seed,
        "random": folders["random"],
        "random_images": randoms,
        "per_run": opts.per_run or "as many as the concept has, at most half the random images",
        "activation": "each image's maps averaged over positions (channel space)",
        "gradient": (
            "the gradient of the class score with respect to the layer, summed over positions: "
            "the derivative along a vector added at every position"
        ),
        "score": "share of the class's images whose directional derivative is above zero",
        "random_vectors": "per run, a vector between two disjoint random draws, found the same way",
        "test": (
            "two-sided permutation test of the mean score, the concept's runs against the random "
            "vectors' runs"
        ),
        "test_permutations": TEST_PERMUTATIONS,
        "alpha": opts.alpha,
        "correction": "Benjamini-Hochberg over concepts and classes",
    }


def _write_vectors(
    out: Path,
    saved: Mapping[str, tuple[F64, F64, F64]],
    model: str,
    layer: Layer,
    opts: TcavOptions,
) -> None:
    """``cavs/<concept>.npy`` (the mean direction, float32, one value per channel) and
    ``cavs/cavs.safetensors`` (each concept's direction, its runs and the random vectors'),
    with the layer and how they were found in its metadata."""
    import torch
    from safetensors.torch import save

    tensors: dict[str, Any] = {}
    for name, (direction, runs, nulls) in saved.items():
        vector = torch.from_numpy(direction.astype(np.float32))
        output.write_tensor(out / VECTORS / f"{output.safe_name(name)}.npy", vector, "npy")
        tensors[name] = vector
        tensors[f"{name}.runs"] = torch.from_numpy(runs.astype(np.float32))
        tensors[f"{name}.random"] = torch.from_numpy(nulls.astype(np.float32))
    metadata = {
        "actviz": json.dumps(
            {
                "format": "actviz-cav/1",
                "model": model,
                "layer": layer.plan.key,
                "module": layer.module,
                "space": "channel",
                "channels": layer.plan.channels,
                "cav": opts.cav,
                "runs": opts.runs,
                "seed": opts.seed,
            }
        )
    }
    output.write_bytes(out / VECTORS / "cavs.safetensors", bytes(save(tensors, metadata=metadata)))


def _num(value: Any) -> float | None:
    v = float(value)
    return None if not np.isfinite(v) else float(f"{v:.6g}")
