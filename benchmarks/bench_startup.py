"""(d) Start-up: ``actviz --help`` and ``actviz list-layers vit_l_16``, as a user runs them.

Each command runs in a fresh process, a few times; the median wall time is printed next to the
time of ``python -c pass`` and ``python -c "import torch, torchvision"`` measured in the same run,
which are the floors these commands cannot beat.

    python benchmarks/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def timed(argv: list[str], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    exe = shutil.which("actviz", path=str(Path(sys.executable).parent)) or "actviz"
    py = sys.executable
    rows = {
        "python -c pass": timed([py, "-c", "pass"], args.repeat),
        "actviz --help": timed([exe, "--help"], args.repeat),
        "import torch, torchvision": timed([py, "-c", "import torch, torchvision"], args.repeat),
        "actviz list-layers vit_l_16": timed([exe, "list-layers", "vit_l_16"], args.repeat),
    }
    for name, seconds in rows.items():
        print(f"  {name:30s} {seconds:6.2f} s")
    print(
        f"(d) --help {rows['actviz --help']:.2f} s (target < 0.5); list-layers vit_l_16 "
        f"{rows['actviz list-layers vit_l_16']:.2f} s (target < 4), of which importing torch "
        f"and torchvision {rows['import torch, torchvision']:.2f} s"
    )


if __name__ == "__main__":
    main()
