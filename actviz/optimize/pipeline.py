"""``optimize``: load -> select -> for each layer, batches of channels optimized -> pictures,
``optimize.json`` and the report page.

Each batch's images are written as soon as it finishes, and ``optimize.json`` after each batch
and when the run stops early, so Ctrl-C keeps every finished channel readable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.cards import optimize_card, side_by_side
from actviz.command import json_head, model_fields, open_command
from actviz.command.opening import CommandSpec
from actviz.command.progress import Reporter
from actviz.errors import OutputError
from actviz.optimize.loop import optimize_batch
from actviz.optimize.options import OptimizeOptions
from actviz.optimize.sheet import layer_sheet
from actviz.optimize.targets import plan_targets
from actviz.output import layer_filename
from actviz.report import build_optimize_report, build_top_images_report

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command
    from actviz.models import LoadedModel, WeightsInfo
    from actviz.optimize.loop import BatchResult
    from actviz.optimize.targets import Targets

__all__ = [
    "FOLDER",
    "JSON_FILE",
    "REPORT_FILE",
    "RANDOM_NOTE",
    "ChannelImage",
    "LayerImages",
    "OptimizeResult",
    "StepReporter",
    "optimize",
]

SPEC = CommandSpec("optimize")

JSON_FILE = "optimize.json"
REPORT_FILE = "optimize.html"
FOLDER = "optimize"
#: Said in the JSON, the sheets and the page when the weights are random.
RANDOM_NOTE = (
    "RANDOM WEIGHTS: an optimized image of an untrained network is noise with structure, "
    "not a feature"
)
#: What each objective maximizes, in words, and the unit its channels are named by.
WORDS = {
    "channel": ("channel mean", "channel"),
    "neuron": ("centre unit", "channel"),
    "logit": ("class logit", "class"),
    "output": ("output dimension", "dimension"),
}


#: What ``optimize`` reports progress to: the kit's one protocol, one ``advance()`` per step.
StepReporter = Reporter


@dataclass(frozen=True)
class ChannelImage:
    """One optimized channel: its image and how its objective grew.

    Attributes:
        channel: The channel (or class) number.
        png: The image's path relative to the output folder.
        final: The objective of the final image, untransformed.
        curve: The objective at each step (on the transformed image the step saw).
    """

    channel: int
    png: str
    final: float
    curve: list[float]


@dataclass
class LayerImages:
    """One layer's optimized channels.

    Attributes:
        key: The layer's name (``logits`` for a classifier's output, ``output`` for the
            output of a model that gives features).
        index: Its position in the run (the ``NN`` of its file names).
        sheet: The sheet's path relative to the output folder, once written.
        output_shape: The layer's output shape for one batch.
        channels: The finished channels.
    """

    key: str
    index: int
    module: str | None = None
    """The module's qualified name; None for the model's output."""
    unit: str = "channel"
    """What its channels are called: ``channel``, ``class`` or ``dimension``."""
    sheet: str | None = None
    output_shape: tuple[int, ...] = ()
    channels: list[ChannelImage] = field(default_factory=list)
    pixels: list[Any] = field(default_factory=list, repr=False)
    """The images, ``(size, size, 3)`` uint8, for the sheet."""

    def _repr_png_(self) -> bytes:
        """The first optimized images side by side (a cell shows them)."""

        return side_by_side(self.pixels)


@dataclass
class OptimizeResult:
    """What ``optimize`` wrote."""

    model: str
    weights: WeightsInfo
    device: str
    out: Path
    json: Path
    report: Path | None
    layers: list[LayerImages]
    steps: int
    size: int
    seconds: float
    warnings: list[str]
    complete: bool
    document: dict[str, Any]

    def __repr__(self) -> str:

        return optimize_card(self, pictures=False).text()

    def _repr_html_(self) -> str:

        return optimize_card(self).html()

    @property
    def channels(self) -> int:
        """How many channels were finished."""
        return sum(len(layer.channels) for layer in self.layers)


def optimize(
    model: str | nn.Module,
    options: OptimizeOptions | None = None,
    *,
    reporter: Reporter | None = None,
    **keywords: Any,
) -> OptimizeResult:
    """Optimize one image per selected channel (feature visualization), and draw them.

    Each image starts from a decorrelated Fourier parameterization and is optimized by Adam
    through Lucent's standard transforms; the channels of a layer are optimized together, one
    per image of a batch. Writes ``optimize.json`` (every channel's curve and final value),
    ``optimize/<NN>_<layer>.png`` (one sheet per layer), ``optimize/<NN>_<layer>/cNNNN.png``
    and the page ``optimize.html``.

    Args:
        model: A model name, ``package.module:factory`` / ``path/to/file.py:factory``, or an
            ``nn.Module`` (used with its own weights).
        options: The options (:class:`~actviz.optimize.options.OptimizeOptions`).
        reporter: Receives warnings and progress.
        **keywords: Instead of ``options``, any option by its flat name.

    Returns:
        What was written.

    Raises:
        ActvizError: For every expected failure.
        KeyboardInterrupt: After writing what was finished.
    """

    if options is not None and keywords:
        raise TypeError("pass either options or keywords, not both")
    opts = options or OptimizeOptions.from_keywords(**keywords)
    # Other commands' results may share the folder (pages link each other), so optimize
    # guards only its own files.
    with open_command(
        model, opts.out, SPEC, reporter=reporter, guard=lambda _: _prepare(opts)
    ) as cmd:
        opened = cmd.load(opts.load, shows="These images are noise with structure, optimized for")
        return _run(cmd, opened.model, opts, opened.warning)


def _run(
    cmd: Command, loaded: LoadedModel, opts: OptimizeOptions, warning: str | None
) -> OptimizeResult:
    """Every selected layer's channels optimized, batch by batch; the record and the page
    written after each batch and when the run stops early."""

    plan = plan_targets(cmd, loaded, opts)
    channels = opts.channel_list()
    layers = [
        LayerImages(key, i, module, WORDS[plan.objective][1])
        for i, (key, module) in enumerate(plan.modules.items())
    ]
    state: dict[str, Any] = {"complete": False}

    def document(complete: bool) -> dict[str, Any]:
        return _document(cmd, loaded, opts, layers, complete, plan.objective, warning)

    def finish() -> OptimizeResult:
        doc = document(state["complete"])
        output.write_json(opts.out / JSON_FILE, doc)
        report = None
        if opts.report:
            for rel, data in build_optimize_report(doc, opts.out).items():
                output.write_bytes(opts.out / rel, data)
            report = opts.out / REPORT_FILE
            _relink_top_images(opts.out)
        return OptimizeResult(
            model=cmd.model,
            weights=loaded.weights,
            device=str(loaded.device),
            out=opts.out,
            json=opts.out / JSON_FILE,
            report=report,
            layers=layers,
            steps=opts.steps,
            size=opts.size,
            seconds=cmd.seconds(),
            warnings=cmd.warnings,
            complete=state["complete"],
            document=doc,
        )

    batches = -(-len(channels) // opts.batch_size)
    cmd.notify.start(len(layers) * batches * opts.steps)

    def step() -> None:
        cmd.notify.advance(None)  # a step has no result of its own

    try:

        def record() -> None:
            # After each batch: what finished is readable even if the run stops hard.
            output.write_json(opts.out / JSON_FILE, document(False))

        for layer in layers:
            _optimize_layer(loaded, plan, layer, channels, opts, step, record)
            _write_sheet(layer, loaded, opts, plan.objective)
            record()
        state["complete"] = True
    except KeyboardInterrupt:
        # Keep what finished: its pictures are on disk; the record and the page say so.
        for layer in layers:
            if layer.channels and layer.sheet is None:
                _write_sheet(layer, loaded, opts, plan.objective)
        finish()
        raise
    return finish()


def _relink_top_images(out: Path) -> None:
    """The top-images pages of the same folder now link the optimized images."""

    try:
        doc = json.loads((out / "top-images.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for rel, data in build_top_images_report(doc, out).items():
        output.write_bytes(out / rel, data)


def _prepare(opts: OptimizeOptions) -> None:
    """The output folder may hold other commands' results (pages link each other), but not
    an earlier optimize unless ``overwrite``."""

    earlier = [p for p in (opts.out / JSON_FILE, opts.out / FOLDER) if p.exists()]
    if earlier and not opts.overwrite:
        raise OutputError(
            f"{opts.out} already holds the results of an optimize ({earlier[0].name}); add "
            "--overwrite to replace them, or choose another --out",
            usage=True,
        )
    output.prepare_out_dir(opts.out, overwrite=True)
    output.remove_written(opts.out, [JSON_FILE, REPORT_FILE], trees=[FOLDER])


def _optimize_layer(
    loaded: LoadedModel,
    plan: Targets,
    layer: LayerImages,
    channels: Sequence[int],
    opts: OptimizeOptions,
    on_step: Callable[[], None],
    on_batch: Callable[[], None],
) -> None:
    from actviz.render.png import encode_png

    for start in range(0, len(channels), opts.batch_size):
        chunk = list(channels[start : start + opts.batch_size])
        result: BatchResult = optimize_batch(
            loaded.module,
            layer.module,
            chunk,
            steps=opts.steps,
            size=opts.size,
            mean=loaded.preprocess.mean[:3] if loaded.preprocess.channels == 3 else [0.5] * 3,
            std=loaded.preprocess.std[:3] if loaded.preprocess.channels == 3 else [0.5] * 3,
            device=loaded.device,
            seed=opts.seed,
            neuron=opts.neuron,
            lr=opts.lr,
            ctx=plan.contexts.get(layer.module if layer.module is not None else ""),
            grey=loaded.preprocess.channels == 1,
            model_size=plan.model_size,
            on_step=on_step,
        )
        layer.output_shape = result.output_shape
        folder = _layer_folder(layer)
        for i, channel in enumerate(chunk):
            rel = f"{folder}/c{channel:04d}.png"
            output.write_bytes(opts.out / rel, encode_png(result.images[i], row_filter="up"))
            layer.pixels.append(result.images[i])
            layer.channels.append(
                ChannelImage(
                    channel=channel,
                    png=rel,
                    final=float(result.final[i]),
                    curve=[float(v) for v in result.curves[:, i]],
                )
            )
        on_batch()


def _layer_folder(layer: LayerImages) -> str:

    return f"{FOLDER}/{layer_filename(layer.index, layer.key)[: -len('.png')]}"


def _write_sheet(
    layer: LayerImages, loaded: LoadedModel, opts: OptimizeOptions, objective: str
) -> None:
    from actviz.render.png import encode_png

    rel = f"{_layer_folder(layer)}.png"
    pixels = layer_sheet(
        layer.key,
        layer.output_shape,
        [(c.channel, c.final) for c in layer.channels],
        layer.pixels,
        steps=opts.steps,
        objective=objective,
        random_weights=loaded.weights.random,
    )
    output.write_bytes(opts.out / rel, encode_png(pixels, row_filter="up"))
    layer.sheet = rel


def _document(
    cmd: Command,
    loaded: LoadedModel,
    opts: OptimizeOptions,
    layers: list[LayerImages],
    complete: bool,
    objective: str,
    warning: str | None,
) -> dict[str, Any]:
    """``optimize.json``: its head (without the tool's version or a date), the settings and
    every finished channel; ``warning``: the one given about random weights, if any."""

    weights, info = loaded.weights, loaded.record()
    model = model_fields(cmd.model, info, weights, warning)
    model["random_weights_note"] = RANDOM_NOTE if weights.random else None
    head = json_head(
        infos=[info], device=str(loaded.device), model=model, created=False, tool=False
    )
    return {
        "model": cmd.model,  # first, where optimize.json has always had it
        **head,
        "complete": complete,
        "settings": {
            "layers": opts.layers,
            "channels": opts.channels if opts.objective is None else None,
            "objective": objective,
            "maximizes": WORDS[objective][0],
            "classes": opts.objective if objective == "logit" else None,
            "dimensions": opts.objective if objective == "output" else None,
            "steps": opts.steps,
            "size": opts.size,
            "seed": opts.seed,
            "lr": opts.lr,
            "batch_size": opts.batch_size,
            "parameterization": "fourier, decorrelated colour, 1/f spectrum",
            "transforms": "pad 12, jitter 8, scale 0.9-1.1, rotate -10..10 deg, jitter 4",
        },
        "layers": [
            {
                "name": layer.key,
                "index": layer.index,
                "unit": layer.unit,
                "sheet": layer.sheet,
                "output_shape": list(layer.output_shape),
                "channels": [
                    {
                        "channel": c.channel,
                        "label": _label(loaded, layer, c.channel),
                        "png": c.png,
                        "final": c.final,
                        "initial": c.curve[0] if c.curve else None,
                        "curve": c.curve,
                    }
                    for c in layer.channels
                ],
            }
            for layer in layers
            if layer.channels
        ],
        "warnings": cmd.warnings,
        "report": REPORT_FILE if opts.report else None,
    }


def _label(loaded: LoadedModel, layer: LayerImages, channel: int) -> str | None:
    """A class logit's class name, when the weights name their classes."""
    names = loaded.categories
    if layer.unit != "class" or names is None or not 0 <= channel < len(names):
        return None
    return names[channel]
