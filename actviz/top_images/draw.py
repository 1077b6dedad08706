"""After the pass over the folder: the pictures of the images the top-k chose.

The candidates of the pass hold no pixels (they stay small enough for remote workers), so the
crops are cut here, from the model input as the model saw it (preprocessed exactly as for the
model, then de-normalized). Views of images that are in some channel's top ``k`` are kept from
the pass itself while they fit in :data:`VIEW_BUDGET` bytes (:class:`ViewCache`); the others
are decoded once more. Each entry becomes a tile; tiles are cut, and sheets composed and
PNG-encoded, in two worker threads (Pillow, numpy and zlib release the GIL) while the next
images decode and, at the end, while the caller writes ``top-images.json`` and the report.

Memory is bounded by the number of entries and the budgets, never by the number of images:
layers are drawn in groups of at most :data:`ENTRY_BUDGET` entries (one layer of 512 channels
and k = 9 is one group).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from actviz import output
from actviz.command.session import RANDOM_NOTE
from actviz.io.loader import decode_batches
from actviz.output import order_width, safe_name
from actviz.render import Header, fmt_value
from actviz.render.png import encode_png
from actviz.top_images.document import LayerFiles, channel_health, selectivity
from actviz.top_images.plan import LayerPlan
from actviz.top_images.sheets import (
    Row,
    SheetTile,
    contact_sheet,
    crop_view,
    cut_tiles,
    heat_scales,
    max_overview_rows,
    overview,
    score_text,
    tile_name,
)
from actviz.top_images.topk import LayerTop

if TYPE_CHECKING:
    from PIL import Image

    from actviz.models import LoadedModel
    from actviz.top_images.options import TopImagesOptions

__all__ = ["ENTRY_BUDGET", "FOLDER", "VIEW_BUDGET", "ViewCache", "draw_layers", "layer_files"]

FOLDER = "top-images"
#: Tiles held in memory at most before they are drawn into sheets (about 127 MB at 96 px).
ENTRY_BUDGET = 4608
#: Bytes of model views kept from the pass for the pictures (the rest are decoded again).
VIEW_BUDGET = 64 << 20
_IN_FLIGHT = 8

U8 = npt.NDArray[np.uint8]


class ViewCache:
    """Model views (``(H, W, 3)`` uint8) of images that are in some channel's top k, kept from
    the pass so the pictures need not decode them again; at most ``budget`` bytes."""

    def __init__(self, loaded: LoadedModel, budget: int = VIEW_BUDGET) -> None:
        self.loaded = loaded
        self.budget = budget
        self.views: dict[str, U8] = {}
        self.size = 0

    def offer(self, items: Iterable[tuple[str, Any]], wanted: set[str]) -> None:
        """Keep the views of these ``(path, model input)`` that are ``wanted``, while there
        is room; then forget views no longer wanted."""
        for path in [p for p in self.views if p not in wanted]:
            self.size -= self.views.pop(path).nbytes
        for path, tensor in items:
            if path in wanted and path not in self.views:
                nbytes = int(np.prod(tensor.shape[1:])) * 3
                if self.size + nbytes > self.budget:
                    continue
                view = model_view(tensor, self.loaded)
                self.views[path] = view
                self.size += view.nbytes


def model_view(tensor: Any, loaded: LoadedModel) -> U8:
    """What the model saw: one preprocessed input de-normalized to ``(H, W, 3)`` uint8 (a
    greyscale model's input as grey). The same arithmetic for views kept from the pass and
    views decoded again, so the pictures never depend on which it was."""
    import torch

    mean = torch.tensor(loaded.preprocess.mean, dtype=torch.float32).view(-1, 1, 1)
    std = torch.tensor(loaded.preprocess.std, dtype=torch.float32).view(-1, 1, 1)
    x = tensor.detach().to("cpu", torch.float32) * std + mean
    pixels = x.mul_(255).round_().clamp_(0, 255).to(torch.uint8)
    if pixels.shape[0] == 1:
        pixels = pixels.expand(3, -1, -1)
    view: U8 = pixels.permute(1, 2, 0).contiguous().numpy()
    return view


def layer_folder(order: int, key: str, width: int) -> str:
    """``top-images/<NN>_<layer>``: one folder per layer, in capture order."""

    return f"{FOLDER}/{order:0{width}d}_{safe_name(key)}"


def sheet_name(channel: int, channels: int) -> str:
    """``c0042.png``: zero-padded, so the files sort by channel."""
    return f"c{channel:0{max(4, len(str(channels - 1)))}d}.png"


def layer_files(plans: Sequence[LayerPlan], tops: Mapping[str, LayerTop]) -> dict[str, LayerFiles]:
    """Where each layer's pictures go, relative to the output folder (known before drawing)."""

    width = order_width(len(plans))
    files = {}
    for i, plan in enumerate(plans):
        if plan.key not in tops:
            continue
        folder = layer_folder(i, plan.key, width)
        channels = tops[plan.key].channels
        sheets = tuple(f"{folder}/{sheet_name(c, channels)}" for c in range(channels))
        files[plan.key] = LayerFiles(folder, f"{folder}/overview.png", sheets)
    return files


def draw_layers(
    out: Path,
    plans: Sequence[LayerPlan],
    tops: Mapping[str, LayerTop],
    loaded: LoadedModel,
    options: TopImagesOptions,
    *,
    categories: Sequence[str] | None,
    warn: Callable[[str], None],
    views: Mapping[str, U8] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> dict[str, LayerFiles]:
    """Draw and write every layer's contact sheets and overview.

    Args:
        out: The output folder.
        plans: The layers, in capture order.
        tops: Their final top-k.
        loaded: The model (its preprocessing makes the views).
        options: The run's options.
        categories: Class names, for the sheets' words on selectivity.
        warn: Called with a message for each image that cannot be read again.
        views: Model views kept from the pass (:class:`ViewCache`), by path.
        meanwhile: Called once every picture is on its way, while the last ones are being
            encoded and written (the caller writes the JSON and the report there).

    Returns:
        Capture key -> where its pictures went (relative to ``out``).
    """
    drawn = [plan for plan in plans if plan.key in tops]
    files = layer_files(plans, tops)
    unreadable: dict[str, str] = {}
    with ThreadPoolExecutor(2, thread_name_prefix="actviz-pictures") as pool, _cancelling(pool):
        pending: deque[Future[None]] = deque()
        for group in _groups(drawn, tops):
            while pending:  # the previous group's sheets hold its tiles: let them go first
                pending.popleft().result()
            tiles = _cut_tiles(pool, group, tops, loaded, options, views or {}, unreadable)
            for plan in group:
                pending.extend(
                    _submit_layer(
                        pool,
                        out,
                        files[plan.key],
                        plan,
                        tops[plan.key],
                        tiles.pop(plan.key),
                        options,
                        categories,
                        random=loaded.weights.random,
                    )
                )
        for path, why in sorted(unreadable.items()):
            warn(f"could not read {path} again for the pictures ({why}); its tiles are blank")
        if meanwhile is not None:
            meanwhile()
        while pending:
            pending.popleft().result()
    return files


@contextlib.contextmanager
def _cancelling(pool: ThreadPoolExecutor) -> Iterator[None]:
    """On Ctrl-C or an error, drop the pictures not yet started: leaving the pool would
    otherwise wait for every queued sheet (thousands for a wide layer)."""
    try:
        yield
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise


def _groups(plans: Sequence[LayerPlan], tops: Mapping[str, LayerTop]) -> list[list[LayerPlan]]:
    groups: list[list[LayerPlan]] = []
    size = 0
    for plan in plans:
        entries = int(tops[plan.key].valid.sum())
        if groups and size + entries <= ENTRY_BUDGET:
            groups[-1].append(plan)
            size += entries
        else:
            groups.append([plan])
            size = entries
    return groups


def _cut_tiles(
    pool: ThreadPoolExecutor,
    group: Sequence[LayerPlan],
    tops: Mapping[str, LayerTop],
    loaded: LoadedModel,
    options: TopImagesOptions,
    views: Mapping[str, U8],
    unreadable: dict[str, str],
) -> dict[str, np.ndarray]:
    """Every entry's tile for the layers of ``group``: ``(C, m, tile, tile, 3)`` per layer."""

    tile = options.tile
    wanted: dict[str, list[tuple[str, int, int]]] = {}
    tiles: dict[str, np.ndarray] = {}
    scales: dict[str, np.ndarray] = {}
    for plan in group:
        top = tops[plan.key]
        tiles[plan.key] = np.zeros((*top.valid.shape, tile, tile, 3), dtype=np.uint8)
        scales[plan.key] = heat_scales(top)
        for c, slot in zip(*np.nonzero(top.valid), strict=True):
            wanted.setdefault(str(top.paths[c, slot]), []).append((plan.key, int(c), int(slot)))
    plan_of = {plan.key: plan for plan in group}

    # The receptive fields are in the planned input's pixels; an image of another aspect
    # ratio (no crop in the preprocessing) was scored on maps pooled to the planned size.
    planned = (loaded.input_size[1], loaded.input_size[0])

    def cut(view: Image.Image, path: str) -> None:
        if view.size != planned:
            view = view.resize(planned, Image.Resampling.BILINEAR)
        # Entries that share a field and a window origin (channels peaking in the same cell,
        # or every cell of a layer that sees the whole image) share one crop and are blended
        # together.
        groups: dict[tuple[str, tuple[int, int, int, int], tuple[int, int]], list[Any]] = {}
        for key, c, slot in wanted[path]:
            top = tops[key]
            y, x = int(top.ys[c, slot]), int(top.xs[c, slot])
            origin = (int(top.origin[c, slot, 0]), int(top.origin[c, slot, 1]))
            box = plan_of[key].receptive.box(y, x)
            groups.setdefault((key, box, origin), []).append((c, slot, y, x))
        crops: dict[tuple[int, int, int, int], Any] = {}
        for (key, box, origin), entries in groups.items():
            if box not in crops:
                crops[box] = crop_view(view, box, tile)
            top = tops[key]
            channels = np.array([e[0] for e in entries])
            slots = np.array([e[1] for e in entries])
            tiles[key][channels, slots] = cut_tiles(
                crops[box],
                plan_of[key],
                box,
                origin,
                [(e[2], e[3]) for e in entries],
                top.heat[channels, slots],
                scales[key][channels],
                tile=tile,
                cmap=options.cmap,
            )

    pending: deque[Future[None]] = deque()

    def submit(view: Image.Image, path: str) -> None:
        pending.append(pool.submit(cut, view, path))
        while len(pending) > _IN_FLIGHT:
            pending.popleft().result()

    for path in sorted(p for p in wanted if p in views):
        submit(Image.fromarray(views[path]), path)
    missing = sorted(p for p in wanted if p not in views)
    decoded = decode_batches([Path(p) for p in missing], loaded.preprocess, batch_size=8)
    with contextlib.closing(decoded):
        for batch in decoded:
            for item in batch:
                path = missing[item.index]
                if item.tensor is None:
                    unreadable[path] = item.error or "unreadable"
                    continue
                submit(Image.fromarray(model_view(item.tensor, loaded)), path)
    while pending:
        pending.popleft().result()
    return tiles


def _submit_layer(
    pool: ThreadPoolExecutor,
    out: Path,
    files: LayerFiles,
    plan: LayerPlan,
    top: LayerTop,
    tiles: np.ndarray,
    options: TopImagesOptions,
    categories: Sequence[str] | None,
    *,
    random: bool,
) -> list[Future[None]]:
    """Compose and write one contact sheet per channel and the overview, in the pool."""

    notes = (RANDOM_NOTE,) if random else ()  # every picture of an untrained model says so

    scales = heat_scales(top)
    field_h, field_w = plan.receptive.size
    whole = " (the whole image)" if plan.receptive.whole_image else ""
    kind = "maximum" if options.score == "max" else "mean"
    slots = top.scores.shape[1]
    unit = "feature" if plan.layout == "features" else "channel"  # top-images --sae

    def write(rel: str, pixels: np.ndarray) -> None:
        output.write_bytes(
            out / rel, encode_png(pixels, level=options.png_compression, row_filter="up")
        )

    # The header every sheet of the layer shares, drawn once; the channel's own line under it.
    header = Header(
        title=f"{plan.key}   top {slots} images of {top.images}, by the {kind} of each map",
        info=(
            f"score: the {kind} of the {unit}'s {plan.height} x {plan.width} map; crops: the "
            f"receptive field of its maximum, {field_h} x {field_w} px{whole}; heat: 0 to the "
            f"{unit}'s highest value"
        ),
        labels=("0", "max"),
        nonfinite=False,
        notes=notes,
    )

    def sheet(c: int, status: tuple[str, ...]) -> None:
        count = int(top.valid[c].sum())
        items = [
            SheetTile(
                tiles[c, slot],
                f"#{slot + 1}  {score_text(float(top.scores[c, slot]))}",
                tile_name(str(top.paths[c, slot])),
            )
            for slot in range(count)
        ]
        subtitle = (f"{unit} {c}", f"heat 0 to {fmt_value(float(scales[c]))}", *status)
        write(
            files.sheets[c],
            contact_sheet(items, header, subtitle=subtitle, tile=options.tile, cmap=options.cmap),
        )

    judged = plan.judges_dead
    futures = [
        pool.submit(sheet, c, _status(top, c, categories, judged=judged))
        for c in range(top.channels)
    ]
    shown = top.channels if options.channels == 0 else min(options.channels, top.channels)

    def overview_header_for(rows: int, capped: bool) -> Header:
        more = (
            (
                f"{unit}s 0-{rows - 1} only: {shown} rows would make a picture too large "
                f"to open; every {unit} has its own sheet",
            )
            if capped
            else ()
        )
        return Header(
            title=f"{plan.key}   top {slots} images of {unit}s 0-{rows - 1} of {top.channels}",
            info=(
                f"each row a {unit}, best image first, by the {kind} of its map; crops: "
                f"receptive field of the maximum, {field_h} x {field_w} px{whole}; heat "
                "scaled per row"
            ),
            labels=("0", "row max"),
            nonfinite=False,
            notes=(*notes, *more),
        )

    # Measured with the note a capped overview carries, at its most digits: the header drawn
    # is never taller than the one measured.
    fits = max_overview_rows(overview_header_for(shown, True), tile=options.tile, k=slots)
    overview_header = overview_header_for(min(shown, fits), shown > fits)
    shown = min(shown, fits)
    rows = []
    for c in range(shown):
        health = channel_health(top, c, judged=judged)
        name = f"feature {c}" if unit == "feature" else f"ch {c}"
        labels = [name, "dead" if health["dead"] else f"on {health['active_frac']:.0%}"]
        labels.append(f"max {score_text(float(top.scores[c, 0]))}" if top.valid[c, 0] else "")
        rows.append(Row(tuple(labels), [tiles[c, s] for s in range(int(top.valid[c].sum()))]))

    def overview_picture() -> None:
        picture = overview(rows, overview_header, tile=options.tile, cmap=options.cmap, k=slots)
        assert files.overview is not None
        write(files.overview, picture)

    futures.append(pool.submit(overview_picture))
    return futures


def _status(
    top: LayerTop, channel: int, categories: Sequence[str] | None, *, judged: bool = True
) -> tuple[str, ...]:
    """A channel's health in a few phrases, for its sheet."""
    health = channel_health(top, channel, judged=judged)
    if health["dead"]:
        words = [f"DEAD: never above zero in {top.images} images"]
    elif not judged:  # a signed score (a logit): above zero is no sign of life
        words = [f"above zero in {health['active_frac']:.0%} of images"]
    else:
        words = [f"active in {health['active_frac']:.0%} of images"]
    chosen = selectivity(top, channel, categories, judged=judged)
    if chosen is not None:
        name = chosen.label if chosen.label is not None else f"class {chosen.index}"
        words.append(f"{chosen.count} of {int(top.valid[channel].sum())} predicted {name}")
    return tuple(words)
