"""The Ray engine when an actor's process dies: the batch is retried on a fresh actor, and a
batch that keeps killing its actor fails by name while the run goes on."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app

runner = CliRunner()

# A model whose forward kills its own process (never the test's, which plans the layers with a
# forward of its own): on the first call anywhere ("once", a marker file remembers it), or with
# SIGKILL on every batch that holds a pure red image ("red").
KILLER = """
import os
import signal

import torch
from torch import nn

MARKER = {marker!r}
MODE = {mode!r}
DRIVER = {driver}


class Killer(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        if os.getpid() != DRIVER:
            if MODE == "once" and not os.path.exists(MARKER):
                open(MARKER, "w").close()
                os._exit(1)
            if MODE == "red" and bool(((x[:, 0] > 2.0) & (x[:, 1] < -1.5)).any()):
                os.kill(os.getpid(), signal.SIGKILL)
        return self.conv(x)


def build():
    return Killer()
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local Ray instance on 2 CPUs for the module (the engine joins it, and leaves it up)."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        logging_level=logging.ERROR,
    )
    yield
    ray.shutdown()


def _setup(root: Path, mode: str) -> tuple[str, Path]:
    model = root / "killer.py"
    marker = root / "killed-once"
    model.write_text(KILLER.format(marker=str(marker), mode=mode, driver=os.getpid()))
    photos = root / "photos"
    photos.mkdir()
    for i in range(13):
        color = (255, 0, 0) if i == 5 and mode == "red" else (20 * i,) * 3
        Image.fromarray(np.full((20, 20, 3), color, np.uint8)).save(photos / f"img{i:02d}.png")
    return f"{model}:build", photos


def _top_images(model: str, photos: Path, out: Path, *engine: str) -> tuple[int, str, dict]:
    result = runner.invoke(
        app,
        ["top-images", model, str(photos), "-w", "none", "-l", "conv", "-k", "3"]
        + ["--input-size", "16,16", "-b", "3", "-o", str(out), "--no-report", *engine],
    )
    doc = json.loads((out / "top-images.json").read_text()) if result.exit_code in (0, 3) else {}
    return result.exit_code, result.stderr, doc


@pytest.mark.ray
@pytest.mark.slow
def test_a_batch_whose_actor_died_is_retried_on_a_fresh_one(
    local_ray: None, tmp_path: Path
) -> None:
    model, photos = _setup(tmp_path, "once")
    code, stderr, doc = _top_images(
        model, photos, tmp_path / "ray", "--engine", "ray", "--workers", "2"
    )
    assert (tmp_path / "killed-once").exists()  # an actor did die
    assert code == 0, stderr
    assert doc["images"] == 13 and doc["failed_count"] == 0 and doc["failed"] == []
    local = _top_images(model, photos, tmp_path / "local")
    assert local[0] == 0 and local[2]["layers"] == doc["layers"]  # the same top images


@pytest.mark.ray
@pytest.mark.slow
def test_a_batch_that_kills_every_actor_fails_by_name_and_the_run_goes_on(
    local_ray: None, tmp_path: Path
) -> None:
    model, photos = _setup(tmp_path, "red")
    code, stderr, doc = _top_images(
        model, photos, tmp_path / "ray", "--engine", "ray", "--workers", "2"
    )
    assert code == 3, stderr  # finished, some inputs failed
    failed = {Path(f["path"]).name: f["reason"] for f in doc["failed"]}
    # Batches of 3 in path order: img03-img05 held the red image.
    assert sorted(failed) == ["img03.png", "img04.png", "img05.png"]
    for reason in failed.values():
        assert reason.startswith(
            "the Ray worker died while processing this batch (retried 2 times)"
        ), reason
        assert "\n" not in reason
    assert doc["images"] == 10 and doc["failed_count"] == 3
    assert "failed: " in stderr and "img04.png" in stderr and "Traceback" not in stderr
    tops = {Path(e["path"]).name for c in doc["layers"][0]["channels"] for e in c["top"]}
    assert tops and not tops & set(failed)


