"""Scale: memory, speed and file sizes of whole `actviz` processes over 10x more images.

Each configuration runs as fresh `python -m actviz ...` processes over a small and a big folder
of tiny distinct-named PNGs, with a tiny convolutional model (``tiny_net`` below, random
weights, 24 x 24 input) so that 20,000 images take a minute or two on two cores. Per process:
its peak resident memory (``ru_maxrss`` of exactly that process, from ``os.wait4``: for the Ray
engine, the driver), its wall time, and the bytes of its JSON files (manifest.json, stats.json,
top-images.json). Speed is the marginal rate, ``(N - 1) / (wall(N) - wall(1 image))``, so the
start-up (interpreter, torch, the model, Ray) counts on neither side. The table prints the
big/small ratios, measured in the same run, against the targets: peak RSS at most 1.05x, images/s
at least 0.95x, JSON files the same size (at most 1.05x).

After the big `stats` run, `stats --resume` of the same folder (nothing left to do) is timed
against the 1-image start-up (target: under 2 s more), and a copy of that run whose ledger ends
in a torn line must resume without error to the same image count.

    python benchmarks/bench_scale.py                 # full: 2,000 vs 20,000 (about 15 min)
    python benchmarks/bench_scale.py --quick         # smoke: 200 vs 2,000
    python benchmarks/bench_scale.py --only stats,grids --keep /tmp/scale
    python benchmarks/bench_scale.py --only ray --sizes 500,5000 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
MODEL = f"{HERE}:tiny_net"
SIZE = 24
#: Distinct pictures behind the links; every file has a name (and output folder) of its own.
POOL = 256
PER_FOLDER = 1000
JSON_FILES = ("manifest.json", "stats.json", "top-images.json")
LEDGER = ".actviz-records.jsonl"

RSS_TARGET = 1.05
RATE_TARGET = 0.95
SIZE_TARGET = 1.05
RESUME_TARGET_S = 2.0


def tiny_net() -> Any:
    """The benchmark's model (loaded by actviz as ``bench_scale.py:tiny_net``): eight small
    convolutions and a classifier, cheap enough that actviz's own per-image work dominates,
    with enough layers that a record kept per image shows in the memory."""
    from torch import nn

    layers: list[nn.Module] = []
    widths = [3, 16, 16, 32, 32, 32, 32, 32, 32]
    for i, (c_in, c_out) in enumerate(zip(widths, widths[1:], strict=False)):
        layers += [nn.Conv2d(c_in, c_out, 3, stride=2 if i in (1, 3) else 1, padding=1)]
        layers += [nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


# -- folders ---------------------------------------------------------------------------------


def build_pool(root: Path, count: int = POOL, *, seed: int = 0) -> list[Path]:
    """``count`` distinct random ``SIZE`` x ``SIZE`` PNGs (made once, reused)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        target = root / f"p{i:04d}.png"
        pixels = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
        if not target.exists():
            Image.fromarray(pixels).save(target)
        paths.append(target)
    return paths


def build_folder(root: Path, count: int, pool: Sequence[Path]) -> Path:
    """A folder of ``count`` images under distinct names, ``PER_FOLDER`` to a subfolder, each
    a hard link to a picture of ``pool`` (a copy where links are refused): 20,000 files take
    a second or two. A folder already complete (its ``.count`` marker beside it) is reused."""
    marker = root.with_name(root.name + ".count")
    if root.is_dir() and marker.is_file() and marker.read_text() == str(count):
        return root
    shutil.rmtree(root, ignore_errors=True)
    for i in range(count):
        target = root / f"d{i // PER_FOLDER:03d}" / f"img{i:06d}.png"
        if i % PER_FOLDER == 0:
            target.parent.mkdir(parents=True)
        source = pool[i % len(pool)]
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
    marker.write_text(str(count))
    return root


# -- one process -----------------------------------------------------------------------------


