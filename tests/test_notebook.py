"""``actviz.show`` (one image's layers drawn in memory, the same pictures as a run) and
``actviz.browse`` (the channel browser's model state; its front end in headless Chromium)."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import actviz
from actviz.errors import UsageError
from tests.test_cards import decoded

ROOT = Path(__file__).resolve().parents[1]


def tiny_classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(6, 8, 3, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    ).train()


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    path = tmp_path / "in" / "photo.png"
    path.parent.mkdir()
    Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(path)
    return path


def test_show_draws_the_runs_pictures_and_writes_nothing(
    photo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_classifier()
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    look = actviz.show(model, photo, layers="0,2", preprocess=_small())
    assert look.layers == ["0", "2"] and model.training  # given back in training mode
    grid, cam = look.show("0"), look.show("2", kind="cam")
    hist, pca = look.show("0", kind="hist"), look.show("2", kind="pca")
    assert list(work.iterdir()) == []  # nothing written
    # The same file a run writes for this image, byte for byte in pixels.
    out = tmp_path / "run"
    actviz.run(model, photo, out=out, layers="0,2", cam=True, preprocess=_small())
    for key, picture, suffix in (("0", grid, ""), ("2", cam, "_cam")):
        written = next((out / "photo").glob(f"*_{key}{suffix}.png"))
        assert np.array_equal(pixels(picture.png), pixels(written.read_bytes())), key
    assert picture.size == Image.open(io.BytesIO(cam.png)).size
    assert hist.size[0] > 300 and pixels(hist.png).std() > 10
    assert pca.size == Image.open(io.BytesIO(pca.png)).size
    assert cam._repr_png_() is cam.png


def _small() -> Any:
    from actviz.models import Preprocessing

    return Preprocessing.fitted(resize=32, crop=32)


def test_show_takes_a_tensor_or_a_pil_image_and_its_card_draws_layers(photo: Path) -> None:
    model = tiny_classifier()
    x = torch.randn(1, 3, 24, 20)
    look = actviz.show(model, x, layers="0,1,2")
    assert look["2"].shape == (1, 8, 24, 20)
    with torch.no_grad():
        torch.testing.assert_close(look["0"][0], model[0](x)[0])
    card = look._repr_html_()
    thumbs = decoded(card)
    assert len(thumbs) == 3 and all(img.size == (w, h) for img, w, h in thumbs)
    assert ">0<" in card and ">2<" in card and "Conv2d" in card
    pil = actviz.show(model, Image.open(photo), layers="2", preprocess=_small())
    assert pil["2"].shape == (1, 8, 32, 32)
    assert repr(look) == "Look(model='Sequential', weights='module', input=(3, 24, 20), layers=3)"


def test_show_refuses_what_it_cannot_take(photo: Path) -> None:
    model = tiny_classifier()
    with pytest.raises(UsageError, match=r"show\(\) takes one image"):
        actviz.show(model, [1, 2, 3])
    with pytest.raises(UsageError, match="has no option 'colour'"):
        actviz.show(model, photo, colour="red")
    look = actviz.show(model, torch.randn(3, 8, 8), layers="0")
    with pytest.raises(UsageError, match="kind must be one of"):
        look.show("0", kind="movie")
    with pytest.raises(UsageError, match="no layer 'nope'"):
        look.show("nope")


def test_show_saves_only_when_asked(tmp_path: Path) -> None:
    look = actviz.show(tiny_classifier(), torch.randn(3, 8, 8), layers="0,2")
    files = look.save(tmp_path / "pictures")
    assert [f.name for f in files] == ["00_0.png", "01_2.png"]
    assert np.array_equal(pixels(files[1].read_bytes()), pixels(look.show("2").png))


# The channel browser.
def test_browser_state_follows_the_chosen_layer_and_channel() -> None:
    pytest.importorskip("anywidget")
    look = actviz.show(tiny_classifier(), torch.randn(3, 16, 16), layers="0,2")
    browser = actviz.browse(look)
    assert [(x["key"], x["type"], x["shape"]) for x in browser.layers] == [
        ("0", "Conv2d", "1x6x16x16"),
        ("2", "Conv2d", "1x8x16x16"),
    ]
    assert browser.layer == "0" and len(browser.channels) == 6 and browser.detail == {}
    thumb = browser.channels[4]
    shown = Image.open(io.BytesIO(base64.b64decode(thumb["uri"].split(",", 1)[1])))
    assert shown.size == (48, 48) == (thumb["width"], thumb["height"])  # 16 x 16, three times
    browser.channel = 4
    channel = look["0"][0, 4].numpy()
    stats = browser.detail["stats"]
    assert stats["min"] == pytest.approx(float(channel.min()))
    assert stats["max"] == pytest.approx(float(channel.max()))
    assert stats["mean"] == pytest.approx(float(channel.mean()), abs=1e-6)
    assert browser.detail["title"].startswith("0  channel 4")
    browser.layer = "2"
    assert len(browser.channels) == 8 and browser.channel == -1 and browser.detail == {}
    state = browser.get_state()
    json.dumps({k: state[k] for k in ("layers", "channels", "detail", "layer", "channel")})


def test_browser_shows_a_channels_top_images(tmp_path: Path, make_photos: Any) -> None:
    pytest.importorskip("anywidget")
    model = tiny_classifier()
    photos = make_photos(3)
    top = actviz.top_images(model, [photos], layers="1", k=2, out=tmp_path / "top")
    look = actviz.show(model, next(photos.iterdir()), layers="1", preprocess=_small())
    browser = actviz.browse(look, top=tmp_path / "top")
    browser.channel = 2
    expected = top.document["layers"][0]["channels"][2]
    assert len(browser.detail["top"]) == 2
    assert [t["label"] for t in browser.detail["top"]] == [e["path"] for e in expected["top"]]
    assert browser.detail["stats"]["top-images max_score"] == expected["max_score"]


def test_browser_on_a_run_folder_shows_saved_channels(tmp_path: Path, make_photos: Any) -> None:
    pytest.importorskip("anywidget")
    out = tmp_path / "run"
    result = actviz.run(
        tiny_classifier(),
        make_photos(2),
        out=out,
        layers="0,2",
        save_tensors="npy",
        preprocess=_small(),
    )
    assert actviz.browse(result).layers == actviz.browse(out).layers
    browser = actviz.browse(out)
    assert [layer["key"] for layer in browser.layers] == ["0", "2"]
    assert len(browser.channels) == 6 and browser.detail["uri"].startswith("data:image/png")
    browser.channel = 1
    assert browser.detail["title"].startswith("0  channel 1")


def test_browser_without_anywidget_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from actviz.notebook import widget

    widget.widget_class.cache_clear()
    monkeypatch.setitem(sys.modules, "anywidget", None)
    look = actviz.show(tiny_classifier(), torch.randn(3, 8, 8), layers="0")
    with pytest.raises(UsageError, match=r"pip install 'actviz\[notebook\]'"):
        actviz.browse(look)
    widget.widget_class.cache_clear()


# The shipped module, imported as a module (Chromium runs with --allow-file-access-from-files).
# A stand-in model plays the kernel: a click sets `channel` and saves, and the kernel answers
# with `detail`. Everything happens before the page's load event (which waits for the images
# the widget adds), so what the page shows is read then, however loaded the machine.
BROWSER_PAGE = """<!doctype html><html><body><div id="root"></div>
<script>
window.addEventListener("error", (e) => document.body.setAttribute("data-error", e.message));
</script>
<script type="module">
import widget from "%(esm)s";
const state = %(state)s;
const answers = %(answers)s;
const handlers = {};
const model = {
  get: (k) => state[k],
  set: (k, v) => { state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); },
  on: (e, f) => { (handlers[e] = handlers[e] || []).push(f); },
  save_changes: () => model.set("detail", answers[state.channel] || {}),
};
const root = document.getElementById("root");
window.addEventListener("load", () => {
  const seen = { ready: root.getAttribute("data-actviz-ready"), channel: state.channel };
  seen.thumbs = [...root.querySelectorAll(".actviz-channels img")]
    .map((img) => [img.naturalWidth, img.clientWidth]);
  const large = root.querySelector(".actviz-detail img");
  if (large) seen.large = [large.naturalWidth, large.clientWidth];
  seen.stats = Object.fromEntries([...root.querySelectorAll(".actviz-stats tr")]
    .map((tr) => [tr.cells[0].textContent, tr.cells[1].textContent]));
  const marked = root.querySelector('.actviz-channels img[data-channel="%(click)s"]');
  if (marked) seen.marked = marked.style.borderColor;
  document.body.setAttribute("data-seen", JSON.stringify(seen));
});
widget.render({ model, el: root });
if (%(click)s >= 0) root.querySelector('img[data-channel="%(click)s"]').click();
</script></body></html>"""


def browser_page(widget: Any, click: int = -1) -> str:
    """A page that runs browser.js on ``widget``'s state and, for ``click`` >= 0, clicks that
    channel's thumbnail, answered with ``widget``'s own detail of it."""
    state = widget.get_state()
    keep = {k: state[k] for k in ("layers", "layer", "channels", "channel", "detail", "source")}
    answers = {}
    if click >= 0:
        widget.channel = click
        answers[click] = widget.detail
        widget.channel = -1
    return BROWSER_PAGE % {
        "esm": (ROOT / "actviz" / "notebook" / "browser.js").as_uri(),
        "state": json.dumps(keep).replace("</", "<\\/"),
        "answers": json.dumps(answers).replace("</", "<\\/"),
        "click": click,
    }


def test_browser_front_end_in_headless_chromium(tmp_path: Path) -> None:
    import html
    import re

    from tests.test_report_browser import browse, find_chromium

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("Chromium is not installed; install it with `apt-get install chromium`")
    pytest.importorskip("anywidget")
    look = actviz.show(tiny_classifier(), torch.randn(3, 8, 8), layers="0,2")
    widget = actviz.browse(look)
    page = tmp_path / "page.html"
    page.write_text(browser_page(widget, click=2))
    flags = ("--allow-file-access-from-files", "--dump-dom")
    shown = browse(chromium, tmp_path / "profile", *flags, page.as_uri())
    assert 'data-error="' not in shown.stdout, re.findall(r'data-error="[^"]*"', shown.stdout)
    found = re.search(r'data-seen="([^"]*)"', shown.stdout)
    assert found is not None, shown.stderr[-2000:]
    seen = json.loads(html.unescape(found.group(1)))
    assert seen["ready"] == "2" and seen["channel"] == 2
    # Layer 0's six channels, each decoded and drawn on the page at 48 pixels.
    assert seen["thumbs"] == [[48, 48]] * 6
    # The clicked channel, large, beside its statistics, which are the kernel's numbers.
    assert seen["large"][0] == 288 and seen["large"][1] >= 200
    maps = look["0"][0, 2]
    assert float(seen["stats"]["min"]) == pytest.approx(float(maps.min()), rel=1e-3)
    assert float(seen["stats"]["max"]) == pytest.approx(float(maps.max()), rel=1e-3)
    assert float(seen["stats"]["mean"]) == pytest.approx(float(maps.mean()), rel=1e-3, abs=1e-4)
    assert seen["marked"] == "rgb(9, 105, 218)"  # the clicked thumbnail is marked


# Where Chromium is missing, Node runs the same ES module against a small stand-in DOM.
NODE_DOM = """
class Node {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.style = {};
                     this.listeners = {}; }
  append(...nodes) { this.children.push(...nodes); }
  replaceChildren() { this.children = []; }
  setAttribute(k, v) { this.attrs[k] = v; }
  addEventListener(e, f) { this.listeners[e] = f; }
  all(tag) { return this.children.flatMap((c) => c instanceof Node
    ? [...(c.tag === tag ? [c] : []), ...c.all(tag)] : []); }
}
globalThis.document = { createElement: (t) => new Node(t),
                        createTextNode: (t) => ({ text: t }) };
