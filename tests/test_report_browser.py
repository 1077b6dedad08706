"""The report in a real browser: headless Chromium opens it from disk and loads every image.

Skipped when Chromium is not installed (``apt-get install chromium`` on Debian/Ubuntu). Set
``ACTVIZ_REPORT_SCREENSHOT=/some/file.png`` to keep the screenshot for a look.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from actviz.report.pages import build_report
from tests.scale_run import make_large_run
from tests.test_report import make_run, write, write_pages

# Counts the images that failed to load once the page (with every image made eager) is done,
# and writes the result where --dump-dom shows it.
CHECK_SCRIPT = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !i.complete || i.naturalWidth === 0; });
  document.body.setAttribute('data-images', String(imgs.length));
  document.body.setAttribute('data-broken', String(bad.length));
  document.body.setAttribute('data-broken-src',
    bad.map(function (i) { return i.getAttribute('src'); }).join(' | '));
});
</script>"""

BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=5000",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


@pytest.fixture(scope="module")
def chromium() -> str:
    found = find_chromium()
    if found is None:
        pytest.skip("Chromium is not installed; install it with `apt-get install chromium`")
    return found


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser") / "out"
    root.mkdir()
    manifest, stats = make_run(root)
    write(root, build_report(manifest, stats, out_dir_name="out"))
    return root


@pytest.fixture(scope="module")
def large_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 images, of which only the 4th, 18th and 26th raise flags: most pages past the first
    12 show the run's depth chart rather than one of their own."""
    root = tmp_path_factory.mktemp("browser-large") / "out"
    root.mkdir()
    manifest, stats = make_run(root, images=30, layers=6, flagged={3, 17, 25})
    write(root, build_report(manifest, stats, out_dir_name="out"))
    return root


def browse(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A list of arguments, never a shell: the paths hold spaces, '#' and '?'.
    return subprocess.run(
        [chromium, *BROWSER_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def checked_copy(page: Path) -> Path:
    """A copy of the page beside it with eager images and the counting script."""
    text = page.read_text(encoding="utf-8").replace('loading="lazy"', 'loading="eager"')
    copy = page.with_name(f"check-{page.name}")
    copy.write_text(text.replace("</body>", CHECK_SCRIPT + "</body>"), encoding="utf-8")
    return copy


@pytest.mark.parametrize(
    "page",
    ["index.html", "report/images/odd_name_1_é.html", "report/layers/02_layer1.0.relu_2.html"],
)
def test_every_image_loads(chromium: str, report: Path, tmp_path: Path, page: str) -> None:
    copy = checked_copy(report / page)
    result = browse(chromium, tmp_path / "profile", "--dump-dom", copy.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", result.stdout)
    assert body is not None, result.stdout[:2000]
    attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', body.group(1)))
    assert int(attrs.get("data-images", "0")) >= 3, attrs
    assert attrs.get("data-broken") == "0", attrs.get("data-broken-src")


@pytest.mark.parametrize(
    "page", ["index.html", "report/images/img020.html", "report/images/img017.html"]
)
def test_every_image_of_a_large_run_loads(
    chromium: str, large_report: Path, tmp_path: Path, page: str
) -> None:
    copy = checked_copy(large_report / page)
    result = browse(chromium, tmp_path / "profile", "--dump-dom", copy.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", result.stdout)
    assert body is not None, result.stdout[:2000]
    attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', body.group(1)))
    assert int(attrs.get("data-images", "0")) >= 3, attrs
    assert attrs.get("data-broken") == "0", attrs.get("data-broken-src")
    charts = re.findall(r'<img class="chart" src="([^"]*)"', result.stdout)
    assert len(charts) == 1, charts
    if page.startswith("report/images/"):
        own = page == "report/images/img017.html"  # flagged, so it has a chart of its own
        assert charts[0].endswith("/img017.svg" if own else "/run_depth.svg"), charts


def test_screenshot_is_not_blank(chromium: str, report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    # On an overloaded machine headless Chromium can capture before its first paint, which
    # gives a white page; a second try then shows what the page really looks like.
    for attempt in range(3):
        result = browse(
            chromium,
            tmp_path / f"profile{attempt}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            (report / "index.html").as_uri(),
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert shot.is_file()
        with Image.open(shot) as image:
            grey = np.asarray(image.convert("L"))
            if grey.std() > 20 and (grey < 200).mean() > 0.01:
                break
    keep = os.environ.get("ACTVIZ_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size == (1280, 2000)
        pixels = np.asarray(image.convert("RGB")).astype(np.int16)
    assert pixels.std() > 20
    # Text, tables and pictures: at least 1% of a 1280 x 2000 page (25,600 pixels) is ink.
    assert (pixels.sum(axis=-1) < 600).mean() > 0.01
    # The random-weights banner: its dark red border and text.
    red = (pixels[..., 0] > 150) & (pixels[..., 1] < 70) & (pixels[..., 2] < 70)
    assert red.sum() > 500


# Types into the filter box of an index page and counts the rows left showing.
FILTER_SCRIPT = """<script>
window.addEventListener('load', function () {
  var box = document.getElementById('filter');
  var rows = document.querySelectorAll('#images tbody tr');
  document.body.setAttribute('data-rows', String(rows.length));
  box.value = '%s';
  box.dispatchEvent(new Event('input'));
  var shown = Array.prototype.filter.call(rows, function (r) { return !r.hidden; });
  document.body.setAttribute('data-shown', String(shown.length));
});
</script>"""


@pytest.fixture(scope="module")
def paged_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 images as a streamed run hands them to the report: four index pages, a page for
    each linked image, every other image linked to its folder."""
    root = tmp_path_factory.mktemp("browser-paged") / "out"
    root.mkdir()
    manifest, stats, images = make_large_run(root, 2000)
    write_pages(root, build_report(manifest, stats, images, out_dir_name="out"))
    return root


def page_in_browser(chromium: str, page: Path, profile: Path, query: str) -> dict[str, str]:
    """The page's body attributes once loaded (broken images, rows, rows left by the filter),
    and its DOM; fails on any message the page wrote to the console (an error, above all)."""
    copy = checked_copy(page)
    text = copy.read_text(encoding="utf-8")
    copy.write_text(text.replace("</body>", FILTER_SCRIPT % query + "</body>"), encoding="utf-8")
    result = browse(
        chromium, profile, "--enable-logging=stderr", "--v=0", "--dump-dom", copy.as_uri()
    )
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console
    body = re.search(r"<body([^>]*)>", result.stdout)
    assert body is not None, result.stdout[:2000]
    attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', body.group(1)))
    attrs["dom"] = result.stdout
    return attrs


def test_a_paged_report_of_2000_images_loads(
    chromium: str, paged_report: Path, tmp_path: Path
) -> None:
    index = page_in_browser(chromium, paged_report / "index.html", tmp_path / "p1", "im 00007")
    assert index.get("data-broken") == "0", index.get("data-broken-src")
    assert index.get("data-rows") == "500"
    assert index.get("data-shown") == "1"  # the filter box works on the page's rows
    assert "Images (2000)" in index["dom"]
    found = re.search(r'<a href="(report/index/002\.html)">next', index["dom"])
    assert found is not None
    second = paged_report / found.group(1)
    assert second.is_file()
    page = page_in_browser(chromium, second, tmp_path / "p2", "im 00600")
    assert page.get("data-broken") == "0", page.get("data-broken-src")
    assert page.get("data-rows") == "500" and page.get("data-shown") == "1"
    assert "Images 501–1000 of 2000" in page["dom"]
    assert 'href="../../index.html"' in page["dom"] and 'href="003.html"' in page["dom"]
