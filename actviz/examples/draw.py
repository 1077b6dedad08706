"""After the pass over the folder: re-read the images the top-k chose, and draw the pictures.

The streamed pass keeps no pixels (its candidates stay small enough for remote workers), so
the crops are cut here: every image that is among some channel's top ``k`` is decoded and
preprocessed once more, exactly as for the model, and de-normalized into the view the model
had; each of its entries becomes a tile. Tiles are cut in worker threads (Pillow and numpy
release the GIL) while the next images decode. Memory is bounded by the number of entries,
not of images: layers are drawn in groups of at most :data:`ENTRY_BUDGET` entries (one
decoding pass per group; a single layer of 512 channels and k = 9 is one group).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actviz.examples.document import LayerFiles, channel_health, selectivity
from actviz.examples.plan import LayerPlan
from actviz.examples.sheets import (
    Row,
    SheetTile,
    contact_sheet,
    crop_view,
    cut_tiles,
    encode_png,
    heat_scales,
    overview,
    score_text,
)
from actviz.examples.topk import LayerTop
from actviz.render.legend import Header, fmt_value

if TYPE_CHECKING:
    from actviz.examples.options import ExamplesOptions
    from actviz.models import LoadedModel

__all__ = ["ENTRY_BUDGET", "FOLDER", "draw_layers", "layer_folder"]

FOLDER = "top-images"
#: Tiles held in memory at most before they are drawn into sheets (about 110 MB at 96 px).
ENTRY_BUDGET = 4608
_IN_FLIGHT = 8


def layer_folder(order: int, key: str, width: int) -> str:
    """``top-images/<NN>_<layer>``: one folder per layer, in capture order."""
    from actviz.output import safe_name

    return f"{FOLDER}/{order:0{width}d}_{safe_name(key)}"


def sheet_name(channel: int, channels: int) -> str:
    """``c0042.png``: zero-padded, so the files sort by channel."""
    return f"c{channel:0{max(4, len(str(channels - 1)))}d}.png"


def draw_layers(
    out: Path,
    plans: Sequence[LayerPlan],
    tops: Mapping[str, LayerTop],
    loaded: LoadedModel,
    options: ExamplesOptions,
    *,
    categories: Sequence[str] | None,
    warn: Callable[[str], None],
) -> dict[str, LayerFiles]:
    """Draw and write every layer's contact sheets and overview.

    Returns:
        Capture key -> where its pictures went (relative to ``out``).
    """
    width = max(2, len(str(len(plans) - 1)))
    folders = {plan.key: layer_folder(i, plan.key, width) for i, plan in enumerate(plans)}
    files: dict[str, LayerFiles] = {}
    unreadable: dict[str, str] = {}
    for group in _groups([p for p in plans if p.key in tops], tops):
        tiles = _cut_tiles(group, tops, loaded, options, unreadable)
        for plan in group:
            files[plan.key] = _write_layer(
                out,
                folders[plan.key],
                plan,
                tops[plan.key],
                tiles.pop(plan.key),
                options,
                categories,
            )
    for path, why in sorted(unreadable.items()):
        warn(f"could not read {path} again for the pictures ({why}); its tiles are blank")
    return files


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
    group: Sequence[LayerPlan],
    tops: Mapping[str, LayerTop],
    loaded: LoadedModel,
    options: ExamplesOptions,
    unreadable: dict[str, str],
) -> dict[str, np.ndarray]:
    """Every entry's tile for the layers of ``group``: ``(C, m, tile, tile, 3)`` per layer."""
    from actviz.pipeline import decode_batches

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
    paths = sorted(wanted)
    plan_of = {plan.key: plan for plan in group}

    def cut(view: Any, path: str) -> None:
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

    decoded = decode_batches([Path(p) for p in paths], loaded.preprocess, batch_size=8)
    pending: deque[Future[None]] = deque()
    with (
        ThreadPoolExecutor(2, thread_name_prefix="actviz-tiles") as pool,
        contextlib.closing(decoded),
    ):
        for batch in decoded:
            for item in batch:
                path = paths[item.index]
                if item.tensor is None:
                    unreadable[path] = item.error or "unreadable"
                    continue
                pending.append(pool.submit(cut, _view(item.tensor, loaded), path))
                while len(pending) > _IN_FLIGHT:
                    pending.popleft().result()
        while pending:
            pending.popleft().result()
    return tiles