const { default: widget } = await import(process.argv[2]);
const state = JSON.parse(process.argv[3]);
const handlers = {};
const model = {
  get: (k) => state[k],
  set: (k, v) => { state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); },
  on: (e, f) => { (handlers[e] = handlers[e] || []).push(f); },
  save_changes: () => {},
};
const root = new Node("div");
widget.render({ model, el: root });
const imgs = root.all("img");
imgs[1].listeners.click();
const options = root.all("option").map((o) => o.attrs.value);
console.log(JSON.stringify({ ready: root.attrs["data-actviz-ready"], channel: state.channel,
  thumbs: imgs.length, options, border: root.all("img")[1].style.cssText }));
"""


def test_browser_front_end_runs_in_node(tmp_path: Path) -> None:
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed")
    pytest.importorskip("anywidget")
    look = actviz.show(tiny_classifier(), torch.randn(3, 8, 8), layers="0,2")
    state = actviz.browse(look).get_state()
    keep = {k: state[k] for k in ("layers", "layer", "channels", "channel", "detail", "source")}
    script = tmp_path / "run.mjs"
    script.write_text(NODE_DOM)
    esm = (ROOT / "actviz" / "notebook" / "browser.js").as_uri()
    done = subprocess.run(
        [node, str(script), esm, json.dumps(keep)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["ready"] == "2" and shown["options"] == ["0", "2"]
    assert shown["thumbs"] == 6  # layer 0's six channels
    assert shown["channel"] == 1  # a click sets the model's channel, for the kernel to answer
    assert "#0969da" in shown["border"]  # and the strip redraws with it marked


def tiny_vit() -> nn.Module:
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.VisionTransformer(
        image_size=32,
        patch_size=8,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        mlp_dim=32,
        num_classes=5,
    )


def tiny_swin() -> nn.Module:
    from torchvision.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    return SwinTransformer(
        patch_size=[4, 4],
        embed_dim=8,
        depths=[1, 1],
        num_heads=[1, 1],
        window_size=[2, 2],
        num_classes=5,
    )


@pytest.mark.parametrize(
    ("make", "layer", "layout"),
    [(tiny_vit, "encoder.layers.encoder_layer_1", "tokens"), (tiny_swin, "features.1", "nhwc")],
)
def test_show_lays_out_tokens_and_channels_last_as_a_run_does(
    make: Any, layer: str, layout: str, photo: Path, tmp_path: Path
) -> None:
    model = make()
    look = actviz.show(model, photo, layers=layer, preprocess=_small())
    result = actviz.run(model, photo, out=tmp_path / "run", layers=layer, preprocess=_small())
    record = result.images[0].layers[0]
    assert record.layout == layout
    written = (tmp_path / "run" / str(record.file)).read_bytes()
    assert np.array_equal(pixels(look.show(layer).png), pixels(written))


def test_browser_on_what_capture_recorded_shows_the_first_image() -> None:
    pytest.importorskip("anywidget")
    from actviz.layouts import layer_contexts

    model = tiny_vit().eval()
    x = torch.randn(2, 3, 32, 32)
    with actviz.capture(model, "encoder.layers.encoder_layer_0") as acts, torch.no_grad():
        model(x)
    browser = actviz.browse(acts, context=layer_contexts(model, (32, 32)))
    # 16 hidden units over 4 x 4 patch tokens (the class token dropped), of the first image.
    assert len(browser.channels) == 16
    browser.channel = 3
    tokens = acts["encoder.layers.encoder_layer_0"][0, 1:, 3]
    assert browser.detail["stats"]["max"] == pytest.approx(float(tokens.max()))
    assert browser.detail["title"].endswith("(4 x 4)")


def test_show_of_a_model_by_name_with_random_weights_says_so() -> None:
    look = actviz.show("resnet18", torch.randn(3, 32, 32), layers="conv1", weights="none")
    text = look._repr_html_()
    assert "random weights: an untrained model" in text
    assert repr(look).startswith("Look(model='resnet18', weights='random")
    grid = look.show("conv1")
    assert grid.size[0] >= 420  # the header, with the random-weights line, sets the width