# ------------------------------------------------------------------ the scheduling, without Ray


class _RayActorError(Exception):
    def __init__(self, message: str, init_failed: bool = False) -> None:
        super().__init__(message)
        self.actor_init_failed = init_failed


class _RayError(Exception):
    pass


class _FakeRef:
    def __init__(self, actor: _FakeActor, paths: list[str]) -> None:
        self.actor, self.paths = actor, paths
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False


class _Ready:
    def __init__(self, actor: _FakeActor) -> None:
        self.actor = actor

    def remote(self) -> _FakeRef:
        ref = _FakeRef(self.actor, [])
        ref.done, ref.value = self.actor.started, True
        return ref


class _FakeActor:
    """Runs its calls in order; a batch holding a path with "kill" in it kills the actor (or
    only the first time, with ``world.once``), failing every call queued on it. The actors
    numbered ``world.never_from`` and on are never scheduled: they run nothing."""

    def __init__(self, world: _World) -> None:
        self.world = world
        self.queue: list[_FakeRef] = []
        self.alive = True
        self.started = world.actors < world.never_from
        world.actors += 1
        self.summarize = self
        self.ready = _Ready(self)

    def remote(self, paths: list[str]) -> _FakeRef:
        ref = _FakeRef(self, paths)
        if self.world.broken:
            ref.done, ref.error = True, _RayActorError("boom\nValueError: no model", True)
        elif not self.alive:
            ref.done, ref.error = True, _RayActorError("dead")
        else:
            self.queue.append(ref)
        return ref

    def step(self) -> None:
        ref = self.queue.pop(0)
        ref.done = True
        if any("kill" in p for p in ref.paths) and not (self.world.once and self.world.killed):
            self.world.killed += 1
            self.alive = False
            died = "The actor died.\n\tpid: 1\nWorker exit detail: Worker was killed. See logs."
            for queued in [ref, *self.queue]:
                queued.done, queued.error = True, _RayActorError(died)
            self.queue.clear()
        elif any("raise" in p for p in ref.paths):
            ref.error = _RayError("ValueError: bad batch")
        else:
            ref.value = [([i], p) for i, p in enumerate(ref.paths)]


class _World:
    def __init__(self, *, once: bool = False, broken: bool = False, never_from: int = 99) -> None:
        self.once, self.broken, self.never_from = once, broken, never_from
        self.actors = self.killed = 0
        self.exceptions = SimpleNamespace(
            RayActorError=_RayActorError,
            WorkerCrashedError=_RayActorError,
            NodeDiedError=_RayActorError,
            OutOfMemoryError=_RayActorError,
            ObjectLostError=_RayActorError,
            RayError=_RayError,
        )

    def remote(self, spec: Any) -> _FakeActor:  # the actor class
        return _FakeActor(self)

    def wait(
        self, refs: list[_FakeRef], num_returns: int, timeout: float | None = None
    ) -> tuple[list[_FakeRef], list[Any]]:
        while not any(r.done for r in refs):
            heads = [r for r in refs if r.actor.started and r.actor.queue and r.actor.queue[0] is r]
            if not heads:  # only actors that never start: nothing comes back
                assert timeout is not None, "the driver would wait forever"
                time.sleep(timeout)
                return [], refs
            heads[0].actor.step()
        ready = next(r for r in refs if r.done)
        return [ready], [r for r in refs if r is not ready]

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0, "memory": 1e9}

    def available_resources(self) -> dict[str, float]:
        return {"memory": 1e9}  # Ray leaves out what is all taken

    def get(self, ref: _FakeRef) -> Any:
        while not ref.done:
            ref.actor.step()
        if ref.error is not None:
            raise ref.error
        return ref.value

    def kill(self, actor: _FakeActor, no_restart: bool = True) -> None:
        actor.alive = False
        for queued in actor.queue:
            queued.done, queued.error = True, _RayActorError("killed")
        actor.queue.clear()


