"""The collector policy of the ``actviz`` process: no collection while a framework imports,
what it made frozen afterwards, and nothing changed for a command called in-process."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from actviz.cli import collector

# A module that makes as many long-lived objects as a big framework does, in cycles.
# Its collections counted per generation as it starts and as it ends.
_BIG = textwrap.dedent(
    """
    import gc
    START = [g["collections"] for g in gc.get_stats()]
    KEPT = []
    for i in range(200_000):
        node = {"i": i}
        node["self"] = node
        KEPT.append(node)
    END = [g["collections"] for g in gc.get_stats()]
    """
)


@pytest.fixture
def frameworks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two importable copies of the big module, ``fake_fw`` counted as a framework, and the
    process put back afterwards (finder, modules, frozen objects)."""
    for name in ("fake_fw", "fake_other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(_BIG)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(collector, "FRAMEWORKS", frozenset({"fake_fw"}))
    meta_path = list(sys.meta_path)
    try:
        yield tmp_path
    finally:
        sys.meta_path[:] = meta_path
        for name in ("fake_fw", "fake_other"):
            sys.modules.pop(name, None)
        gc.unfreeze()
        gc.enable()


def test_a_framework_imports_without_a_collection_and_is_frozen_after(frameworks: Path) -> None:
    collector.own_process()
    collector.own_process()  # once, however often
    assert sum(isinstance(f, collector._PausedImports) for f in sys.meta_path) == 1
    gc.unfreeze()
    import fake_fw  # type: ignore[import-not-found]

    assert fake_fw.END == fake_fw.START
    assert len(fake_fw.KEPT) == 200_000
    assert gc.get_freeze_count() >= 200_000
    assert gc.isenabled()

    # Another import is not paused: the same module made collections run.
    gc.unfreeze()
    import fake_other  # type: ignore[import-not-found]

    assert fake_other.END[0] > fake_other.START[0]
    assert len(fake_other.KEPT) == 200_000
    assert gc.get_freeze_count() == 0


def test_a_disabled_collector_stays_disabled_after_a_framework_import(frameworks: Path) -> None:
    collector.own_process()
    gc.disable()
    import fake_fw  # noqa: F401

    assert not gc.isenabled()


def test_a_command_called_in_process_leaves_the_collector_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from actviz.cli import main

    meta_path = list(sys.meta_path)
    gc.unfreeze()
    with pytest.raises(SystemExit) as exit_:
        main(["models", "resnet1"])
    assert exit_.value.code == 0
    assert sys.meta_path == meta_path
    assert gc.get_freeze_count() == 0


def _full_passes(main_call: str) -> tuple[list[int], int]:
    """Objects in the oldest generation at each full collection of a fresh process that runs
    ``main_call``, and how many objects were frozen when it ended."""
    code = textwrap.dedent(
        f"""
        import atexit, gc, sys
        from actviz.cli import main
        walked = []
        atexit.register(lambda: print("walked", walked, "frozen", gc.get_freeze_count()))
        def seen(phase, info):
            if phase == "start" and info["generation"] == 2:
                walked.append(len(gc.get_objects(generation=2)))
        gc.callbacks.append(seen)
        sys.argv = ["actviz", "models", "resnet1"]
        {main_call}
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    walked, frozen = last.removeprefix("walked ").split(" frozen ")
    return [int(n) for n in walked.strip("[]").split(",") if n.strip()], int(frozen)


def test_the_actviz_process_never_walks_the_frameworks_objects() -> None:
    walked, frozen = _full_passes("main()")
    # A plain import of torch and torchvision runs about six full passes over 100,000 to
    # 350,000 objects (so does this process when main is given its arguments, as the tests
    # call it): none here, and whatever runs later walks only what came after.
    assert all(n < 100_000 for n in walked), walked
    assert frozen > 100_000
