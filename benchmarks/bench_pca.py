"""``--view pca`` against a grids-only run of the same folder.

Both are ``actviz.run`` on resnet18 (random weights, the default selection: every
convolution), the same folder and batch size, every grid and the report; the PCA run also
samples every layer of every image, fits the components once the last image has run, and
draws one PCA picture per layer and image from the captures its pass kept: the model runs
once per image. ``two passes`` is the same run with nothing kept
(``actviz.run.pca_pass.KEEP_BYTES = 0``): every image runs through the model a second time
for its PCA pictures, as every image did before the pass kept its captures. Same process,
alternating, medians of ``--repeat``: wall time, and the process's CPU time (every thread),
which a machine busy with other work disturbs less.

Each run writes about 500 files more with the view than without, so the file system's cost
of making a file counts: it is printed first, measured in the folder the runs write in
(``--dir``, the system's temporary folder by default). Every run's files are kept until the
end, and written to the disk (``os.sync``) before the next run starts, outside its time. On
this project's CPU machine (ext4 without a journal) making a file costs 15-600 us, and most
when many files were deleted nearby in the last half minute: the allocator passes over the
inodes they freed. Deleting each run's pictures once it is timed would make every later
run pay for that, and the view (whose files come last) most: 1.33x and 1.42x, where the
same code measures 1.18x with the files kept. Kept without the sync, their 75 MB would be
written back while the next runs are timed.

    python benchmarks/bench_pca.py [--images 24] [--repeat 3] [--layers SEL] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import make_folder  # noqa: E402

import actviz  # noqa: E402
import actviz.run.pca_pass  # noqa: E402

MODEL = "resnet18"
KEEP = actviz.run.pca_pass.KEEP_BYTES
VARIANTS = ("grids", "pca", "two passes")


def timed(folder: Path, work: Path, layers: str | None, variant: str) -> tuple[float, float, int]:
    """Wall and CPU seconds of one run, and how many files it wrote."""
    out = Path(tempfile.mkdtemp(dir=work)) / "out"
    pca = variant != "grids"
    actviz.run.pca_pass.KEEP_BYTES = 0 if variant == "two passes" else KEEP
    start, start_cpu = time.perf_counter(), time.process_time()
    actviz.run(MODEL, [folder], layers=layers, out=out, weights="none", batch_size=8, pca=pca)
    seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    written = list(out.rglob("*_pca.png"))
    assert bool(written) == pca
    files = sum(1 for p in out.rglob("*") if p.is_file())
    # Kept (deleting them slows the next runs' files), but on the disk before the next run.
    if hasattr(os, "sync"):
        os.sync()
    return seconds, cpu, files


def file_cost(work: Path, files: int = 500) -> float:
    """Seconds to make one empty file in a new folder under ``work`` (median of 5 rounds)."""
    rounds = []
    for _ in range(5):
        folder = Path(tempfile.mkdtemp(prefix="files", dir=work))
        start = time.perf_counter()
        for i in range(files):
            (folder / f"{i}.png").touch()
        rounds.append((time.perf_counter() - start) / files)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", default=None)
    parser.add_argument("--dir", type=Path, default=None, help="where the runs write")
    args = parser.parse_args()
    times: dict[str, list[tuple[float, float, int]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="actviz-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        first_cost = file_cost(work)
        print(f"making a file in {work.parent}: {first_cost * 1e6:.0f} us")
        folder = make_folder(work / "photos", args.images)
        timed(folder, work, args.layers, "grids")  # warm-up: imports, allocator, templates
        for _ in range(args.repeat):
            for variant in VARIANTS:
                times[variant].append(timed(folder, work, args.layers, variant))
        last_cost = file_cost(work)
    med = {v: statistics.median(w for w, _, _ in t) for v, t in times.items()}
    cpu = {v: statistics.median(c for _, c, _ in t) for v, t in times.items()}
    files = {v: t[0][2] for v, t in times.items()}
    what = args.layers or "default selection"
    print(f"{MODEL}, {args.images} photos, {what}, batch 8; medians of {args.repeat}")
    labels = {"grids": "grids only", "pca": "with --view pca"}
    labels["two passes"] = "--view pca, two passes"
    for variant, label in labels.items():
        print(f"    {label:25s} {med[variant]:6.2f} s  (CPU {cpu[variant]:6.2f} s)")
    print(
        f"    ratio {med['pca'] / med['grids']:.2f}  (target <= 1.3); "
        f"CPU time {cpu['pca'] / cpu['grids']:.2f}"
    )
    # What the file system alone adds: an empty file's cost, before and after the runs.
    extra = files["pca"] - files["grids"]
    low, high = sorted((first_cost, last_cost))
    print(
        f"    the view writes {extra} files more ({files['pca']} against {files['grids']}); "
        f"at {low * 1e6:.0f}-{high * 1e6:.0f} us a file (before and after the runs), making "
        f"them takes {extra * low:.2f}-{extra * high:.2f} s of its "
        f"{med['pca'] - med['grids']:.2f} s more"
    )
    print(
        f"    two passes: ratio {med['two passes'] / med['grids']:.2f}; "
        f"CPU time {cpu['two passes'] / cpu['grids']:.2f}"
    )


if __name__ == "__main__":
    main()