def _schedule(
    world: _World, paths: list[str], lost: Any = None, *, workers: int = 2
) -> dict[int, Any]:
    from actviz.engines.pool import Pool
    from actviz.engines.ray_data import RayOptions, _schedule

    pool = Pool(world, world, None, workers)  # type: ignore[arg-type]
    pool.start_timeout = 0.2
    got: dict[int, Any] = {}
    options = RayOptions(workers=workers, batch_size=2)
    for pairs in _schedule(world, pool, [Path(p) for p in paths], options, lost):
        for (index,), payload in pairs:
            assert index not in got
            got[index] = payload
    return got


def test_only_the_batch_an_actor_died_running_is_retried_and_then_named() -> None:
    paths = [f"img{i}" for i in range(10)]
    paths[4] = "kill4"
    world = _World()
    got = _schedule(world, paths, lost=lambda reason: ("lost", reason))
    # The batch (kill4, img5) was tried 3 times, each time on a fresh actor; every batch that
    # was queued behind it was sent again and came back.
    assert world.killed == 3 and world.actors == 2 + 3
    assert {i: got[i] for i in range(10) if i not in (4, 5)} == {
        i: p for i, p in enumerate(paths) if i not in (4, 5)
    }
    reason = "the Ray worker died while processing this batch (retried 2 times): Worker was killed"
    assert got[4] == got[5] == ("lost", reason)


def test_a_batch_whose_actor_died_once_comes_back_whole() -> None:
    paths = [f"img{i}" for i in range(7)]
    paths[2] = "kill2"
    world = _World(once=True)
    assert _schedule(world, paths) == dict(enumerate(paths))
    assert world.killed == 1 and world.actors == 3


def test_what_would_fail_on_every_actor_stops_the_run() -> None:
    from actviz.errors import ActvizError

    with pytest.raises(ActvizError, match="could not build the model: ValueError: no model"):
        _schedule(_World(broken=True), ["a", "b", "c"])
    with pytest.raises(ActvizError, match="the Ray job failed: ValueError: bad batch"):
        _schedule(_World(), ["a", "b", "raise", "d"])
    # Without a payload for lost images, a batch that keeps killing its actor stops the run.
    with pytest.raises(ActvizError, match=r"died while processing this batch \(retried 2"):
        _schedule(_World(), ["a", "kill"])


def test_the_driver_holds_nothing_per_image() -> None:
    import gc
    import tracemalloc

    held = []
    for n in (2_000, 20_000):
        paths = [Path(f"/img/{i:06d}.png") for i in range(n)]
        for path in paths:
            str(path)  # cached text of the input list: not the scheduler's
        world = _World()
        from actviz.engines.pool import Pool
        from actviz.engines.ray_data import RayOptions, _schedule

        tracemalloc.start()
        pool = Pool(world, world, None, 2)  # type: ignore[arg-type]
        count = 0
        for pairs in _schedule(world, pool, paths, RayOptions(batch_size=8), None):
            count += len(pairs)
        gc.collect()
        held.append(tracemalloc.get_traced_memory()[0])
        tracemalloc.stop()
        assert count == n
    assert held[1] < held[0] + 8_000, held


def test_an_actor_the_cluster_never_starts_is_given_up_and_the_others_do_its_work() -> None:
    paths = [f"img{i}" for i in range(9)]
    world = _World(never_from=1)  # the second actor is never scheduled
    assert _schedule(world, paths) == dict(enumerate(paths))
    assert world.actors == 2


def test_a_replacement_the_cluster_cannot_start_leaves_the_work_to_the_others() -> None:
    paths = [f"img{i}" for i in range(9)]
    paths[2] = "kill2"
    world = _World(once=True, never_from=2)  # no replacement is ever scheduled
    # The batch its actor died running goes to the actor that still runs, and comes back.
    assert _schedule(world, paths, lost=lambda reason: ("lost", reason)) == dict(enumerate(paths))
    assert world.killed == 1 and world.actors == 3