@dataclass
class Measure:
    """One ``python -m actviz`` process."""

    images: int
    wall: float
    rss_mib: float
    rc: int
    cpu: float = 0.0  # user + system seconds of the process itself
    json_bytes: int = 0
    counted: int | None = None  # images the run's files say it did
    files: int = 0  # files written under OUT
    pages: int = 0  # of which HTML pages
    stderr: str = ""


def run_actviz(argv: Sequence[str], *, images: int, log: Path) -> Measure:
    """Run ``python -m actviz ARGV`` and measure exactly that process: ``os.wait4`` gives its
    own resource usage, not that of its children (Ray's workers, decoding processes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    with log.open("w") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "actviz", *argv],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=REPO,
            env=env,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc  # reaped here, not by Popen
    tail = log.read_text(errors="replace")[-2000:] if rc else ""
    cpu = usage.ru_utime + usage.ru_stime
    return Measure(images, wall, usage.ru_maxrss / 1024, rc, cpu, stderr=tail)


def json_bytes(out: Path) -> int:
    return sum((out / name).stat().st_size for name in JSON_FILES if (out / name).is_file())


def count_files(out: Path) -> tuple[int, int]:
    """Files under ``out``, and how many of them are HTML pages."""
    names = [name for _, _, files in os.walk(out) for name in files]
    return len(names), sum(name.endswith(".html") for name in names)


def counted_images(out: Path) -> int | None:
    """How many images the run's files say it finished (whatever the format), or None."""
    for name in ("stats.json", "manifest.json", "top-images.json"):
        try:
            data = json.loads((out / name).read_text())
        except (OSError, ValueError):
            continue
        images = data.get("images") if isinstance(data, dict) else None
        if isinstance(images, int):
            return images
        if isinstance(images, list):
            return len(images)
        if isinstance(images, dict):
            for key in ("count", "ok", "total"):
                if isinstance(images.get(key), int):
                    return int(images[key])
            if name == "stats.json" and "table" not in images:
                return len(images)  # format 1: one entry per image
    return None


# -- configurations --------------------------------------------------------------------------

COMMON = ["--weights", "none", "--input-size", f"{SIZE},{SIZE}", "-b", "64", "-q"]


@dataclass
class Config:
    """A command measured over a small and a big folder."""

    name: str
    what: str
    argv: Callable[[Path, Path], list[str]]  # (folder, out) -> actviz arguments
    small: int
    big: int
    quick: tuple[int, int]
    rate_target: bool = True
    size_target: bool = True
    results: dict[int, Measure] = field(default_factory=dict)


def _stats(folder: Path, out: Path) -> list[str]:
    return ["stats", MODEL, str(folder), "-o", str(out), *COMMON]


def _no_images(folder: Path, out: Path) -> list[str]:
    return ["run", MODEL, str(folder), "-o", str(out), "--no-images", *COMMON]


def _grids(folder: Path, out: Path) -> list[str]:
    return ["run", MODEL, str(folder), "-o", str(out), *COMMON]


def _ray(folder: Path, out: Path) -> list[str]:
    return [*_stats(folder, out), "--engine", "ray", "-j", "2"]


def _top(folder: Path, out: Path) -> list[str]:
    return ["top-images", MODEL, str(folder), "-o", str(out), *COMMON]


CONFIGS = [
    Config("stats", "stats", _stats, 2000, 20000, (200, 2000)),
    Config("no-images", "run --no-images", _no_images, 2000, 20000, (200, 2000)),
    Config(
        "grids",
        "run (grids, report)",
        _grids,
        200,
        2000,
        (20, 200),
        rate_target=False,
        size_target=False,
    ),
    # The Ray driver: two actors share the machine's two cores with it.
    Config("ray", "stats --engine ray -j 2 (driver)", _ray, 2000, 20000, (200, 2000)),
    Config("top-images", "top-images", _top, 2000, 20000, (200, 2000)),
]


