"""``actviz sae``: a sparse dictionary (TopK sparse autoencoder) of one layer over a folder.

Torch is imported inside the command, never here, so ``actviz --help`` stays instant.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.text import Text

from actviz.cli.boundary import app, boundary, state, stopping
from actviz.cli.console import Bar, err_console, out_console, progress_bar
from actviz.cli.finish import finish
from actviz.cli.groups import ExecutionFlags, Group, LoadFlags, OptionsFlags, grouped
from actviz.cli.options import (
    FreshOutOption,
    InputsArg,
    JsonOption,
    LayersOption,
    ModelArg,
    QuietOption,
    fresh_out,
)

if TYPE_CHECKING:
    from actviz.sae import SaeResult

__all__ = ["sae"]

_PANEL = "Dictionary"


P = _PANEL
FeaturesOption = Annotated[
    int | None,
    typer.Option(
        "--features",
        help="Number of features \\[default: --expansion times the layer's channels].",
        show_default=False,
        rich_help_panel=P,
    ),
]
ExpansionOption = Annotated[
    int | None,
    typer.Option(
        "--expansion",
        min=1,
        help="Features per channel \\[default: 8, or 4, 2, 1 when an epoch gives fewer than "
        "16 training vectors per feature].",
        show_default=False,
        rich_help_panel=P,
    ),
]
KOption = Annotated[
    int | None,
    typer.Option(
        "--k",
        "-k",
        min=1,
        help="Features active per vector \\[default: the layer's channels / 8, 1 to 32]; "
        "above a quarter of the channels the code cannot be sparse, and that is said.",
        show_default=False,
        rich_help_panel=P,
    ),
]
KindOption = Annotated[
    Literal["topk", "batchtopk"],
    typer.Option(
        "--kind",
        help="topk: k per vector; batchtopk: k per vector on average over a training batch.",
        rich_help_panel=P,
    ),
]
EpochsOption = Annotated[
    int, typer.Option("--epochs", min=1, help="Passes over the training images.", rich_help_panel=P)
]
TokensOption = Annotated[
    int | None,
    typer.Option(
        "--tokens",
        min=1,
        help="A budget of training vectors instead of --epochs.",
        show_default=False,
        rich_help_panel=P,
    ),
]
LrOption = Annotated[
    float | None,
    typer.Option(
        "--lr",
        help="Adam's learning rate \\[default: 2e-4 * sqrt(16384 / features), at most 1e-3].",
        show_default=False,
        rich_help_panel=P,
    ),
]
SeedOption = Annotated[
    int,
    typer.Option(
        "--seed", help="Seed of the first dictionary, the split and the order.", rich_help_panel=P
    ),
]
SeedsOption = Annotated[
    int,
    typer.Option(
        "--seeds",
        min=1,
        max=8,
        help="Dictionaries trained together (seed, seed+1, ...); 2 or more score each "
        "feature's stability.",
        rich_help_panel=P,
    ),
]
HeldOutOption = Annotated[
    float,
    typer.Option(
        "--held-out",
        help="Share of the images kept out of training, for the quality figures.",
        rich_help_panel=P,
    ),
]
PrefixOption = Annotated[
    bool,
    typer.Option(
        "--prefix-tokens",
        help="Also train on a ViT's class and register tokens (left out by default).",
        rich_help_panel=P,
    ),
]
SaeBatchOption = Annotated[
    int | None,
    typer.Option(
        "--sae-batch",
        min=8,
        help="Vectors per training step \\[default: 1024, fewer on a small folder so that an "
        "epoch gives at least 16 steps, not below 64].",
        show_default=False,
        rich_help_panel=P,
    ),
]
MinStepsOption = Annotated[
    int,
    typer.Option(
        "--min-steps",
        min=0,
        help="Optimizer steps at least: a small folder gets more passes over its vectors "
        "(kept from the first epoch when they fit). Not with --tokens; 0: exactly --epochs.",
        rich_help_panel=P,
    ),
]
BufferOption = Annotated[
    int,
    typer.Option(
        "--buffer", min=16, help="Vectors the shuffle buffer holds at most.", rich_help_panel=P
    ),
]
TopOption = Annotated[
    int,
    typer.Option(
        "--top", min=1, max=100, help="Top images per feature on its page.", rich_help_panel=P
    ),
]
NoPagesOption = Annotated[
    bool,
    typer.Option(
        "--no-pages",
        help="Skip the feature pages (the pass that ranks images per feature).",
        rich_help_panel=P,
    ),
]


@dataclass(frozen=True)
class SaeFlags(OptionsFlags):
    """``sae``'s own options: the fields of :class:`actviz.sae.SaeOptions`."""

    layers: LayersOption = None
    features: FeaturesOption = None
    expansion: ExpansionOption = None
    k: KOption = None
    kind: KindOption = "topk"
    epochs: EpochsOption = 4
    tokens: TokensOption = None
    lr: LrOption = None
    seed: SeedOption = 0
    seeds: SeedsOption = 1
    held_out: HeldOutOption = 0.1
    prefix_tokens: PrefixOption = False
    sae_batch: SaeBatchOption = None
    min_steps: MinStepsOption = 1000
    buffer: BufferOption = 65536
    top: TopOption = 9
    no_pages: NoPagesOption = False
    out: FreshOutOption = None


