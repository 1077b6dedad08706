"""Layer selectors: a selector string and a model's module names -> the modules to hook.

Pure on purpose: it works on plain names and class names, imports no torch, and is tested on
plain lists. The model's order is kept, so callers decide what "order" means (registration or
execution).

Syntax (terms separated by commas; several ``--layers`` options are joined the same way):

- ``all``                    every leaf module (a module without children)
- ``conv``, ``relu``, ...    a type alias (see ``TYPE_ALIASES``): modules of those classes or
                             their subclasses, containers too (``MultiheadAttention`` has an
                             ``out_proj`` child, and ``attn`` must still reach it)
- ``Conv2d``                 a class name: modules of that class or a subclass of it
- ``layer4.*``               a glob over qualified names (``fnmatch`` rules, case-sensitive)
- ``re:<regex>``             a regular expression searched in qualified names
- ``layer1.0.conv1``         an exact qualified name (containers too: ``layer4``)
- ``type:X`` / ``name:X``    force the meaning of X when a name and a type would clash
- ``!<term>``                exclude what the term matches; a selector of exclusions only starts
                             from ``all``

Every term must match some module, exclusions included: a typo is an error, never a silently
different selection.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from actviz.errors import LayerSelectionError

__all__ = [
    "MODULE_LISTING",
    "TYPE_ALIASES",
    "LayerRef",
    "named_exactly",
    "parse_selector",
    "select_layers",
]

#: Short names for families of layers. Values are class names, matched against each module's
#: class hierarchy so subclasses count (a user's ``MyConv(nn.Conv2d)`` is a ``conv``).
TYPE_ALIASES: dict[str, frozenset[str]] = {
    "conv": frozenset(
        {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"}
    ),
    "linear": frozenset({"Linear", "Bilinear", "LazyLinear", "NonDynamicallyQuantizableLinear"}),
    "relu": frozenset({"ReLU", "ReLU6"}),
    "act": frozenset(
        {
            "ReLU",
            "ReLU6",
            "LeakyReLU",
            "PReLU",
            "ELU",
            "SELU",
            "CELU",
            "GELU",
            "SiLU",
            "Mish",
            "Hardswish",
            "Hardsigmoid",
            "Sigmoid",
            "Tanh",
            "Softplus",
        }
    ),
    "bn": frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"}),
    "norm": frozenset(
        {
            "BatchNorm1d",
            "BatchNorm2d",
            "BatchNorm3d",
            "SyncBatchNorm",
            "LayerNorm",
            "LayerNorm2d",
            "GroupNorm",
            "InstanceNorm1d",
            "InstanceNorm2d",
            "InstanceNorm3d",
            "LocalResponseNorm",
            "RMSNorm",
        }
    ),
    "pool": frozenset(
        {
            "MaxPool1d",
            "MaxPool2d",
            "MaxPool3d",
            "AvgPool1d",
            "AvgPool2d",
            "AvgPool3d",
            "AdaptiveAvgPool1d",
            "AdaptiveAvgPool2d",
            "AdaptiveAvgPool3d",
            "AdaptiveMaxPool1d",
            "AdaptiveMaxPool2d",
            "AdaptiveMaxPool3d",
        }
    ),
    "attn": frozenset(
        {
            "MultiheadAttention",
            "ShiftedWindowAttention",
            "ShiftedWindowAttentionV2",
            "Attention2d",  # timm MaxViT's
            "AttentionCl",
        }
    ),
    "dropout": frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "StochasticDepth"}),
}

# What each alias stands for, in the message that says a model has none of it.
_ALIAS_NOUNS = {
    "conv": "a convolution",
    "linear": "a linear layer",
    "relu": "a ReLU",
    "act": "an activation",
    "bn": "a batch norm",
    "norm": "a normalization layer",
    "pool": "a pooling layer",
    "attn": "an attention layer",
    "dropout": "a dropout layer",
}
# Class names listed in that message before "...".
_ALIAS_SHOWN = 5

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class LayerRef:
    """What the selector needs to know about one module.

    Attributes:
        name: Qualified name, as in ``model.named_modules()``.
        types: Class names of the module's class hierarchy, most specific first.
        leaf: True when the module has no child modules.
    """

    name: str
    types: tuple[str, ...]
    leaf: bool

    @property
    def type_name(self) -> str:
        """The module's own class name."""
        return self.types[0] if self.types else ""