def test_a_run_left_without_any_actor_stops_with_the_cause_and_the_fix() -> None:
    from actviz.errors import ActvizError

    paths = [f"img{i}" for i in range(9)]
    paths[4] = "kill4"
    world = _World(once=True, never_from=1)
    got: dict[int, Any] = {}
    with pytest.raises(ActvizError) as caught:
        from actviz.engines.pool import Pool
        from actviz.engines.ray_data import RayOptions, _schedule

        pool = Pool(world, world, None, 1)  # type: ignore[arg-type]
        pool.start_timeout = 0.2
        batches = _schedule(world, pool, [Path(p) for p in paths], RayOptions(batch_size=2), None)
        for pairs in batches:
            got.update({index: payload for (index,), payload in pairs})
    assert str(caught.value) == (
        "Ray could not start a replacement worker within 0.2 s: the cluster has no free CPU "
        "(0 of 2 free, a worker needs 1); lower workers or add resources to the cluster "
        "(resume=True continues this run)"
    )
    assert got == {i: paths[i] for i in range(4)}  # what came back before is kept


def test_the_cause_says_what_the_cluster_lacks() -> None:
    from actviz.engines.pool import unschedulable

    world = _World()
    assert unschedulable(world, {"CPU": 1.0, "accelerator_x": 1.0}) == (
        "a worker needs 1 accelerator_x and the cluster has none in all"
    )
    assert unschedulable(world, {"CPU": 4.0}) == (
        "a worker needs 4 CPU and the cluster has 2 in all"
    )
    assert unschedulable(world, {"memory": 10.0}) == (
        "the cluster did not schedule it although its resources look free (see `ray status`)"
    )


# ------------------------------------------------------------------ on a real local Ray

FLAT = """
import torch
from torch import nn


class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.flat = nn.Flatten()

    def forward(self, x):
        return self.flat(torch.relu(self.conv(x)))


def build():
    return Flat()
"""


@pytest.mark.ray
@pytest.mark.slow
def test_top_images_on_ray_names_images_whose_maps_cannot_be_pooled_as_locally(
    local_ray: None, tmp_path: Path
) -> None:
    import actviz
    from actviz.models import Preprocessing

    model = tmp_path / "flat.py"
    model.write_text(FLAT)
    photos = tmp_path / "photos"
    photos.mkdir()
    # Shorter side to 24, no crop: the wide and the tall image give longer flattened outputs.
    sizes = [(24, 24), (36, 24), (24, 24), (24, 24), (24, 36)]
    for i, (w, h) in enumerate(sizes):
        pixels = np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(photos / f"img{i}.png")
    common: dict[str, Any] = {
        "layers": "conv,flat",
        "k": 2,
        "weights": "none",
        "device": "cpu",
        "report": False,
        "batch_size": 2,
        "preprocess": Preprocessing.fitted(resize=24, crop=24, crops=False),
    }
    runs = {
        engine: actviz.top_images(
            f"{model}:build", [photos], out=tmp_path / engine, **common, **extra
        )
        for engine, extra in (("local", {}), ("ray", {"engine": "ray", "workers": 2}))
    }
    reason = (
        "its output of flat is (3456,), not (2304,) as at the input size 24x24, and cannot be "
        "brought to it; pass --input-size H,W to crop every image to one size"
    )
    for engine, result in runs.items():
        assert [(p.name, why) for p, why in result.failed] == [
            ("img1.png", reason),
            ("img4.png", reason),
        ], engine
        assert result.images == 3 and result.failed_count == 2, engine
        tops = {
            Path(e["path"]).name for c in result.document["layers"][0]["channels"] for e in c["top"]
        }
        assert tops and tops <= {"img0.png", "img2.png", "img3.png"}, engine
    assert runs["ray"].document["layers"] == runs["local"].document["layers"]


