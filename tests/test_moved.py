"""Import paths and names renamed in this version keep working for one release: each warns
with a DeprecationWarning naming the new one, attributed to the line that used it, and gives
the very object at the new path; importing them imports no torch."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from actviz import _moved

# Every moved module, and a submodule of each moved package (which moves with it).
OLD_MODULES = sorted(
    {
        *_moved.MOVED,
        "actviz.examples.scoring",
        "actviz.examples.topk",
        "actviz.cameval.metrics",
    }
)


def _forget(name: str) -> None:
    """Drop ``name`` and its submodules from ``sys.modules``, so the next import finds it."""
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]


@pytest.mark.parametrize("old", OLD_MODULES)
def test_an_old_module_path_warns_and_is_the_module_at_its_new_path(old: str) -> None:
    new = _moved.new_path(old)
    assert new is not None and new != old
    _forget(old)
    said = rf"^{re.escape(old)} is now {re.escape(new)};"
    with pytest.warns(DeprecationWarning, match=said) as seen:
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__ is not None and module.__spec__.name == new  # its own spec kept
    assert {w.filename for w in seen} == {__file__}  # past import_module, to its caller


def test_the_warning_names_the_line_that_imports_the_old_path() -> None:
    _forget("actviz.images")
    with pytest.warns(DeprecationWarning, match="actviz.io.images") as seen:
        from actviz.images import load_rgb  # noqa: F401
    assert [w.filename for w in seen] == [__file__]


def test_an_old_package_s_submodule_is_not_loaded_twice() -> None:
    import actviz.top_images.topk as new

    _forget("actviz.examples")
    with pytest.warns(DeprecationWarning):
        from actviz.examples.topk import TopK
    assert TopK is new.TopK


@pytest.mark.parametrize("old", sorted(_moved.RENAMED))
def test_an_old_name_warns_and_is_the_object_of_its_new_name(old: str) -> None:
    module, _, name = old.rpartition(".")
    new = _moved.RENAMED[old]
    new_module, _, new_name = new.rpartition(".")
    package = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} is now {re.escape(new)};"):
        found = getattr(package, name)
    assert found is getattr(importlib.import_module(new_module), new_name)


@pytest.mark.parametrize(
    "old",
    [
        "actviz.stats.Thresholds",
        "actviz.stats.compute_stats",
        "actviz.stats.flag_anomalies",
        "actviz.notebook.Card",
        "actviz.notebook.run_card",
        "actviz.notebook.LiveView",
    ],
)
def test_a_name_of_a_package_s_old_face_warns_and_is_the_object_there_now(old: str) -> None:
    module, _, name = old.rpartition(".")
    face = _moved.FACES[module]
    package = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} is now {face}\.{name};"):
        found = getattr(package, name)
    assert found is getattr(importlib.import_module(face), name)


def test_the_packages_whose_face_moved_keep_their_new_names() -> None:
    import actviz.notebook
    import actviz.stats

    assert callable(actviz.stats) and actviz.stats.stats.__name__ == "stats"
    assert actviz.notebook.show.__module__ == "actviz.notebook.inline"
    with pytest.raises(AttributeError, match="has no attribute 'widget_of'"):
        actviz.notebook.widget_of  # noqa: B018


def test_a_name_that_never_was_is_an_attribute_error() -> None:
    import actviz.top_images

    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        actviz.top_images.NoSuchThing  # noqa: B018


def test_old_paths_import_no_torch() -> None:
    imports = "; ".join(f"import {name}" for name in OLD_MODULES)
    code = (
        "import sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        f"{imports}\n"
        "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
