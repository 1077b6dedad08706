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
from tests.test_report import make_run, write

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