def measure_config(
    config: Config, work: Path, pool: list[Path], sizes: tuple[int, int], repeat: int = 1
) -> dict[str, Any]:
    """The 1-image start-up, then the small and the big folder; outputs removed after each
    (the big `stats` one is kept for the resume timing and returned). The start-up and the
    small run are the ones a busy machine disturbs most: ``repeat`` runs each, and their mean
    times (and highest memory) are kept."""
    kept: dict[str, Any] = {}
    for n in (1, *sizes):
        folder = build_folder(work / "folders" / f"f{n}", n, pool)
        out = work / "out" / f"{config.name}-{n}"
        runs: list[Measure] = []
        for _ in range(repeat if n != sizes[1] else 1):
            shutil.rmtree(out, ignore_errors=True)
            print(f"  {config.name}: {n} image(s) ...", end=" ", flush=True)
            log = work / f"{config.name}-{n}.log"
            m = run_actviz(config.argv(folder, out), images=n, log=log)
            m.json_bytes = json_bytes(out)
            m.counted = counted_images(out)
            m.files, m.pages = count_files(out)
            runs.append(m)
            print(
                f"{m.wall:.1f} s (CPU {m.cpu:.1f} s), {m.rss_mib:.0f} MiB"
                + (f", exit {m.rc}" if m.rc else "")
            )
            if m.rc:
                print(m.stderr, file=sys.stderr)
                break
        m = runs[-1]
        if not m.rc:
            m.wall = sum(r.wall for r in runs) / len(runs)
            m.cpu = sum(r.cpu for r in runs) / len(runs)
            m.rss_mib = max(r.rss_mib for r in runs)
        config.results[n] = m
        if config.name == "stats" and n == sizes[1]:
            kept = {"out": out, "folder": folder, "measure": m}
        else:
            shutil.rmtree(out, ignore_errors=True)
    return kept


def rate(config: Config, n: int, *, cpu: bool = False) -> float | None:
    """Images per second beyond the 1-image start-up: of wall time, or of the process's own
    CPU time (``cpu``: less disturbed by other work on a shared machine)."""
    base, m = config.results.get(1), config.results.get(n)
    if not base or not m or m.rc or base.rc:
        return None
    spent = m.cpu - base.cpu if cpu else m.wall - base.wall
    return (n - 1) / spent if spent > 0 else None


# -- resume ----------------------------------------------------------------------------------


def ledger_read_seconds(out: Path) -> float | None:
    """actviz's own ledger reader on this run's ledger, timed in a fresh process (None when
    the reader is not there as this benchmark knows it)."""
    code = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from actviz.run.records import RunRecords\n"
        "out = Path(sys.argv[1])\n"
        f"line = (out / {LEDGER!r}).open().readline()\n"
        "records = RunRecords(out, json.loads(line)['settings'])\n"
        "t = time.perf_counter(); done = records.completed()\n"
        "print(time.perf_counter() - t, len(done))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env
    )
    try:
        return float(done.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def _difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two JSON values first differ, numbers compared to 1e-4 relative (an image done
    again in a batch of another size may round its last bit differently), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return where or "/"
        found = (_difference(a[k], b[k], f"{where}/{k}") for k in a)
        return next((x for x in found if x), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return where or "/"
        found = (
            _difference(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))
        )
        return next((x for x in found if x), None)
    if isinstance(a, float) and isinstance(b, float):
        return None if math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-7) else where
    return None if a == b else where


def _same_stats(one: Path, other: Path) -> str:
    try:
        a, b = (json.loads((p / "stats.json").read_text()) for p in (one, other))
    except (OSError, ValueError):
        return "stats.json not comparable"
    where = _difference(a, b)
    return "stats.json as the clean run's" if where is None else f"stats.json differs at {where}"


