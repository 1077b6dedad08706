"""``actviz attribute``: which input pixels the model's class score rests on, per image, as
named steps.

open -> load (refusing what cannot be attributed) -> the baseline image -> the ledger -> per
batch: the targets, every method's attributions, one picture per image and method (and the
tensors), one ledger line per image -> ``attribute.json`` and ``attribute.html``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.attribute.batch import attribute_batch
from actviz.attribute.options import GROUPS, AttributeOptions
from actviz.attribute.result import LEDGER, AttributeResult, AttributeState
from actviz.attribute.write import write_outputs
from actviz.command import open_command
from actviz.command.ledger import ImageLedger
from actviz.command.opening import CommandSpec, require_classifier
from actviz.command.options import from_flat
from actviz.command.progress import Reporter
from actviz.command.records import image_progress, ledger_pass
from actviz.errors import UsageError
from actviz.gradients.attribution import BASELINES, baseline_image
from actviz.gradients.registry import MAP_METHODS
from actviz.results import ImageResult

if TYPE_CHECKING:
    from torch import nn

    from actviz.models import LoadedModel

__all__ = ["attribute"]

_SHOWS = "The attributions show"
_NOT_EMPTY = "add --resume to go on with it, --overwrite to start again, or choose another --out"
#: Classification families whose inputs are images (a video classifier takes clips).
_IMAGE_FAMILIES = ("classification", "quantized")
SPEC = CommandSpec("attribute", hint=_NOT_EMPTY, forced={"amp": False})


def attribute(
    model: str | nn.Module,
    inputs: Sequence[Path | str] | Path | str,
    options: AttributeOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> AttributeResult:
    """Attribute a classifier's class score to its input pixels, per image: Integrated
    Gradients, SmoothGrad, gradient x input, LRP or attention rollout, each drawn over what
    the model saw, with its axiom checked and recorded.

    Args:
        model: A model name, ``file.py:factory``, or an ``nn.Module``, as :func:`actviz.run`.
        inputs: Image files and/or folders.
        options: :class:`~actviz.attribute.options.AttributeOptions`; or flat keywords
            (``method="ig"``, ``steps=64``, ``target="tabby"``, ``batch_size=16``, ...).
        reporter: Receives warnings and progress.

    Returns:
        The result: every image's record, the axioms' summary, the files written.

    Raises:
        ActvizError: For every expected failure; TypeError for an unknown keyword.
    """

    opts = from_flat(
        AttributeOptions,
        GROUPS,
        keywords,
        caller="attribute",
        given=options,
        aliases={"method": "methods"},
    )
    ex = opts.execution
    with open_command(model, opts.out, SPEC, ex, reporter=reporter, inputs=inputs) as cmd:
        assert cmd.found is not None
        opened = cmd.load(opts.load, shows=_SHOWS, check=lambda loaded: _check(loaded, opts))
        loaded = opened.model
        images = cmd.found.images
        state = AttributeState(
            opts=opts,
            loaded=loaded,
            rels={str(item.path): item.rel.as_posix() for item in images},
            folders=_folders([item.rel for item in images]),
            random=bool(loaded.weights.random),
            baseline=_baseline(loaded, opts),
        )
        settings = _settings(cmd.model, loaded, opts)
        ledger = ImageLedger(opts.out, LEDGER, command="attribute", settings=settings)
        score = functools.partial(attribute_batch, state)
        records, reused = ledger_pass(cmd, loaded, ledger, state.rels, _progress, score)

        return write_outputs(cmd, opened, state, records, settings, reused=reused)


def _check(loaded: LoadedModel, opts: AttributeOptions) -> None:
    """Refuse a model whose class score cannot be attributed to its input pixels."""
    family = loaded.family
    if family.key not in _IMAGE_FAMILIES:
        raise UsageError(
            f"attribute explains image classifiers; {loaded.name} is "
            f"{'an' if family.label[0] in 'aeiou' else 'a'} {family.label} model"
        )
    require_classifier(loaded, "there is no class score to attribute")
    reading = [m for m in opts.methods if MAP_METHODS[m].gradient]
    if family.gradients is not None and reading:
        raise UsageError(f"--method {reading[0]} needs gradients: {family.gradients}")


def _folders(rels: Sequence[PurePosixPath]) -> dict[str, str]:
    """Each image's folder in the output (its relative path without extension, made safe)."""
    return {
        rel.as_posix(): folder.as_posix()
        for rel, folder in zip(rels, output.image_dirs(rels), strict=True)
    }


def _baseline(loaded: LoadedModel, opts: AttributeOptions) -> Any:
    """The baseline image of ``--baseline FILE``, decoded once (None for a named baseline or
    when no method reads a baseline)."""

    reads = any("baseline" in MAP_METHODS[m].settings for m in opts.methods)
    if not reads or opts.settings.baseline in BASELINES:
        return None
    return baseline_image(opts.settings.baseline, loaded.preprocess)


def _settings(model: str, loaded: LoadedModel, opts: AttributeOptions) -> dict[str, Any]:
    """What a resumed run must share with the earlier one."""
    return {
        "model": model,
        "weights": loaded.weights.name or loaded.weights.source,
        "methods": list(opts.methods),
        "target": opts.target,
        "settings": {m: opts.settings.describe(MAP_METHODS[m].settings) for m in opts.methods},
        "input_size": list(loaded.input_size) if loaded.input_size else None,
    }


def _progress(record: Mapping[str, Any]) -> ImageResult:
    return image_progress(record, PurePosixPath(record.get("folder") or "."))
