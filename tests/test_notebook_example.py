"""The example notebook, executed by a real Jupyter kernel (nbclient + ipykernel) on this
interpreter: every cell runs without an error, and each shows what it should (tagged cells:
``card`` an HTML card with an inline PNG, ``png`` a picture, ``html`` a card, ``widget`` the
channel browser's view). It runs in a copy beside a copy of the sample image, as a user's
checkout would hold it, and its run card is opened in headless Chromium where there is one."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from PIL import Image

from tests.test_report_browser import browse, find_chromium

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
    (tmp_path / "sample_images").mkdir()
    shutil.copy(ROOT / "sample_images" / "cat.jpg", tmp_path / "sample_images")
    here = tmp_path / "examples"
    here.mkdir()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name=name,
        timeout=240,
        resources={"metadata": {"path": str(here)}},
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
    assert sorted(p.name for p in here.iterdir()) == ["actviz-out"]
    run = next(c for c in notebook.cells if "actviz.run(" in c.source)
    check_run_card(run.outputs[0]["data"]["text/html"], here, tmp_path)


# Where the random-weights warning sits and where each link leads, once the card is laid out.
CARD_CHECK = """<script>
window.addEventListener("load", () => {
  const card = document.querySelector(".actviz-card");
  const warning = card.querySelector(".actviz-warning");
  const title = card.firstElementChild.getBoundingClientRect();
  const box = warning.getBoundingClientRect();
  document.body.setAttribute("data-seen", JSON.stringify({
    gap: box.top - title.bottom, height: box.height, width: box.width,
    background: getComputedStyle(warning).backgroundColor,
    links: [...card.querySelectorAll("a")].map((a) => a.href),
  }));
});
</script>"""


def check_run_card(card: str, here: Path, tmp_path: Path) -> None:
    """A run with random weights: the warning is the first line under the title, and the links
    are relative, so they open the run's files from beside the notebook."""
    text = html.unescape(card)
    assert "random weights: an untrained model" in text
    assert text.index("random weights: an untrained") < text.index("device")
    links = re.findall(r'<a href="([^"]*)"', card)
    assert links == [
        "actviz-out/index.html",
        "actviz-out/manifest.json",
        "actviz-out/stats.json",
        "actviz-out",
    ]
    assert all((here / link).exists() for link in links)
    chromium = find_chromium()
    if chromium is None:
        return
    page = here / "card.html"  # beside the notebook, as Jupyter shows the cell
    page.write_text(f"<!doctype html><html><body>{card}{CARD_CHECK}</body></html>")
    shown = browse(chromium, tmp_path / "profile", "--dump-dom", page.as_uri())
    found = re.search(r'data-seen="([^"]*)"', shown.stdout)
    assert found is not None, shown.stderr[-2000:]
    seen = json.loads(html.unescape(found.group(1)))
    assert 0 <= seen["gap"] < 10 and seen["height"] >= 15 and seen["width"] > 400
    assert seen["background"] == "rgb(255, 244, 229)"  # boxed in orange, across the card
    assert [Path(unquote(urlparse(u).path)) for u in seen["links"]] == [here / x for x in links]
