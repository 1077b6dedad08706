"""Tests of the report: links resolve, names are escaped and encoded, pages are complete."""

from __future__ import annotations

import fnmatch
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Container, Iterable, Iterator
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, unquote, urlsplit
from xml.etree import ElementTree

import pytest
import torch
from PIL import Image

from actviz.report.charts import depth_chart
from actviz.report.pages import (
    LINKED_FIRST,
    LISTED,
    PAGE_ROWS,
    PER_IMAGE_CHARTS,
    ReportImages,
    build_report,
    rebuild_run_report,
    related_reports,
)
from actviz.statistics.compute import compute_stats
from tests.oracles import aggregate_run, to_json
from tests.scale_run import (
    EVIL,
    expected_files,
    make_large_run,
)

SVG = "{http://www.w3.org/2000/svg}"

ODD_DIR = "odd name #1?é"  # space, '#', '?', non-ASCII: all must survive as URLs


class Tags(HTMLParser):
    """Every start tag with its attributes, and the page's text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)

    def links(self) -> Iterator[tuple[str, str]]:
        for tag, attrs in self.tags:
            for name in ("src", "href"):
                value = attrs.get(name)
                if value is not None:
                    yield tag, value


def parse(path: Path) -> Tags:
    parser = Tags()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser


def make_run(
    root: Path,
    *,
    images: int = 3,
    layers: int = 4,
    flagged: Container[int] | None = None,
    failed: bool = True,
    random: bool = True,
    thumbnails: bool = True,
    with_stats: bool = True,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A manifest and stats.json for a run, with the grid PNGs it names written under root.

    Layers: a normal conv, one whose name is a script tag, one whose file name has a space and
    a '#', one that was not drawn, then ``layers - 4`` more convs; the second image gets NaN
    from the third layer on, and every image has a half-dead ReLU. Images past the fifth are
    named ``img005``, ``img006``, ...; ``flagged``, when given, holds the numbers (from 0) of
    the only images that get the NaN and the dead channels, so that the others raise no flag.
    """
    layer_names = ["conv1", EVIL, "layer1.0.relu:2", "head"]
    layer_names += [f"block{k}.conv" for k in range(layers - len(layer_names))]
    folders = ["cat", ODD_DIR, "sub/dog", "more/x", "y"]
    folders = (folders + [f"img{n:03d}" for n in range(len(folders), images)])[:images]
    records = []
    per_image = {}
    torch.manual_seed(0)
    for number, folder in enumerate(folders):
        entries = []
        captured = []
        broken = flagged is None or number in flagged
        for index, name in enumerate(layer_names):
            tensor = torch.randn(1, 4, 6, 6) * (index + 1)
            if name == "layer1.0.relu:2":
                tensor = torch.relu(tensor)
                if broken:
                    tensor[:, :3] = 0  # 3 of 4 channels dead
            if broken and number == 1 and index >= 2:
                tensor[0, 0, 0, 0] = float("nan")
            file = None
            if name != "head":
                stem = "02_layer1.0.relu 2 #x" if index == 2 else f"{index:02d}_{name}"
                file = f"{folder}/{stem}.png"
                target = root / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shade = 40 + 50 * index
                Image.new("RGB", (96, 64), (shade, 120, 200 - shade)).save(target)
            overlay = f"{folder}/overlay {index}.png" if index == 0 else None
            if overlay:
                Image.new("RGB", (64, 48), (90, 160, 90)).save(root / overlay)
            entries.append(
                {
                    "name": name,
                    "module": name.split(":")[0],
                    "type": "ReLU" if "relu" in name else "Conv2d",
                    "call": 2 if ":" in name else 1,
                    "shape": [1, 4, 6, 6],
                    "min": float(tensor.nan_to_num().min()),
                    "max": float(tensor.nan_to_num().max()),
                    "mean": 0.0,
                    "channels_shown": 4,
                    "channels_total": 4,
                    "file": file,
                    "kind": "output",
                    "layout": "nchw",
                    "note": None if file else f"cannot draw {name}: shape (1, 3)",
                    "overlay": overlay,
                    "tensor": None,
                }
            )
            captured.append((name, compute_stats(tensor)[0]))
        record: dict[str, Any] = {
            "path": f"/data/in/{folder}.jpg",
            "out_dir": folder,
            "status": "ok",
            "error": None,
            "size": [64, 48],
            "predictions": [
                {"index": 281 - k, "label": f"class {k} <b>", "probability": 0.5 / (k + 1)}
                for k in range(5)
            ],
            "layers": entries,
        }
        if thumbnails:
            record["thumbnail"] = f"{folder}/input.png"
            Image.new("RGB", (32, 24), (200, 90, 40)).save(root / record["thumbnail"])
        records.append(record)
        per_image[folder] = captured
    if failed:
        records.append(
            {
                "path": "/data/in/broken <x>.jpg",
                "out_dir": "broken",
                "status": "failed",
                "error": "cannot identify image file <broken>",
                "size": None,
                "predictions": [],
                "layers": [],
            }
        )
    manifest = {
        "actviz": "0.1.0",
        "versions": {"torch": "2.x", "torchvision": "0.x", "pillow": "12.x"},
        "created": "2026-01-02T03:04:05+00:00",
        "model": "resnet18",
        "weights": {
            "spec": "auto",
            "source": "random" if random else "torchvision",
            "name": None if random else "ResNet18_Weights.IMAGENET1K_V1",
            "random": random,
            "seed": 0 if random else None,
            "reason": "no network to download ResNet18_Weights" if random else None,
        },
        "device": "cpu",
        "selector": "conv,relu",
        "layers": [n.split(":")[0] for n in layer_names],
        "render": {"max_channels": 64, "norm": "channel"},
        "seconds": 1.5,
        "images": records,
        "skipped": [{"path": "/data/in/notes.txt", "reason": "not an image"}],
        "warnings": ["RANDOM WEIGHTS: no network"] if random else [],
    }
    stats = None
    if with_stats:
        stats = to_json(per_image, aggregate_run(per_image) if len(per_image) > 1 else None)
    return manifest, stats


