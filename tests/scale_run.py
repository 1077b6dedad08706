"""A synthetic folder run of any size as the report receives it: what the report tests and
``benchmarks/bench_report.py`` feed to ``build_report``.

Image ``n`` has a fixed part of every flag kind (every 97th a dead ReLU, every 331st NaN in
the second layer, every 500th unreadable), so any count makes the same kinds of pages.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from PIL import Image

from actviz.report.pages import LINKED_FIRST, LISTED, PAGE_ROWS, PER_IMAGE_CHARTS, ReportImages
from actviz.statistics import FLAG_KINDS

EVIL = "<script>alert(1)</script>"
"""A layer name that is markup: every page must escape it."""

SCALE_LAYERS = ["conv1", EVIL, "relu"]


def scale_stat(mean: float, *, dead: float = 0.0, nan: int = 0) -> dict[str, Any]:
    """A LayerStats.to_dict() of a small layer."""
    return {
        "count": 144,
        "mean": mean,
        "std": 1.0,
        "min": -2.0,
        "max": 2.0,
        "p01": -1.8,
        "p99": 1.8,
        "zero_frac": 0.0,
        "neg_frac": 0.5,
        "nan": nan,
        "inf": 0,
        "channels": 4,
        "dead_channels": round(4 * dead),
        "dead_frac": dead,
        "dead_indices": list(range(round(4 * dead))),
    }


def scale_flags(number: int) -> list[dict[str, Any]]:
    """Every 97th image has a dead ReLU, every 331st NaN in the second layer."""
    flags = []
    if number % 331 == 7:
        flags.append({"layer": EVIL, "kind": "nan", "message": "3 NaN values (2.08%)"})
    if number % 97 == 5:
        flags.append({"layer": "relu", "kind": "dead", "message": "3 of 4 channels never positive"})
    return flags


def scale_key(number: int) -> str:
    return f"im {number:05d}"  # a space: links to folders are percent-encoded too


def scale_failed(number: int) -> bool:
    return number % 500 == 499


def make_large_run(
    root: Path | None, count: int, *, worst: int = 10
) -> tuple[dict[str, Any], dict[str, Any], ReportImages]:
    """A run of ``count`` images as a streamed run hands it to the report: a manifest without
    its images, stats.json format 2, the linked records (the first LINKED_FIRST, the ``worst``
    of each flag kind, the first failures) and a generator of every image's slim row. With a
    root, every drawn image's folder is made and the linked images' grids are written."""
    flagged = [n for n in range(count) if scale_flags(n) and not scale_failed(n)]
    ok = count - sum(scale_failed(n) for n in range(count))

    def severity(n: int) -> float:
        return (n * 7919) % 13  # deterministic, not in image order

    worst_lists: dict[str, list[dict[str, Any]]] = {}
    counts = dict.fromkeys(FLAG_KINDS, 0)
    for kind in ("nan", "dead"):
        having = [n for n in flagged if any(f["kind"] == kind for f in scale_flags(n))]
        counts[kind] = len(having)
        having.sort(key=lambda n: (-severity(n), scale_key(n)))
        worst_lists[kind] = [
            {
                "image": scale_key(n),
                "layer": f["layer"],
                "message": f["message"],
                "severity": severity(n),
            }
            for n in having[:worst]
            for f in scale_flags(n)
            if f["kind"] == kind
        ]
    chosen = {n for n in range(min(LINKED_FIRST, count)) if not scale_failed(n)} | {
        int(e["image"].split()[-1]) for lst in worst_lists.values() for e in lst
    }
    failures = [n for n in range(count) if scale_failed(n)][:LISTED]

    def record(n: int) -> dict[str, Any]:
        key = scale_key(n)
        if scale_failed(n):
            return {
                "path": f"/data/{key}.jpg",
                "out_dir": key,
                "status": "failed",
                "error": f"cannot read <{key}>",
                "predictions": [],
                "layers": [],
            }
        flags = scale_flags(n)
        kinds = {(f["layer"], f["kind"]) for f in flags}
        layers = []
        for index, name in enumerate(SCALE_LAYERS):
            file = f"{key}/{index:02d}.png"
            layers.append(
                {
                    "name": name,
                    "type": "ReLU" if name == "relu" else "Conv2d",
                    "shape": [1, 4, 6, 6],
                    "channels_shown": 4,
                    "channels_total": 4,
                    "file": file,
                    "stats": scale_stat(
                        0.1 * index,
                        dead=0.75 if (name, "dead") in kinds else 0.0,
                        nan=3 if (name, "nan") in kinds else 0,
                    ),
                }
            )
        return {
            "path": f"/data/{key}.jpg",
            "out_dir": key,
            "status": "ok",
            "error": None,
            "size": [8, 8],
            "predictions": [{"index": 3, "label": "cat <b>", "probability": 0.5}],
            "layers": layers,
            "flags": flags,
            "first_nonfinite": next((f["layer"] for f in flags if f["kind"] == "nan"), None),
        }

    linked = [record(n) for n in sorted(chosen | set(failures))]
    if root is not None:
        for n in range(count):
            if not scale_failed(n):
                (root / scale_key(n)).mkdir(parents=True, exist_ok=True)
        for image in linked:
            for entry in image["layers"]:
                Image.new("RGB", (24, 16), (90, 120, 200)).save(root / entry["file"])

    def rows() -> Iterator[dict[str, Any]]:
        for n in range(count):
            failed = scale_failed(n)
            yield {
                "out_dir": scale_key(n),
                "path": f"/data/{scale_key(n)}.jpg",
                "status": "failed" if failed else "ok",
                "error": f"cannot read <{scale_key(n)}>" if failed else None,
                "prediction": None if failed else {"index": 3, "label": "cat", "probability": 0.5},
                "flags": [] if failed else sorted({f["kind"] for f in scale_flags(n)}),
                "thumbnail": None,
            }

    def layer_flagged(name: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for n in flagged:
            for f in scale_flags(n):
                if f["layer"] == name:
                    found[f["kind"]] = found.get(f["kind"], 0) + 1
        return found

    spread = {"p01": -0.5, "p50": 0.1, "p99": 0.7}
    stats = {
        "format": 2,
        "flag_kinds": list(FLAG_KINDS),
        "thresholds": {},
        "images": {
            "count": ok,
            "flagged": len(flagged),
            "table": "stats.parquet",
            "csv": "stats.csv",
        },
        "run": {
            "layers": [
                {
                    "name": name,
                    **scale_stat(0.1 * index, dead=0.01 if name == "relu" else 0.0),
                    "images": ok,
                    "across_images": {
                        "mean": spread,
                        "rms": spread,
                        "max": spread,
                        "dead_frac": spread,
                    },
                    "flagged": layer_flagged(name),
                }
                for index, name in enumerate(SCALE_LAYERS)
            ],
            "flags": [{"layer": "relu", "kind": "dead", "message": "pooled: 1% dead"}],
            "first_nonfinite": None,
        },
        "flags": {
            "images": counts,
            "layers": [
                {"layer": EVIL, "kind": "nan", "images": counts["nan"], "first": scale_key(7)},
                {"layer": "relu", "kind": "dead", "images": counts["dead"], "first": scale_key(5)},
            ],
            "worst": worst_lists,
            "first_nonfinite": [{"layer": EVIL, "images": counts["nan"], "first": scale_key(7)}],
        },
    }
    manifest = {
        "actviz": "0.1.0",
        "created": "2026-01-02T03:04:05+00:00",
        "model": "resnet18",
        "weights": {"spec": "none", "random": True, "seed": 0, "source": "random"},
        "device": "cpu",
        "selector": "conv,relu",
        "layers": ["conv1", EVIL, "relu"],
        "images": {
            "count": count,
            "ok": ok,
            "failed": count - ok,
            "reused": 0,
            "records": ".actviz-records.jsonl",
            "table": "stats.parquet",
        },
        "skipped": [{"path": f"/data/notes{k}.txt", "reason": "not an image"} for k in range(120)],
        "warnings": [],
    }
    images = ReportImages(total=count, failed=count - ok, linked=linked, rows=rows)
    return manifest, stats, images


def expected_files(images: ReportImages) -> int:
    """How many files the report of a folder run writes: index pages, a page per linked image,
    a page per layer, a chart per linked image that is flagged or among the first
    PER_IMAGE_CHARTS, and the run's chart."""
    linked = [im for im in images.linked if im["status"] == "ok"]
    charted = [n for n, im in enumerate(linked) if n < PER_IMAGE_CHARTS or im["flags"]]
    index_pages = math.ceil(images.total / PAGE_ROWS)
    return index_pages + len(linked) + len(SCALE_LAYERS) + len(charted) + 1
