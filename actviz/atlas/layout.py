"""After the forward part: the points in model A's space (model B's mapped onto it), their
2-D layout, the cells, each cell's supported class and the points' colours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import numpy.typing as npt

from actviz.atlas.cells import Cells, bin_points, normalize_layout
from actviz.atlas.colours import Coloured, PointFacts, choose, colour_points, folder_class
from actviz.atlas.options import PCA_DIMS, AtlasOptions
from actviz.atlas.readout import Readout
from actviz.atlas.reduce import Pca, RidgeMap, check_enough, fit_pca, reducer, ridge_map
from actviz.atlas.stream import Side

__all__ = ["Laid", "lay_out"]

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Laid:
    """Every point placed, and the cells.

    Attributes:
        vectors: ``(N, C)`` the points in model A's space: A's rows, then B's mapped ones.
        image: ``(N,)`` each point's image.
        side: ``(N,)`` 0 for A, 1 for B.
        position: ``(N,)`` each point's flat map position (-1: pooled).
        pca: The PCA of ``vectors``.
        raw: ``(N, 2)`` the reducer's layout.
        xy: ``(N, 2)`` it scaled to the unit square.
        cells: The grid.
        classes: Each kept cell's supported class, or None without a readout.
        coloured: The points' colours.
        ridge: B mapped onto A (None with one model).
        reduce: What the reducer did, in words.
        images: How many images have points.
    """

    vectors: F32
    image: npt.NDArray[np.int32]
    side: npt.NDArray[np.int8]
    position: npt.NDArray[np.int32]
    pca: Pca
    raw: F32
    xy: F32
    cells: Cells
    classes: npt.NDArray[np.int64] | None
    coloured: Coloured
    ridge: RidgeMap | None
    reduce: str
    images: int


def lay_out(
    sides: list[Side],
    opts: AtlasOptions,
    readout: Readout,
    rels: Sequence[PurePosixPath],
    warn: Callable[[str], None],
) -> Laid:
    """Place every point and bin the layout.

    Raises:
        UsageError: When too few points are left (images failed) for the layout.
    """
    a = sides[0]
    vectors_a, position, image = a.store.kept()
    vectors, side, ridge = vectors_a, np.zeros(len(image), np.int8), None
    if len(sides) > 1:
        vectors_b, _, image_b = sides[1].store.kept()
        assert np.array_equal(image, image_b)  # filled by the same batches
        if len(image):
            ridge = ridge_map(vectors_b, vectors_a, opts.ridge, a.loaded.device)
            if len(image) <= vectors_b.shape[1]:
                warn(
                    f"{len(image)} points and {vectors_b.shape[1]} channels of model B: the "
                    "ridge map can fit B's points onto A's whatever changed (R\u00b2 "
                    f"{ridge.r2:.3f}), so the map shows little of what moved; give more images "
                    "than B's layer has channels, or more points per image (--points spatial:K)"
                )
            vectors = np.concatenate([vectors_a, ridge.mapped])
            side = np.concatenate([side, np.ones(len(image), np.int8)])
            position = np.concatenate([position, position])
            image = np.concatenate([image, image])
    images = len(np.unique(image))
    check_enough(len(image), opts, f"the {images} image(s) read")
    device = a.loaded.device
    pca = fit_pca(vectors, PCA_DIMS, device)
    row = reducer(opts.reduce)
    raw = row.layout(pca.coords, opts)
    xy = normalize_layout(raw)
    cells = bin_points(
        xy,
        vectors,
        grid=opts.grid,
        min_count=opts.min_count,
        nearest=opts.nearest,
        device=device,
    )
    if not len(cells.kept):
        warn(
            f"no cell of the {opts.grid} x {opts.grid} grid holds {opts.min_count} points: "
            f"lower --grid or --min-count (the scatter and the table still hold every point)"
        )
    facts = PointFacts(
        image=image,
        side=side,
        classes=[folder_class(rel) for rel in rels],
        predictions=[s.predictions for s in sides],
        categories=a.loaded.categories,
        vectors=vectors,
        classifier=a.loaded.classifier,
    )
    coloured = colour_points(choose(opts.colour, facts), facts)
    return Laid(
        vectors=vectors,
        image=image,
        side=side,
        position=position,
        pca=pca,
        raw=raw,
        xy=xy,
        cells=cells,
        classes=readout.classes(cells.means),
        coloured=coloured,
        ridge=ridge,
        reduce=row.words(opts),
        images=images,
    )


def members(laid: Laid, cell: int) -> npt.NDArray[np.int64]:
    """The points of one cell."""
    return np.flatnonzero(laid.cells.cell == cell)


def cell_members(cells: Cells) -> dict[int, npt.NDArray[np.int64]]:
    """Every kept cell's points, in one pass."""
    order = np.argsort(cells.cell, kind="stable")
    ordered = cells.cell[order]
    result: dict[int, Any] = {}
    for cell in cells.kept:
        start, end = np.searchsorted(ordered, [cell, cell + 1])
        result[int(cell)] = order[start:end]
    return result