@pytest.mark.ray
@pytest.mark.slow
def test_a_replacement_ray_cannot_schedule_stops_the_run_with_the_cause(
    local_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actviz.engines import pool

    start = pool.Pool._start
    asked: list[float] = []

    def never_again(self: Any, slot: int, *, replacement: bool) -> None:
        if replacement:  # a resource no node has: the replacement can never be scheduled
            self.actor = self.actor.options(resources={"actviz_never": 1.0})
            self.need = {**self.need, "actviz_never": 1.0}
            # Given up on after 3 s. The first actor keeps the default wait: on a loaded
            # machine it can take longer than 3 s to start, and it must start and die here.
            self.start_timeout = 3.0
            asked.append(time.monotonic())
        start(self, slot, replacement=replacement)

    monkeypatch.setattr(pool.Pool, "_start", never_again)
    model, photos = _setup(tmp_path, "once")
    code, stderr, _ = _top_images(
        model, photos, tmp_path / "ray", "--engine", "ray", "--workers", "1"
    )
    stopped = time.monotonic()
    assert (tmp_path / "killed-once").exists()  # the actor did die
    assert code == 1, stderr
    assert stderr.strip().splitlines() == [
        "error: Ray could not start a replacement worker within 3 s: a worker needs 1 "
        "actviz_never and the cluster has none in all; lower --workers or add resources to "
        "the cluster (--resume continues this run)"
    ]
    # Bounded: the run stopped soon after it asked for the replacement, not never.
    assert len(asked) == 1 and stopped - asked[0] < 60


@pytest.mark.ray
@pytest.mark.slow
def test_ray_stats_of_images_of_several_input_shapes_equal_the_local_engines(
    local_ray: None, tmp_path: Path
) -> None:
    import actviz
    from actviz.models import Preprocessing
    from tests.conftest import same_up_to_batching
    from tests.oracles import read_table_rows

    model, photos = _setup(tmp_path, "none")  # a plain convolution: its maps follow the input
    for i, (w, h) in enumerate([(30, 20), (20, 30)]):  # 30x20 and 20x30 after resizing
        pixels = np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(photos / f"odd{i}.png")
    common: dict[str, Any] = {
        "layers": "conv",
        "weights": "none",
        "device": "cpu",
        "grids": False,
        "report": False,
        "batch_size": 4,
        "preprocess": Preprocessing.fitted(resize=20, crop=20, crops=False),
    }
    for engine, extra in (("local", {}), ("ray", {"engine": "ray", "workers": 2})):
        result = actviz.run(model, [photos], out=tmp_path / engine, **common, **extra)
        assert result.count("ok") == 15 and result.count("failed") == 0, engine
    tables = [
        {r["image"]: r for r in read_table_rows(tmp_path / n / "stats.parquet")}
        for n in ("local", "ray")
    ]
    assert len(tables[0]) == 15 and tables[0].keys() == tables[1].keys()
    assert same_up_to_batching(tables[0], tables[1])
    # Each image's statistics are its own maps': 4 channels of 20x30, 30x20 or 20x20.
    counts = {image: row["count"] for image, row in tables[1].items()}
    assert counts["odd0"] == counts["odd1"] == 2400 and counts["img00"] == 1600


@pytest.mark.ray
@pytest.mark.slow
def test_a_pool_ray_has_no_free_cpu_for_stops_in_bounded_time_with_the_cause(
    local_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from actviz.engines import pool

    monkeypatch.setattr(pool, "START_TIMEOUT", 3.0)

    @ray.remote(num_cpus=2)
    class Hog:
        def ping(self) -> bool:
            return True

    hog = Hog.remote()  # type: ignore[attr-defined]
    try:
        ray.get(hog.ping.remote())  # it holds both CPUs now
        model, photos = _setup(tmp_path, "none")
        began = time.monotonic()
        code, stderr, _ = _top_images(
            model, photos, tmp_path / "ray", "--engine", "ray", "--workers", "1"
        )
    finally:
        ray.kill(hog)
    assert code == 1, stderr
    assert stderr.strip().splitlines() == [
        "error: Ray could not start a worker within 3 s: the cluster has no free CPU (0 of 2 "
        "free, a worker needs 1); lower --workers or add resources to the cluster (--resume "
        "continues this run)"
    ]
    assert time.monotonic() - began < 60