#: What ``sae`` takes of the execution options: no engine, no AMP (a dictionary trains in
#: float32 in this process).
SaeExecution = Annotated[
    ExecutionFlags, Group(without=("engine", "ray_address", "amp", "channels_last"))
]


class _Bar(Bar):
    """Images over all epochs as one bar, with the running fraction of variance explained."""

    def start(self, total: int) -> None:
        self.total = total
        state["progress"] = (
            "; a usable sae.safetensors is kept: run the same command with --resume to go on"
        )
        self._said = time.monotonic()
        if not self.quiet and err_console.is_terminal and total > 1:
            self._progress, self._task = progress_bar("image passes", total)

    def advance(self, result: Any = None) -> None:
        self.done += 1
        fve = getattr(result, "fve", None)
        shown = f"FVE {fve:.3f}" if fve is not None else ""
        if self._progress is not None:
            self._progress.advance(self._task)
            self._progress.update(self._task, rate=shown)
        elif not self.quiet and time.monotonic() - self._said > 30 and self.done < self.total:
            self._said = time.monotonic()
            err_console.print(
                f"sae: {self.done} of {self.total} image passes (every epoch's images), {shown}",
                markup=False,
            )


@app.command("sae")
@boundary
@grouped
def sae(
    model: ModelArg,
    inputs: InputsArg,
    *,
    own: SaeFlags,
    load: LoadFlags,
    execution: SaeExecution,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Train a sparse dictionary (TopK sparse autoencoder) on one layer's activation vectors.

    One vector per spatial position of a map, per patch token of a ViT (class and register
    tokens left out), per image of a vector; streamed from the forward passes through a
    bounded shuffle buffer, each epoch running the images again (nothing is recorded to
    disk). Writes OUT/sae.safetensors (actviz.load_dictionary reads it; run --sae and top-images
    --sae use it), OUT/sae.json (quality on the held-out images) and a page per feature with
    its index OUT/sae.html. Ctrl-C keeps a usable dictionary; --resume goes on.
    """
    from actviz.sae import SaeOptions
    from actviz.sae import sae as train_sae

    options = own.build(
        SaeOptions,
        out=fresh_out(own.out, reuse=execution.resume or execution.overwrite),
        load=load,
        execution=execution,
    )
    with stopping(_Bar(quiet)) as bar:
        result = train_sae(model, inputs, options, reporter=bar)
    finish(
        result.document,
        lambda: _print_result(result),
        lambda: _summary(result),
        as_json=as_json,
        quiet=quiet,
        failed=len(result.failed),
        none_done=False,  # no image at all gave a vector: an error before this
        verb="trained on",
    )


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _print_result(result: SaeResult) -> None:
    """The dictionary, where it is, and its quality in plain words."""
    q = result.quality
    note = " (random weights: meaningless features)" if result.weights.random else ""
    training = result.document.get("training") or {}
    asked = training.get("epochs_asked", result.epochs)
    passes = (
        f"{result.epochs} epoch(s)"
        if result.epochs <= asked
        else f"{result.epochs} passes ({asked} epoch(s) asked, more to reach --min-steps "
        f"{training.get('min_steps')})"
    )
    chosen = " (the default for this width)" if result.k_from != "given" else ""
    out_console.print(
        f"{result.layer}: {result.features} features over {result.channels} channels, k "
        f"{result.k}{chosen}; {passes}, {result.steps:,} steps of "
        f"{training.get('sae_batch')} vectors, {result.tokens:,} vectors from "
        f"{result.images} images on {result.device}: "
        f"{result.file}{note}",
        markup=False,
    )
    fve = q.get("fve")
    where = (
        f"{result.held_out} held-out image{'' if result.held_out == 1 else 's'}"
        if result.held_out
        else "the training images"
    )
    changed = q.get("top1_changed_share")
    out_console.print(
        f"  on {where}: variance explained {_share(fve)}, L0 {q.get('l0')}, dead "
        f"{_share(q.get('dead_share'))}, dense {_share(q.get('dense_share'))}, top-1 changed "
        + (
            f"on {changed:.1%} of images with the layer replaced by its reconstruction"
            if changed is not None
            else "n/a (not a classifier)"
        ),
        markup=False,
    )
    if result.stability:
        mean = result.document.get("stability") or {}
        out_console.print(
            f"  stability over {result.seeds} seeds: matched cosine "
            + ", ".join(f"{m:.3f}" for m in result.stability)
            + f"; {_share(mean.get('stable_share'))} of features stable (cosine above 0.7)",
            markup=False,
        )
    if result.index is not None:
        out_console.print(f"  feature pages: {result.index}", markup=False)


def _summary(result: SaeResult) -> None:
    """The time, and the images that could not be read (each named as it happened)."""
    err_console.print(
        Text.assemble(("sae ", "bold"), f"{result.seconds:.1f} s; {len(result.failed)} failed")
    )