def _view(tensor: Any, loaded: LoadedModel) -> Any:
    """What the model saw, de-normalized; a greyscale model's input as grey."""
    from actviz.render.overlay import input_view

    x = tensor.numpy()
    mean, std = list(loaded.preprocess.mean), list(loaded.preprocess.std)
    if x.shape[0] == 1:
        x = x.repeat(3, axis=0)
        mean, std = mean * 3, std * 3
    return input_view(x, mean, std)


def _write_layer(
    out: Path,
    folder: str,
    plan: LayerPlan,
    top: LayerTop,
    tiles: np.ndarray,
    options: ExamplesOptions,
    categories: Sequence[str] | None,
) -> LayerFiles:
    """One contact sheet per channel and the overview, composed and written in threads."""
    from actviz import output

    scales = heat_scales(top)
    field_h, field_w = plan.receptive.size
    whole = " (the whole image)" if plan.receptive.whole_image else ""
    kind = "maximum" if options.score == "max" else "mean"
    slots = top.scores.shape[1]
    # What every sheet of the layer says, drawn once and then found in the text cache.
    info = (
        f"score: the {kind} of the channel's {plan.height} x {plan.width} map; crops: the "
        f"receptive field of its maximum, {field_h} x {field_w} px{whole}; heat: 0 to the "
        "channel's highest value"
    )

    def write(rel: str, pixels: np.ndarray) -> None:
        output.write_bytes(out / rel, encode_png(pixels, options.png_compression))

    # The header every sheet of the layer shares, drawn once; the channel's own line under it.
    header = Header(
        title=f"{plan.key}   top {slots} images of {top.images}, by the {kind} of each map",
        info=info,
        labels=("0", "max"),
        nonfinite=False,
    )

    def sheet(c: int, rel: str, status: tuple[str, ...]) -> None:
        count = int(top.valid[c].sum())
        items = [
            SheetTile(
                tiles[c, slot],
                f"#{slot + 1}  {score_text(float(top.scores[c, slot]))}",
                Path(str(top.paths[c, slot])).name,
            )
            for slot in range(count)
        ]
        subtitle = (f"channel {c}", f"heat 0 to {fmt_value(float(scales[c]))}", *status)
        picture = contact_sheet(
            items, header, subtitle=subtitle, tile=options.tile, cmap=options.cmap
        )
        write(rel, picture)

    sheets = []
    with ThreadPoolExecutor(2, thread_name_prefix="actviz-sheets") as pool:
        futures: deque[Future[None]] = deque()
        for c in range(top.channels):
            rel = f"{folder}/{sheet_name(c, top.channels)}"
            futures.append(pool.submit(sheet, c, rel, _status(top, c, categories)))
            sheets.append(rel)
            while len(futures) > _IN_FLIGHT:
                futures.popleft().result()
        shown = top.channels if options.channels == 0 else min(options.channels, top.channels)
        rows = []
        for c in range(shown):
            health = channel_health(top, c)
            labels = [f"ch {c}", "dead" if health["dead"] else f"on {health['active_frac']:.0%}"]
            labels.append(f"max {score_text(float(top.scores[c, 0]))}" if top.valid[c, 0] else "")
            rows.append(Row(tuple(labels), [tiles[c, s] for s in range(int(top.valid[c].sum()))]))
        header = Header(
            title=f"{plan.key}   top {slots} images of channels 0-{shown - 1} of {top.channels}",
            info=(
                f"each row a channel, best image first, by the {kind} of its map; crops: "
                f"receptive field of the maximum, {field_h} x {field_w} px{whole}; heat scaled "
                "per row"
            ),
            labels=("0", "row max"),
            nonfinite=False,
        )
        rel_overview = f"{folder}/overview.png"
        picture = overview(rows, header, tile=options.tile, cmap=options.cmap, k=slots)
        futures.append(pool.submit(write, rel_overview, picture))
        while futures:
            futures.popleft().result()
    return LayerFiles(folder=folder, overview=rel_overview, sheets=tuple(sheets))


def _status(top: LayerTop, channel: int, categories: Sequence[str] | None) -> tuple[str, ...]:
    """A channel's health in a few phrases, for its sheet."""
    health = channel_health(top, channel)
    if health["dead"]:
        words = [f"DEAD: never above zero in {top.images} images"]
    else:
        words = [f"active in {health['active_frac']:.0%} of images"]
    chosen = selectivity(top, channel, categories)
    if chosen is not None:
        name = chosen.label if chosen.label is not None else f"class {chosen.index}"
        words.append(f"{chosen.count} of {int(top.valid[channel].sum())} predicted {name}")
    return tuple(words)
