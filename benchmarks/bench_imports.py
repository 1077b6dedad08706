"""Start-up of a whole ``actviz run``: what its imports cost, by package.

Runs ``python -X importtime -m actviz run resnet34 IMAGE --layers conv --weights none`` (the
process ``bench_process.py`` times) ``--repeat`` times and sums each module's own import time
(``-X importtime``'s "self" column) by top-level package: torch, torchvision, pyarrow,
matplotlib, actviz's own modules, the command line's (typer, click, rich, pydantic), and the
rest. Medians over the runs; a busy machine inflates every figure alike.

    python benchmarks/bench_imports.py [--image sample_images/cat.jpg] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GROUPS = {
    "torch": ("torch", "functorch", "torchgen", "sympy", "mpmath", "networkx", "triton", "cuda"),
    "torchvision": ("torchvision",),
    "pyarrow": ("pyarrow",),
    "matplotlib": ("matplotlib", "pyparsing", "cycler", "kiwisolver", "dateutil", "contourpy"),
    "jinja2": ("jinja2", "markupsafe"),
    "command line": ("typer", "click", "rich", "pydantic", "pydantic_core", "shellingham"),
    "numpy": ("numpy",),
    "PIL": ("PIL",),
    "actviz": ("actviz",),
}
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)")


def by_package(stderr: str) -> dict[str, float]:
    """Seconds of import per group, from one process's ``-X importtime`` lines."""
    seconds = dict.fromkeys([*GROUPS, "other"], 0.0)
    for match in _LINE.finditer(stderr):
        own, name = int(match[1]) / 1e6, match[3]
        top = name.split(".")[0]
        group = next((g for g, names in GROUPS.items() if top in names), "other")
        seconds[group] += own
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=HERE.parent / "sample_images" / "cat.jpg")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    for i in range(args.repeat):
        out = Path(tempfile.mkdtemp(prefix="actviz-bench-imports-")) / f"out{i}"
        argv = [sys.executable, "-X", "importtime", "-m", "actviz", "run", "resnet34"]
        argv += [str(args.image), "-l", "conv", "-w", "none", "-o", str(out)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=True)
        finally:
            shutil.rmtree(out.parent, ignore_errors=True)
        runs.append(by_package(done.stderr))
    med = {group: statistics.median(r[group] for r in runs) for group in runs[0]}
    total = statistics.median(sum(r.values()) for r in runs)
    print(f"actviz run resnet34, 1 image, --layers conv: imports, median of {args.repeat}")
    print(f"  {'total':14s} {total:6.2f} s")
    for group, seconds in sorted(med.items(), key=lambda kv: -kv[1]):
        print(f"  {group:14s} {seconds:6.2f} s  ({seconds / total:.0%})")


if __name__ == "__main__":
    main()