def report_files(*args: Any, **kwargs: Any) -> dict[str, bytes]:
    """The report's files, gathered (small runs only: the report makes them one at a time)."""
    files: dict[str, bytes] = {}
    for rel, data in build_report(*args, **kwargs):
        assert rel not in files, rel  # every file is made once
        files[rel] = data
    return files


def write(root: Path, files: dict[str, bytes]) -> list[Path]:
    paths = []
    for rel, data in files.items():
        assert not PurePosixPath(rel).is_absolute() and ".." not in PurePosixPath(rel).parts
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        paths.append(target)
    return paths


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("report")
    manifest, stats = make_run(root)
    files = report_files(manifest, stats, out_dir_name="out")
    write(root, files)
    return root, files


def html_pages(root: Path) -> list[Path]:
    return sorted(root.rglob("*.html"))


# --------------------------------------------------------------------------- links


def check_links(root: Path) -> int:
    """Assert that every link and image of every page under root names a file under root (or,
    ending in '/', an image's folder); return how many were checked."""
    checked = 0
    for page in html_pages(root):
        for tag, url in parse(page).links():
            parts = urlsplit(url)
            assert not parts.scheme and not parts.netloc, f"{page.name}: external {url}"
            assert not url.startswith("/"), f"{page.name}: absolute {url}"
            if not parts.path:  # a fragment on the same page
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            # An image without a page of its own links to its output folder, its grids.
            found = target.is_dir() if parts.path.endswith("/") else target.is_file()
            assert found, f"{page.relative_to(root)}: <{tag}> {url} -> {target}"
            assert root.resolve() in target.parents
            checked += 1
    return checked


def test_every_link_and_image_resolves_to_a_file(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    assert len(html_pages(root)) == 1 + 3 + 4  # index, one page per image, one per layer
    assert check_links(root) > 50


def test_fragments_point_at_sections(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    for page in html_pages(root):
        for _, url in parse(page).links():
            parts = urlsplit(url)
            if not parts.fragment:
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path))
            ids = {a.get("id") for _, a in parse(target).tags}
            assert parts.fragment in ids, f"{page.name}: {url}"