@dataclass(frozen=True)
class _Term:
    text: str
    exclude: bool


def parse_selector(selector: str | Sequence[str]) -> list[str]:
    """Split a selector (or several) into its terms, dropping blanks.

    Args:
        selector: ``"conv,!layer1.*"`` or ``["conv", "!layer1.*"]``.

    Returns:
        The stripped terms in order.

    Raises:
        LayerSelectionError: If there are no terms, or a term is malformed.
    """
    parts = [selector] if isinstance(selector, str) else list(selector)
    terms = [t.strip() for part in parts for t in part.split(",")]
    terms = [t for t in terms if t]
    if not terms:
        raise LayerSelectionError("the layer selector is empty; try --layers conv or --layers all")
    for term in terms:
        body = term[1:].strip() if term.startswith("!") else term
        if not body:
            raise LayerSelectionError(
                f"'{_printable(term)}' excludes nothing; write !<term>, e.g. !layer1.*"
            )
        if body.startswith("re:"):
            try:
                re.compile(body[3:])
            except re.error as exc:
                raise LayerSelectionError(
                    f"invalid regular expression in '{_printable(term)}': {exc}; "
                    "fix the regular expression"
                ) from None
    return terms


#: How a caller with a module object sees its layers (its class name names nothing to load).
MODULE_LISTING = "actviz.list_layers(model)"


def select_layers(
    layers: Sequence[LayerRef],
    selector: str | Sequence[str],
    *,
    model: str = "the model",
    listing: str | None = None,
) -> list[str]:
    """Resolve a selector against a model's modules.

    A term that matches nothing is an error, an exclusion as much as an inclusion, so a typo
    never silently changes the selection.

    Args:
        layers: The model's modules, in the order the result should keep.
        selector: Selector string(s); see the module docstring for the syntax.
        model: The model's name, used in error messages.
        listing: How the caller sees the model's layers, for error messages: default
            ``actviz list-layers MODEL``; ``actviz.list_layers(model)`` for a module object,
            whose class name no command can load.

    Returns:
        The qualified names of the selected modules, in the order of ``layers``.

    Raises:
        LayerSelectionError: If the selector is malformed, a term (``!term`` included) matches
            nothing, or nothing is left after exclusions.

    Example:
        >>> refs = [LayerRef("conv1", ("Conv2d",), True), LayerRef("fc", ("Linear",), True)]
        >>> select_layers(refs, "conv")
        ['conv1']
    """
    terms = [
        _Term(t[1:].strip(), True) if t.startswith("!") else _Term(t, False)
        for t in parse_selector(selector)
    ]
    if not any(ref.name for ref in layers):
        raise LayerSelectionError(
            f"{model} has no submodules, and actviz records what a model's submodules output; "
            "wrap it, e.g. torch.nn.Sequential(model), whose layer '0' is the module itself"
        )
    fix = listing or f"`actviz list-layers {model}`"
    includes = [t for t in terms if not t.exclude]
    excludes = [t for t in terms if t.exclude]

    chosen: set[str] = set()
    if includes:
        for term in includes:
            chosen.update(_match_some(term, layers, model, fix))
    else:
        chosen.update(_match("all", layers))
    for term in excludes:
        chosen.difference_update(_match_some(term, layers, model, fix))

    result = [ref.name for ref in layers if ref.name in chosen]
    if not result:
        raise LayerSelectionError(
            f"the selector '{','.join(_show(t) for t in terms)}' leaves no layer of {model} "
            f"after exclusions; run {fix} to see what there is"
        )
    return result


def named_exactly(layers: Sequence[LayerRef], selector: str | Sequence[str]) -> set[str]:
    """The modules a selector names one by one: its exact qualified names (``layer4``,
    ``name:fc``), as opposed to what ``all``, a type, a glob or a regular expression sweeps in.

    A caller may quietly drop a swept-in module that cannot be drawn; a module the user typed
    by name deserves a word instead.

    Raises:
        LayerSelectionError: If the selector is malformed.
    """
    found: set[str] = set()
    for term in parse_selector(selector):
        if term.startswith("!"):
            continue
        if term.startswith("name:"):
            found.update(_by_name(term[5:], layers))
        elif (
            term != "all"
            and not term.startswith(("re:", "type:"))
            and not _GLOB_CHARS & set(term)
            and not _by_type(term, layers)
        ):
            found.update(_by_name(term, layers))
    return found


