"""The example notebook, executed by a real Jupyter kernel (nbclient + ipykernel) on this
interpreter: every cell runs without an error, and each shows what it should (tagged cells:
``card`` an HTML card with an inline PNG, ``png`` a picture, ``html`` a card, ``widget`` the
channel browser's view)."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"


def kernelspec(folder: Path) -> str:
    """A kernel on this very interpreter, with this checkout importable."""
    spec = folder / "kernels" / "actviz-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "actviz test",
                "language": "python",
                "env": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
            }
        )
    )
    return "actviz-test"


@pytest.mark.slow
def test_example_notebook_runs_and_shows_its_pictures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    pytest.importorskip("anywidget")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    name = kernelspec(tmp_path / "jupyter")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name=name,
        timeout=240,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    checked = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = cell.get("outputs", [])
        errors = [o for o in outputs if o.output_type == "error"]
        assert not errors, (cell.source, errors[0].get("evalue") if errors else None)
        shown = {k: v for o in outputs for k, v in (o.get("data") or {}).items()}
        tags = cell.metadata.get("tags", [])
        if "card" in tags:
            assert 'class="actviz-card"' in shown["text/html"]
            assert '<img src="data:image/png;base64,' in shown["text/html"]
        if "html" in tags:
            assert 'class="actviz-card"' in shown["text/html"]
        if "png" in tags:
            picture = Image.open(io.BytesIO(base64.b64decode(shown["image/png"])))
            assert picture.width > 100 and picture.height > 100
        if "widget" in tags:
            assert shown[WIDGET]["model_id"]
        checked += bool(tags) and "setup" not in tags
    assert checked == 8
    # The live training view: one display, redrawn in place, last showing the end.
    training = next(c for c in notebook.cells if "actviz.watch" in c.source)
    live = [o for o in training.outputs if o.output_type == "display_data"]
    assert len(live) == 1 and "finished, 40 steps" in live[0]["data"]["text/html"]
    assert sorted(p.name for p in NOTEBOOK.parent.iterdir()) == ["notebook.ipynb"]