def test_names_are_escaped_and_urls_encoded(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    for page in html_pages(root):
        raw = page.read_text(encoding="utf-8")
        parsed = parse(page)
        assert EVIL not in raw
        assert "<b>" not in raw
        # The only script is the filter box of the index, never a name.
        assert all("alert" not in s for s in parsed.scripts)
        assert sum(tag == "script" for tag, _ in parsed.tags) == (page.name == "index.html")
    index = parse(root / "index.html")
    assert any(EVIL in t for t in index.text)  # shown as text
    odd_page = root / "report/images/odd_name_1_é.html"
    urls = [u for _, u in parse(odd_page).links()]
    assert "../../odd%20name%20%231%3F%C3%A9/00_conv1.png" in urls
    assert "../../odd%20name%20%231%3F%C3%A9/overlay%200.png" in urls
    assert "../../odd%20name%20%231%3F%C3%A9/02_layer1.0.relu%202%20%23x.png" in urls
    assert any(EVIL in t for t in parse(odd_page).text)
    assert any("class 0 <b>" in t for t in parse(odd_page).text)


def test_every_img_is_lazy(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    count = 0
    for page in html_pages(root):
        for tag, attrs in parse(page).tags:
            if tag == "img":
                assert attrs.get("loading") == "lazy", page.name
                assert attrs.get("alt") is not None
                count += 1
    assert count >= 3 * 3 * 2  # grids on image pages and again on layer pages


# --------------------------------------------------------------------------- content


def test_random_weights_banner(tmp_path: Path, folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    index = (root / "index.html").read_text(encoding="utf-8")
    banner = re.search(r'<div class="banner" role="alert">(.*?)</div>', index)
    assert banner is not None
    assert "RANDOM WEIGHTS" in banner.group(1)
    assert "no network to download ResNet18_Weights" in banner.group(1)
    assert "seed 0" in banner.group(1)
    for page in html_pages(root):
        assert 'role="alert"' in page.read_text(encoding="utf-8"), page.name
    # The run's own warning about the same thing is not repeated under the banner.
    assert "RANDOM WEIGHTS: no network</div>" not in index

    manifest, stats = make_run(tmp_path, random=False, with_stats=False)
    trained = report_files(manifest, stats)["index.html"].decode()
    assert 'role="alert"' not in trained
    assert "ResNet18_Weights.IMAGENET1K_V1" in trained


def test_header_lists_the_run(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    text = " ".join(parse(root / "index.html").text)
    for expected in (
        "resnet18",
        "conv,relu",
        "cpu",
        "torch 2.x",
        "torchvision 0.x",
        "2026-01-02T03:04:05+00:00",
        "3 drawn, 1 failed, 1 skipped",
    ):
        assert expected in text, expected


def test_flagged_layers_carry_badges(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    odd = (root / "report/images/odd_name_1_é.html").read_text(encoding="utf-8")
    sections = re.findall(
        r'<section class="layer( flagged)?" id="L(\d)">(.*?)</section>', odd, flags=re.DOTALL
    )
    assert [(bool(flagged), int(i)) for flagged, i, _ in sections] == [
        (False, 0),
        (False, 1),
        (True, 2),
        (True, 3),
    ]
    relu_section = sections[2][2]
    assert '<span class="badge severe">nan</span>' in relu_section
    assert '<span class="badge">dead</span>' in relu_section
    assert "3 of 4 channels never positive (75%)" in relu_section
    assert "Non-finite values first appear in" in odd
    assert "href='#L2'" in odd
    cat = (root / "report/images/cat.html").read_text(encoding="utf-8")
    assert '<span class="badge">dead</span>' in cat and "badge severe" not in cat
    index = (root / "index.html").read_text(encoding="utf-8")
    assert '<span class="badge severe">nan</span>' in index


def test_statistics_are_shown(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    text = " ".join(parse(root / "report/images/cat.html").text)
    assert "zeros" in text and "dead ch." in text and "p99" in text
    assert "75.0%" in text  # the dead-channel fraction of the ReLU layer


def test_folder_run_pages(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, files = folder_run
    assert sorted(f for f in files if f.startswith("report/images/")) == [
        "report/images/cat.html",
        "report/images/odd_name_1_é.html",
        "report/images/sub__dog.html",
    ]
    layer_pages = sorted(f for f in files if f.startswith("report/layers/"))
    assert len(layer_pages) == 4 and layer_pages[0] == "report/layers/00_conv1.html"
    layer = parse(root / layer_pages[0])
    grids = [a["src"] for t, a in layer.tags if t == "img" and a.get("class") == "grid"]
    assert grids == [
        "../../cat/00_conv1.png",
        "../../odd%20name%20%231%3F%C3%A9/00_conv1.png",
        "../../sub/dog/00_conv1.png",
    ]
    overlays = [a["src"] for t, a in layer.tags if t == "img" and a.get("class") == "overlay"]
    assert overlays == [g.replace("00_conv1", "overlay%200") for g in grids]
    index = parse(root / "index.html")
    hrefs = [a.get("href") for t, a in index.tags if t == "a"]
    assert "report/images/sub__dog.html" in hrefs
    assert "report/layers/00_conv1.html" in hrefs
    head = " ".join(parse(root / layer_pages[3]).text)
    assert "Not drawn: cannot draw head" in head


def test_failed_and_skipped_are_listed(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    text = " ".join(parse(root / "index.html").text)
    assert "Failed images (1)" in text
    assert "/data/in/broken <x>.jpg" in text
    assert "cannot identify image file <broken>" in text
    assert "Skipped inputs (1)" in text and "not an image" in text


def test_charts_are_svgs(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    _, files = folder_run
    charts = sorted(f for f in files if f.startswith("report/") and "depth" in f)
    assert charts == [
        "report/depth/cat.svg",
        "report/depth/odd_name_1_é.svg",
        "report/depth/sub__dog.svg",
        "report/run_depth.svg",
    ]
    assert not [f for f in files if f.endswith(".png")]
    for name in charts:
        svg = ElementTree.fromstring(files[name])
        assert (svg.get("width"), svg.get("height")) == ("1000", "420")
        lines = svg.findall(f"{SVG}polyline")
        # std, mean, zeros, negative, dead: each a point per layer (no value is missing here).
        assert len(lines) == 5, name
        assert {len(line.get("points", "").split()) for line in lines} == {4}
        # Flagged layers are marked in red on every chart (all images have a dead layer).
        marks = [e for e in svg.iter(f"{SVG}line") if e.get("stroke-opacity") == "0.3"]
        assert {e.get("stroke") for e in marks} == {"#b3261e"}
        assert len(marks) >= 2 and len(marks) % 2 == 0, name  # upper and lower panel
        tips = [e.text or "" for e in svg.iter(f"{SVG}title")]
        assert [t.split(":")[0] for t in tips] == [
            "#0 conv1",
            f"#1 {EVIL}",
            "#2 layer1.0.relu",
            "#3 head",
        ]


def test_large_run_charts_flagged_images_and_the_first_few(tmp_path: Path) -> None:
    flagged = {3, 17, 25}  # one among the first images, two past them
    manifest, stats = make_run(tmp_path, images=30, layers=6, flagged=flagged)
    assert stats is not None
    keys = [im["out_dir"] for im in manifest["images"] if im["status"] == "ok"]
    assert [n for n, key in enumerate(keys) if stats["images"][key]["flags"]] == sorted(flagged)
    files = report_files(manifest, stats, out_dir_name="out")
    write(tmp_path, files)

    charted = sorted(f for f in files if f.startswith("report/depth/"))
    slugs = ["cat", "odd_name_1_é", "sub__dog", "more__x", "y"] + [
        f"img{n:03d}" for n in range(5, 30)
    ]
    wanted = set(range(PER_IMAGE_CHARTS)) | flagged
    assert PER_IMAGE_CHARTS == 12
    assert charted == sorted(f"report/depth/{slugs[n]}.svg" for n in wanted)
    assert "report/run_depth.svg" in files
    # A page of its own for the first LINKED_FIRST images and for the flagged one past them.
    linked = set(range(LINKED_FIRST)) | flagged
    assert LINKED_FIRST == 24
    pages = sorted(f for f in files if f.startswith("report/images/"))
    assert pages == sorted(f"report/images/{slugs[n]}.html" for n in linked)
    assert len(html_pages(tmp_path)) == 1 + len(linked) + 6
    assert check_links(tmp_path) > 25 * 6

    def chart_srcs(page: str) -> list[str]:
        tags = parse(tmp_path / "report/images" / page).tags
        return [str(a["src"]) for t, a in tags if t == "img" and a.get("class") == "chart"]

    for n, slug in enumerate(slugs):
        page = f"{slug}.html"
        if n not in linked:
            continue
        text = "".join(parse(tmp_path / "report/images" / page).text)
        if n in wanted:
            assert chart_srcs(page) == [f"../../report/depth/{quote(slug)}.svg"], page
            assert "drawn only for images with a flag" not in text, page
        else:
            assert chart_srcs(page) == ["../../report/run_depth.svg"], page
            assert "drawn only for images with a flag and for the first 12" in text, page
            assert "the chart below is the run's, pooled over all images" in text, page
            assert "in the table below and in stats.json" in text, page
            assert "p99" in text  # the numbers are still on the page
    # The index links every image: to its page, or to its folder where its grids are.
    index = parse(tmp_path / "index.html")
    hrefs = [a.get("href") for t, a in index.tags if t == "a"]
    for n, slug in enumerate(slugs):
        if n in linked:
            assert f"report/images/{quote(slug)}.html" in hrefs, slug
        else:
            assert f"{slug}/" in hrefs, slug


def test_predictions_and_thumbnail(folder_run: tuple[Path, dict[str, bytes]]) -> None:
    root, _ = folder_run
    cat = parse(root / "report/images/cat.html")
    srcs = [a["src"] for t, a in cat.tags if t == "img"]
    assert srcs[0] == "../../cat/input.png"
    text = " ".join(cat.text)
    assert "class 0 <b>" in text and "50.0%" in text and "281" in text


def test_no_thumbnail_unless_the_manifest_names_one(tmp_path: Path) -> None:
    manifest, stats = make_run(tmp_path, images=2, thumbnails=False, with_stats=False)
    files = report_files(manifest, stats)
    for name, data in files.items():
        if name.endswith(".html"):
            assert b"input.png" not in data


def test_single_image_shows_its_layers_on_the_index(tmp_path: Path) -> None:
    manifest, stats = make_run(tmp_path, images=1, failed=False)
    files = report_files(manifest, stats)
    assert sorted(files) == ["index.html", "report/depth/cat.svg"]
    write(tmp_path, files)
    index = parse(tmp_path / "index.html")
    ids = [a.get("id") for _, a in index.tags if a.get("id")]
    assert ids == ["L0", "L1", "L2", "L3"]
    srcs = [a["src"] for t, a in index.tags if t == "img"]
    assert srcs[:2] == ["cat/input.png", "report/depth/cat.svg"]
    assert "cat/00_conv1.png" in srcs
    for _, url in index.links():
        path = urlsplit(url).path
        assert not path or (tmp_path / unquote(path)).is_file(), url


def test_without_statistics(tmp_path: Path) -> None:
    manifest, _ = make_run(tmp_path, images=2)
    files = report_files(manifest, None)
    assert not [f for f in files if f.endswith(".svg")]
    write(tmp_path, files)
    for page in html_pages(tmp_path):
        raw = page.read_text(encoding="utf-8")
        assert "dead ch." not in raw and "Depth profile" not in raw
        for _, url in parse(page).links():
            path = urlsplit(url).path
            assert not path or (page.parent / unquote(path)).is_file(), url


def test_nothing_drawn_at_all(tmp_path: Path) -> None:
    manifest, stats = make_run(tmp_path, images=0, failed=True, with_stats=False)
    files = report_files(manifest, stats)
    assert list(files) == ["index.html"]
    text = files["index.html"].decode()
    assert "0 drawn, 1 failed" in text and "Failed images (1)" in text


def test_chart_titles_and_names_are_escaped(tmp_path: Path) -> None:
    manifest, stats = make_run(tmp_path, images=2, failed=False)
    assert stats is not None
    manifest["images"][0]["path"] = "/data/in/<猫> & 'dog'.jpg"
    manifest["images"][1]["path"] = "/data/in/esc\x1b and \udcff bytes.jpg"
    files = report_files(manifest, stats)
    svg = ElementTree.fromstring(files["report/depth/cat.svg"])  # well-formed XML
    texts = [e.text for e in svg.iter(f"{SVG}text")]
    assert "/data/in/<猫> & 'dog'.jpg" in texts
    # What XML cannot hold (a control character, an undecodable byte) is replaced, not fatal.
    odd = ElementTree.fromstring(files["report/depth/odd_name_1_é.svg"])
    assert "/data/in/esc\ufffd and \ufffd bytes.jpg" in [e.text for e in odd.iter(f"{SVG}text")]
    with pytest.raises(ValueError, match="at least one layer"):
        depth_chart([], [], "nothing")


def test_symlog_scale_and_ticks() -> None:
    from actviz.report.charts import _linear_ticks, _symlog_ticks, symlog

    scale = symlog(0.1)
    assert scale(0.05) == pytest.approx(0.5) and scale(-0.1) == pytest.approx(-1.0)
    assert scale(1.0) == pytest.approx(2.0) and scale(-100.0) == pytest.approx(-4.0)
    # Powers of ten beyond the linear range, both signs, 0 between them.
    assert _symlog_ticks(0.1, scale(-10.0), scale(100.0)) == [-10.0, -1.0, 0.0, 1.0, 10.0, 100.0]
    crowded = _symlog_ticks(1e-6, scale(-1e6), scale(1e6))
    assert 0.0 in crowded and len(crowded) <= 9
    assert _linear_ticks(-0.2, 1.1) == pytest.approx([0.0, 0.5, 1.0])


# --------------------------------------------------------------------------- hostile names

HOSTILE_FILE = "/data/in/<script>alert(1)</script>.jpg"
HOSTILE_LAYER = 'conv" onerror="alert(2)" a=\'&<>'
HOSTILE_LABEL = "<img src=x onerror=alert(3)>&amp;"


def renamed(value: Any, old: str, new: str) -> Any:
    """``value`` (JSON-like) with every string equal to ``old`` replaced by ``new``."""
    if isinstance(value, dict):
        return {k: renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, old, new) for v in value]
    return new if value == old else value


def test_hostile_names_are_escaped_on_every_page(tmp_path: Path) -> None:
    manifest, stats = make_run(tmp_path)
    manifest, stats = (
        renamed(manifest, "conv1", HOSTILE_LAYER),
        renamed(stats, "conv1", HOSTILE_LAYER),
    )
    manifest["images"][0]["path"] = HOSTILE_FILE
    manifest["images"][0]["predictions"][0]["label"] = HOSTILE_LABEL
    manifest["model"] = HOSTILE_LABEL
    manifest["warnings"] = [f"cannot read {HOSTILE_FILE}"]
    files = report_files(manifest, stats, out_dir_name=HOSTILE_LABEL)
    write(tmp_path, files)
    pages = html_pages(tmp_path)
    assert len(pages) == 1 + 3 + 4

    def shown(page: Path) -> str:
        return "\n".join(parse(page).text)

    for page in pages:
        raw = page.read_text(encoding="utf-8")
        for hostile in (HOSTILE_FILE, HOSTILE_LAYER, HOSTILE_LABEL, EVIL):
            assert hostile not in raw, (page.name, hostile)
        parsed = parse(page)
        # Nothing of a name turned into a tag, an attribute or a script.
        assert all(not name.startswith("on") for _, a in parsed.tags for name in a), page.name
        assert all(a.get("class") for t, a in parsed.tags if t == "img"), page.name
        assert sum(t == "script" for t, _ in parsed.tags) == (page.name == "index.html")
        # The model's name is on every page, shown as the text it is.
        assert HOSTILE_LABEL in shown(page), page.name

    def title(page: Path) -> str:
        found = re.search(r"<title>(.*?)</title>", page.read_text(encoding="utf-8"))
        assert found is not None, page.name
        return html.unescape(found.group(1))

    assert title(tmp_path / "index.html") == f"actviz · {HOSTILE_LABEL} · {HOSTILE_LABEL}"
    assert title(tmp_path / "report/images/cat.html") == f"actviz · {HOSTILE_FILE}"

    index = shown(tmp_path / "index.html")
    assert HOSTILE_FILE in index and HOSTILE_LAYER in index and EVIL in index
    assert f"cannot read {HOSTILE_FILE}" in index
    for page in sorted((tmp_path / "report/images").glob("*.html")):
        assert HOSTILE_LAYER in shown(page) and EVIL in shown(page), page.name
        alts = [a.get("alt") for t, a in parse(page).tags if t == "img"]
        assert f"feature maps of {HOSTILE_LAYER}" in alts, page.name
    first = parse(tmp_path / "report/images/cat.html")
    assert HOSTILE_FILE in first.text  # the page's heading
    assert f"{HOSTILE_LABEL} (50.0%)" in index  # the first image's top prediction
    assert any(HOSTILE_LABEL in t for t in first.text)
    for page in sorted((tmp_path / "report/layers").glob("*.html")):
        assert HOSTILE_FILE in shown(page), page.name  # the card of the first image
    own = list((tmp_path / "report/layers").glob("00_*.html"))
    assert len(own) == 1 and HOSTILE_LAYER in parse(own[0]).text  # its heading
    assert title(own[0]) == f"actviz · {HOSTILE_LAYER}"


# --------------------------------------------------------------------------- reports at scale

LAYER_SLUGS = ["conv1", "_script_alert_1___script", "relu"]


def write_pages(root: Path, pages: Iterable[tuple[str, bytes]]) -> list[str]:
    """Write the report's files as they come, keeping none; their paths, in order."""
    written = []
    for rel, data in pages:
        assert not PurePosixPath(rel).is_absolute() and ".." not in PurePosixPath(rel).parts
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(rel)
    return written


@pytest.fixture(scope="module")
def large_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[str], dict[str, Any], ReportImages]:
    root = tmp_path_factory.mktemp("large") / "out"
    root.mkdir()
    manifest, stats, images = make_large_run(root, 2000)
    written = write_pages(root, build_report(manifest, stats, images, out_dir_name="out"))
    return root, written, stats, images


def test_a_large_run_writes_a_bounded_number_of_files(
    large_run: tuple[Path, list[str], dict[str, Any], ReportImages],
) -> None:
    root, written, _, images = large_run
    assert len(written) == len(set(written))
    linked = [im for im in images.linked if im["status"] == "ok"]
    # The first 24, and the 10 worst of each of two kinds (some among the first 24 already).
    assert LINKED_FIRST < len(linked) <= LINKED_FIRST + 2 * 10
    assert math.ceil(2000 / PAGE_ROWS) == 4
    assert len(written) == expected_files(images)
    assert len(written) < 80
    assert sorted(f for f in written if f.startswith("report/index/")) == [
        "report/index/002.html",
        "report/index/003.html",
        "report/index/004.html",
    ]
    pages = {f for f in written if f.startswith("report/images/")}
    assert len(pages) == len(linked)
    assert "index.html" in written and "report/run_depth.svg" in written


def test_every_link_of_a_large_report_resolves(
    large_run: tuple[Path, list[str], dict[str, Any], ReportImages],
) -> None:
    root, _, _, images = large_run
    assert check_links(root) > 2000
    numbers: list[int] = []
    folders = pages = 0
    index = [root / "index.html", *sorted((root / "report/index").glob("*.html"))]
    for page in index:
        tree = parse(page)
        text = page.read_text(encoding="utf-8")
        body = text[text.index('<table id="images">') :]
        body = body[: body.index("</table>")]
        numbers += [int(n) for n in re.findall(r"<tr[^>]*><td class=n>(\d+)</td>", body)]
        hrefs = [a.get("href") or "" for t, a in tree.tags if t == "a"]
        folders += sum(h.startswith(("im%20", "../../im%20")) and h.endswith("/") for h in hrefs)
        pages += sum("report/images/" in h for h in hrefs)
        assert sum(t == "script" for t, _ in tree.tags) == 1, page.name  # the filter box
    # Every image is listed once, in order; each drawn one links to its page or its folder.
    assert numbers == list(range(1, 2001))
    linked = sum(im["status"] == "ok" for im in images.linked)
    assert folders == 2000 - images.failed - linked
    assert pages >= linked
    second = parse(root / "report/index/002.html")
    assert "Images 501\u2013" + "1000 of 2000" in " ".join(second.text)
    hrefs = [a.get("href") for t, a in second.tags if t == "a"]
    assert "../../index.html" in hrefs and "003.html" in [h.rsplit("/", 1)[-1] for h in hrefs if h]
    for page in html_pages(root):
        raw = page.read_text(encoding="utf-8")
        assert EVIL not in raw and "<b>" not in raw, page.name


def test_the_worst_images_are_on_the_index(
    large_run: tuple[Path, list[str], dict[str, Any], ReportImages],
) -> None:
    root, _, stats, _ = large_run
    text = (root / "index.html").read_text(encoding="utf-8")
    table = text[text.index('<table id="worst-images"') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr><td>(.*?)</tr>", table, flags=re.DOTALL)
    assert len(rows) == 2  # nan, dead: in the order of FLAG_KINDS
    for row, kind in zip(rows, ("nan", "dead"), strict=True):
        assert f">{kind}</span>" in row
        assert f"<td class=n>{stats['flags']['images'][kind]}</td>" in row
        shown = re.findall(r'<a href="(report/images/[^"]+)">([^<]+)</a>', row)
        worst = stats["flags"]["worst"][kind]
        assert [html.unescape(name) for _, name in shown] == [e["image"] for e in worst]
        for href, _ in shown:
            assert (root / unquote(href)).is_file()
    # Per-layer summaries over the whole folder: images, spread over images, flagged counts.
    layers = parse(root / "index.html")
    words = " ".join(layers.text)
    assert "-0.5 / 0.1 / 0.7" in words and "dead 21" in words
    assert "Failed images (4)" in words and "Skipped inputs (120)" in words
    assert f"The first {LISTED} are listed" in words


def test_a_layer_page_of_a_large_run_shows_the_folder_and_the_linked_images(
    large_run: tuple[Path, list[str], dict[str, Any], ReportImages],
) -> None:
    root, _, _, images = large_run
    (page,) = sorted((root / "report/layers").glob("02_*.html"))
    tree = parse(page)
    words = " ".join(tree.text)
    assert "over 1996 images" in words and "in 21 images" in words
    linked = sum(im["status"] == "ok" for im in images.linked)
    assert f"Linked images ({linked} of 1996)" in words
    grids = [a for t, a in tree.tags if t == "img" and a.get("class") == "grid"]
    assert len(grids) == linked


def test_a_single_image_of_a_streamed_run_is_shown_on_the_index(tmp_path: Path) -> None:
    manifest, stats, images = make_large_run(tmp_path, 1)
    written = write_pages(tmp_path, build_report(manifest, stats, images))
    assert sorted(written) == ["index.html", "report/depth/im_00000.svg"]
    index = parse(tmp_path / "index.html")
    assert [a.get("id") for _, a in index.tags if a.get("id")] == ["L0", "L1", "L2"]
    srcs = [a["src"] for t, a in index.tags if t == "img"]
    assert srcs[0] == "report/depth/im_00000.svg" and "im%2000000/00.png" in srcs
    assert "Images (" not in " ".join(index.text)
    check_links(tmp_path)


def test_rebuilding_a_streamed_run_relinks_only_the_index(tmp_path: Path) -> None:
    manifest, stats, images = make_large_run(tmp_path, 30)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    write_pages(tmp_path, build_report(manifest, stats, images, out_dir_name=tmp_path.name))
    before = (tmp_path / "index.html").read_bytes()
    assert rebuild_run_report(tmp_path) == {"index.html": before}  # nothing new beside it
    (tmp_path / "top-images.html").write_text("<html></html>")
    (tmp_path / "diff.html").write_text("<html></html>")
    rebuilt = rebuild_run_report(tmp_path)
    assert list(rebuilt) == ["index.html"]
    page = rebuilt["index.html"].decode()
    assert 'href="top-images.html"' in page and 'href="diff.html"' in page
    expected = dict(
        build_report(
            manifest,
            stats,
            images,
            out_dir_name=tmp_path.name,
            related=related_reports(tmp_path),
        )
    )
    assert rebuilt["index.html"] == expected["index.html"]
    # A folder whose report this version did not write, and which lists no images, is left.
    (tmp_path / "index.html").write_text("<html>someone else's</html>")
    assert rebuild_run_report(tmp_path) == {}


def test_a_large_run_without_statistics(tmp_path: Path) -> None:
    manifest, _, images = make_large_run(tmp_path, 1200)
    # Without statistics there are no flags: the linked images are the first ones.
    linked = [
        {
            **im,
            "flags": [],
            "first_nonfinite": None,
            "layers": [{k: v for k, v in e.items() if k != "stats"} for e in im["layers"]],
        }
        for im in images.linked
        if int(im["out_dir"].split()[-1]) < LINKED_FIRST or im["status"] == "failed"
    ]
    plain = ReportImages(total=1200, failed=images.failed, linked=linked, rows=images.rows)
    written = write_pages(tmp_path, build_report(manifest, None, plain))
    assert sorted(written) == sorted(
        ["index.html", "report/index/002.html", "report/index/003.html"]
        + [f"report/images/im_{n:05d}.html" for n in range(LINKED_FIRST)]
        + [f"report/layers/{n:02d}_{safe}.html" for n, safe in enumerate(LAYER_SLUGS)]
    )
    check_links(tmp_path)
    for page in html_pages(tmp_path):
        raw = page.read_text(encoding="utf-8")
        assert "Depth profile" not in raw and "Flagged images" not in raw, page.name


def test_a_manifest_without_its_images_needs_them_given(tmp_path: Path) -> None:
    from actviz.errors import UsageError

    manifest, stats, images = make_large_run(tmp_path, 3)
    with pytest.raises(UsageError, match="pass the report its images"):
        build_report(manifest, stats)
    assert dict(build_report(manifest, stats, images))["index.html"].startswith(b"<!DOCTYPE")


# --------------------------------------------------------------------------- templates


def test_templates_ship_as_package_data() -> None:
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["actviz"]
    templates = sorted((root / "actviz/report/templates").iterdir())
    assert {t.name for t in templates} >= {"base.html", "blocks.html", "index.html"}
    for template in templates:
        relative = template.relative_to(root / "actviz").as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative


INSTALLED_SCRIPT = """
import json, sys
from pathlib import Path
import actviz
from actviz.report.pages import build_report
assert Path(actviz.__file__).is_relative_to(Path(sys.argv[1])), actviz.__file__
manifest = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
files = build_report(manifest, None, out_dir_name="out")
print(json.dumps({k: v.decode() for k, v in files.items() if k.endswith(".html")}))
"""


@pytest.mark.slow
def test_an_installed_wheel_finds_its_templates(tmp_path: Path) -> None:
    """Build the wheel, unpack it (what installing a pure-Python wheel does) and build a
    report with it, in a process that cannot see the source tree."""
    pytest.importorskip("setuptools")
    root = Path(__file__).resolve().parents[1]
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, source / name)
    shutil.copytree(root / "actviz", source / "actviz", ignore=shutil.ignore_patterns("__py*"))
    build = "from setuptools import build_meta; print(build_meta.build_wheel('dist'))"
    result = subprocess.run(
        [sys.executable, "-c", build], cwd=source, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (source / "dist").glob("actviz-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(site)
    for template in (root / "actviz/report/templates").iterdir():
        assert f"actviz/report/templates/{template.name}" in names

    manifest, _ = make_run(tmp_path / "run", images=2)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", INSTALLED_SCRIPT, str(site), str(tmp_path / "manifest.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pages = json.loads(result.stdout)
    assert len(pages) == 1 + 2 + 4
    index = pages["index.html"]
    assert index.startswith("<!DOCTYPE html>") and index.rstrip().endswith("</html>")
    assert "<title>actviz · resnet18 · out</title>" in index
    # Two images drawn and one failed: the index lists all three.
    for heading in ("<h2>Run</h2>", "<h2>Images (3)</h2>", "<h2>Layers across images</h2>"):
        assert heading in index, heading
    assert '<div class="banner" role="alert">RANDOM WEIGHTS' in index
    assert "Made with actviz" in index and "section.layer" in index  # footer, stylesheet
    image = pages["report/images/cat.html"]
    assert image.count('<section class="layer') == 4 and "<h2>Layers</h2>" in image


@pytest.mark.slow
def test_the_run_report_links_top_images_written_beside_it(tmp_path: Path) -> None:
    import actviz
    from tests.conftest import make_image

    folder = tmp_path / "in"
    for i in range(2):
        make_image(folder / f"p{i}.png", size=(40, 40), seed=i)
    out = tmp_path / "out"
    actviz.run("resnet18", [folder], layers="layer4", out=out, weights="none", stats=False)
    assert "top-images.html" not in (out / "index.html").read_text()
    actviz.top_images(
        "resnet18", [folder], layers="layer4", out=out, weights="none", k=2, overwrite=True
    )
    index = (out / "index.html").read_text()
    assert 'href="top-images.html"' in index and "top images of every channel" in index
    # The rebuilt report still shows the run: both images and their grids.
    assert "p0/00_layer4.png" in index or "report/images/p0.html" in index