def measure_resume(config: Config, kept: dict[str, Any], work: Path) -> list[str]:
    """`stats --resume` with nothing left to do, and from a ledger with a torn last line."""
    out, folder, big = kept["out"], kept["folder"], kept["measure"]
    base = config.results[1]
    lines = [f"resume of the {big.images}-image `stats` run (nothing left to do):"]
    argv = [*config.argv(folder, out), "--resume"]
    m = run_actviz(argv, images=big.images, log=work / "resume.log")
    extra = m.wall - base.wall
    verdict = "PASS" if m.rc == 0 and extra < RESUME_TARGET_S else "FAIL"
    lines.append(
        f"  whole command {m.wall:.2f} s, 1-image start-up {base.wall:.2f} s: "
        f"{extra:+.2f} s (target < {RESUME_TARGET_S:.0f} s) {verdict}; CPU {m.cpu:.2f} s "
        f"against {base.cpu:.2f} s ({m.cpu - base.cpu:+.2f} s); peak RSS {m.rss_mib:.0f} MiB"
        + (f"; exit {m.rc}" if m.rc else "")
    )
    read = ledger_read_seconds(out)
    if read is not None:
        lines.append(f"  actviz's ledger reader alone (in a fresh process): {read:.2f} s")
    ledger = out / LEDGER
    if ledger.is_file():
        lines.append(f"  ledger {ledger.stat().st_size / 2**20:.1f} MiB")
    if m.rc:
        lines.append("  " + m.stderr.strip().replace("\n", "\n  "))

    torn = out.with_name(out.name + "-torn")
    shutil.rmtree(torn, ignore_errors=True)
    shutil.copytree(out, torn)
    if (torn / LEDGER).is_file():
        data = (torn / LEDGER).read_bytes().rstrip(b"\n")
        cut = data.rfind(b"\n") + 1  # the last line's start
        (torn / LEDGER).write_bytes(data[: cut + (len(data) - cut) // 2])
        t = run_actviz(
            [*config.argv(folder, torn), "--resume"], images=big.images, log=work / "torn.log"
        )
        count = counted_images(torn)
        ok = t.rc == 0 and count == big.images
        lines.append(
            f"  ledger with a torn last line: exit {t.rc}, {count} images in the outputs "
            f"(expected {big.images}), {t.wall:.2f} s {'PASS' if ok else 'FAIL'}; "
            + _same_stats(torn, out)
        )
        if t.rc:
            lines.append("  " + t.stderr.strip().replace("\n", "\n  "))
    else:
        lines.append(f"  no {LEDGER} in the run's folder: torn-line check skipped")
    shutil.rmtree(torn, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return lines


# -- the table -------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a and b is not None else None


def _fmt(value: float | None, spec: str) -> str:
    return "-".rjust(int(spec.split(".")[0])) if value is None else format(value, spec)


def _verdict(ratio: float | None, ok: Callable[[float], bool], wanted: bool) -> str:
    if not wanted:
        return "-"
    return "FAIL" if ratio is None or not ok(ratio) else "PASS"


def table(configs: Sequence[Config], sizes: dict[str, tuple[int, int]]) -> list[str]:
    head = (
        f"{'config':34} {'N small':>7} {'N big':>7} | {'RSS MiB':>11} {'ratio':>5} | "
        f"{'images/s':>11} {'ratio':>5} {'CPU':>5} | {'JSON KiB':>13} {'ratio':>5} | "
        f"{'RSS':>4} {'speed':>5} {'size':>4}"
    )
    rows = [head, "-" * len(head)]
    for c in configs:
        small, big = sizes[c.name]
        ms, mb = c.results.get(small), c.results.get(big)
        if not ms or not mb:
            continue
        rss = _ratio(ms.rss_mib, mb.rss_mib)
        rs, rb = rate(c, small), rate(c, big)
        speed = _ratio(rs, rb)
        cpu = _ratio(rate(c, small, cpu=True), rate(c, big, cpu=True))
        size = _ratio(ms.json_bytes, mb.json_bytes) if ms.json_bytes else None
        failed = ms.rc or mb.rc
        rows.append(
            f"{c.what:34} {small:7d} {big:7d} | {ms.rss_mib:5.0f} {mb.rss_mib:5.0f} "
            f"{_fmt(rss, '5.3f')} | {_fmt(rs, '5.0f')} {_fmt(rb, '5.0f')} "
            f"{_fmt(speed, '5.2f')} {_fmt(cpu, '5.2f')} | "
            f"{ms.json_bytes / 1024:6.0f} {mb.json_bytes / 1024:6.0f} "
            f"{_fmt(size, '5.2f')} | "
            f"{'FAIL' if failed else _verdict(rss, lambda r: r <= RSS_TARGET, True):>4} "
            f"{_verdict(speed, lambda r: r >= RATE_TARGET, c.rate_target):>5} "
            f"{_verdict(size, lambda r: r <= SIZE_TARGET, c.size_target):>4}"
        )
    rows.append(
        f"targets: RSS big/small <= {RSS_TARGET}, images/s big/small >= {RATE_TARGET}, "
        f"JSON files big/small <= {SIZE_TARGET}.\nimages/s = (N - 1) / (wall(N) - wall(1 image)); "
        "CPU: the same ratio of the process's own CPU seconds (the driver's, for Ray), "
        "which other work on the machine disturbs less"
    )
    for c in configs:
        base = c.results.get(1)
        small, big = sizes[c.name]
        detail = ", ".join(
            f"{n}: {m.wall:.1f} s (CPU {m.cpu:.1f} s), {m.files} files, {m.pages} HTML"
            + (f" ({m.counted} counted)" if m.counted not in (None, n) else "")
            for n, m in sorted(c.results.items())
            if n != 1
        )
        if base:
            rows.append(
                f"  {c.name}: 1-image start-up {base.wall:.1f} s (CPU {base.cpu:.1f} s), "
                f"{base.rss_mib:.0f} MiB; {detail}"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 10x fewer images")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated configurations: " + ", ".join(c.name for c in CONFIGS),
    )
    parser.add_argument("--keep", type=Path, help="work folder to keep and reuse (folders)")
    parser.add_argument(
        "--sizes", help="SMALL,BIG: these image counts for every configuration chosen"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of the start-up and the small folder (mean)"
    )
    args = parser.parse_args()
    wanted = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = wanted - {c.name for c in CONFIGS}
    if unknown:
        parser.error(f"unknown configuration(s) {sorted(unknown)}")
    configs = [c for c in CONFIGS if not wanted or c.name in wanted]
    work = args.keep or Path(tempfile.mkdtemp(prefix="actviz-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = {c.name: c.quick if args.quick else (c.small, c.big) for c in configs}
    if args.sizes:
        small, big = (int(x) for x in args.sizes.split(","))
        if not 1 < small < big:
            parser.error("--sizes wants SMALL,BIG with 1 < SMALL < BIG")
        sizes = dict.fromkeys(sizes, (small, big))
    print(
        f"work folder {work}; model {MODEL} (random weights, {SIZE} x {SIZE} input), "
        f"{os.cpu_count()} CPU(s)"
    )
    try:
        started = time.perf_counter()
        pool = build_pool(work / "pool")
        for n in sorted({n for s in sizes.values() for n in s}):
            build_folder(work / "folders" / f"f{n}", n, pool)
        print(f"folders built in {time.perf_counter() - started:.1f} s")
        resume: list[str] = []
        for config in configs:
            kept = measure_config(config, work, pool, sizes[config.name], max(1, args.repeat))
            if kept and kept["measure"].rc == 0:
                resume = measure_resume(config, kept, work)
        print()
        print("\n".join(table(configs, sizes)))
        if resume:
            print("\n".join(resume))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "out", ignore_errors=True)


if __name__ == "__main__":
    main()
