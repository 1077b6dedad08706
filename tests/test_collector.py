"""The collector policy of the ``actviz`` process: no collection while a framework imports,
everything frozen afterwards and before the process ends, and nothing changed for a command
called in-process."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from actviz.cli import collector

# A module that makes as many long-lived objects as a big framework does, in cycles, and
# counts the collections per generation as it starts and as it ends.
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
_FAKES = (
    "fake_fw",
    "fake_other",
    "fake_bad",
    "fake_outer",
    "fake_inner",
    "fake_zipped",
    "fake_zipped_too",
)


@pytest.fixture
def frameworks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Importable fakes (``fake_other`` and ``fake_zipped_too`` are not frameworks), and the
    process put back afterwards (finders, modules, frozen objects, the collector on)."""
    sources = {
        "fake_fw": _BIG,
        "fake_other": _BIG,
        "fake_bad": "raise RuntimeError('a broken install')\n",
        "fake_outer": "import fake_inner\n" + _BIG,
        "fake_inner": _BIG,
    }
    for name, text in sources.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        collector, "FRAMEWORKS", frozenset(_FAKES) - {"fake_other", "fake_zipped_too"}
    )
    meta_path = list(sys.meta_path)
    gc.unfreeze()
    collector.own_process()
    try:
        yield tmp_path
    finally:
        sys.meta_path[:] = meta_path
        for name in _FAKES:
            sys.modules.pop(name, None)
        gc.unfreeze()
        gc.enable()


def test_a_framework_imports_without_a_collection_and_is_frozen_after(frameworks: Path) -> None:
    collector.own_process()  # once, however often
    assert sum(isinstance(f, collector._PausedImports) for f in sys.meta_path) == 1
    import fake_fw  # type: ignore[import-not-found]

    assert fake_fw.END == fake_fw.START
    assert len(fake_fw.KEPT) == 200_000
    assert gc.get_freeze_count() >= 200_000
    assert gc.isenabled()
    assert "exec_module" not in vars(fake_fw.__loader__)  # the loader as it was

    # Another import is not paused: the same module made collections run.
    gc.unfreeze()
    import fake_other  # type: ignore[import-not-found]

    assert fake_other.END[0] > fake_other.START[0]
    assert len(fake_other.KEPT) == 200_000
    assert gc.get_freeze_count() == 0


def test_a_disabled_collector_stays_disabled_after_a_framework_import(frameworks: Path) -> None:
    gc.disable()
    import fake_fw  # type: ignore[import-not-found]  # noqa: F401

    assert not gc.isenabled()
    assert gc.get_freeze_count() >= 200_000


def test_a_failing_framework_import_leaves_the_collector_on_and_nothing_frozen(
    frameworks: Path,
) -> None:
    for _ in range(2):  # not cached: a retry passes through again
        with pytest.raises(RuntimeError, match="a broken install"):
            import fake_bad  # type: ignore[import-not-found]  # noqa: F401
        assert gc.isenabled()
        assert gc.get_freeze_count() == 0


def test_a_framework_that_imports_another_is_paused_throughout(frameworks: Path) -> None:
    import fake_inner  # type: ignore[import-not-found]
    import fake_outer  # type: ignore[import-not-found]

    assert fake_inner.END == fake_inner.START
    assert fake_outer.END == fake_outer.START
    assert gc.isenabled()


def test_a_loader_shared_by_several_modules_pauses_only_the_framework(
    frameworks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = frameworks / "shared.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("fake_zipped/__init__.py", _BIG)
        zipped.writestr("fake_zipped_too/__init__.py", _BIG)
    monkeypatch.syspath_prepend(str(archive))
    import fake_zipped  # type: ignore[import-not-found]

    assert fake_zipped.END == fake_zipped.START
    gc.unfreeze()
    import fake_zipped_too  # type: ignore[import-not-found]

    assert fake_zipped_too.__loader__ is fake_zipped.__loader__
    assert fake_zipped_too.END[0] > fake_zipped_too.START[0]
    assert gc.get_freeze_count() == 0


def test_at_exit_freezes_everything_alive() -> None:
    gc.unfreeze()
    kept = [{"i": i} for i in range(1000)]
    try:
        collector.at_exit()
        assert gc.get_freeze_count() > len(kept)
    finally:
        gc.unfreeze()


def test_a_command_called_in_process_leaves_the_collector_alone() -> None:
    from actviz.cli import main

    meta_path = list(sys.meta_path)
    gc.unfreeze()
    with pytest.raises(SystemExit) as exit_:
        main(["models", "resnet1"])
    assert exit_.value.code == 0
    assert sys.meta_path == meta_path
    assert gc.get_freeze_count() == 0


def test_the_actviz_process_never_walks_the_frameworks_objects() -> None:
    # Each full collection's view of the oldest generation while `actviz models` runs as its
    # own process, what was frozen when it ended, and then, unfrozen, one full collection:
    # the control that shows such a pass is seen here and walks the frameworks' objects.
    code = textwrap.dedent(
        """
        import gc, json, sys
        from actviz.cli import main
        walked = []
        def seen(phase, info):
            if phase == "start" and info["generation"] == 2:
                walked.append(len(gc.get_objects(generation=2)))
        gc.callbacks.append(seen)
        sys.argv = ["actviz", "models", "resnet1"]
        try:
            main()
        except SystemExit:
            pass
        during, frozen = list(walked), gc.get_freeze_count()
        gc.unfreeze()
        gc.collect()
        print(json.dumps({"during": during, "frozen": frozen, "control": walked[len(during):]}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # A plain import of torch and torchvision runs about six full passes over 100,000 to
    # 350,000 objects: none here, and whatever ran walked only what came after.
    assert all(n < 100_000 for n in seen["during"]), seen
    assert seen["frozen"] > 100_000
    assert seen["control"] and seen["control"][0] > 100_000, seen