def _match_some(term: _Term, layers: Sequence[LayerRef], model: str, listing: str) -> set[str]:
    """What one term matches; an error when that is nothing."""
    hits = _match(term.text, layers)
    if not hits:
        raise LayerSelectionError(_no_match_message(term, layers, model, listing))
    return hits


def _show(term: _Term) -> str:
    return _printable(f"!{term.text}" if term.exclude else term.text)


def _printable(text: str) -> str:
    """Escape control characters so an error message stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _match(term: str, layers: Sequence[LayerRef]) -> set[str]:
    """The names one (non-excluding) term matches."""
    if term.startswith("re:"):
        pattern = re.compile(term[3:])
        return {r.name for r in layers if r.name and pattern.search(r.name)}
    if term.startswith("name:"):
        return _by_name(term[5:], layers)
    if term.startswith("type:"):
        return _by_type(term[5:], layers)
    if term == "all":
        return {r.name for r in layers if r.leaf and r.name}
    if _GLOB_CHARS & set(term):
        return {r.name for r in layers if r.name and fnmatchcase(r.name, term)}
    # An alias or a class name wins over a module that happens to share its name; `name:` is
    # the way to reach such a module.
    return _by_type(term, layers) or _by_name(term, layers)


def _by_name(name: str, layers: Sequence[LayerRef]) -> set[str]:
    return {r.name for r in layers if r.name == name and name}


def _by_type(term: str, layers: Sequence[LayerRef]) -> set[str]:
    alias = TYPE_ALIASES.get(term.lower())
    if alias is not None:
        # Containers too: torchvision's MultiheadAttention holds an out_proj Linear, and a
        # user's attention block may subclass it; `all` is the selector that means leaves.
        found = {r.name for r in layers if r.name and alias.intersection(r.types)}
        if term.lower() == "attn":
            found |= _innermost_attention(layers)
        return found
    return {r.name for r in layers if r.name and term in r.types}


def _innermost_attention(layers: Sequence[LayerRef]) -> set[str]:
    """timm's and Hugging Face's attention layers (``Attention``, ``WindowAttention``,
    ``ViTSelfAttention``, ...): a class named ``*Attention`` that holds no other one, so
    Hugging Face's ``ViTAttention`` wrapper gives way to the ``ViTSelfAttention`` inside, as
    ``--capture attn`` draws it."""
    named = [r.name for r in layers if r.name and r.type_name.endswith("Attention")]
    return {name for name in named if not any(other.startswith(f"{name}.") for other in named)}


def _no_match_message(term: _Term, layers: Sequence[LayerRef], model: str, listing: str) -> str:
    shown = _show(term)
    fix = f"run {listing} to see names and types"
    text = term.text
    alias = None if text.startswith("name:") else text.removeprefix("type:").lower()
    if alias in TYPE_ALIASES:
        classes = sorted(TYPE_ALIASES[alias])
        listed = ", ".join(classes[:_ALIAS_SHOWN] + ["..."] * (len(classes) > _ALIAS_SHOWN))
        excludes = f", so '{shown}' excludes nothing" if term.exclude else ""
        return f"no module of {model} is {_ALIAS_NOUNS[alias]} ({listed}){excludes}; {fix}"
    # A `name:`/`type:` term is compared with names/types only, and without its prefix.
    kind, _, bare = text.partition(":") if text.startswith(("name:", "type:")) else ("", "", text)
    candidates = _vocabulary(layers, names=kind != "type", types=kind != "name")
    # Never the term itself (an alias is handled above, so only exact names are left).
    candidates = [c for c in candidates if c != bare]
    close = difflib.get_close_matches(bare, candidates, n=5, cutoff=0.6)
    hint = f"; close: {', '.join(_printable(c) for c in close)}" if close else ""
    what = "the exclusion " if term.exclude else ""
    return f"no layer of {model} matches {what}'{shown}'{hint}; {fix}"


def _vocabulary(layers: Iterable[LayerRef], *, names: bool, types: bool) -> list[str]:
    words: dict[str, None] = {}
    for ref in layers:
        if names and ref.name:
            words[ref.name] = None
        if types and ref.type_name:
            words[ref.type_name] = None
    if types:
        for alias in TYPE_ALIASES:
            words[alias] = None
    if names and types:
        words["all"] = None
    return list(words)
