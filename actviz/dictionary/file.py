"""``sae.safetensors``: the dictionary's tensors, its per-feature figures, and its config as
JSON in the file's metadata. Read back with safetensors alone (no pickle, no code runs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actviz.dictionary.model import SparseDictionary
from actviz.errors import UsageError

__all__ = ["FILE", "FORMAT", "check_fit", "load_dictionary", "dictionary_bytes"]

FORMAT = "actviz-sae/1"
#: The file ``actviz sae`` writes, and the one :func:`load_dictionary` looks for in a folder.
FILE = "sae.safetensors"
_TENSORS = ("w_enc", "b_enc", "w_dec", "b_dec", "mean")
_FEATURE = "feature."


def dictionary_bytes(dictionary: SparseDictionary, config: dict[str, Any] | None = None) -> bytes:
    """The file's bytes (for :mod:`actviz.output` to write): tensors on the CPU, ``config``
    (else the dictionary's own) with the format, k, activation, threshold and scale added."""
    from safetensors.torch import save

    tensors = {name: getattr(dictionary, name).detach().float().cpu().clone() for name in _TENSORS}
    for name, values in dictionary.per_feature.items():
        tensors[_FEATURE + name] = values.detach().float().cpu().contiguous()
    record = {
        **(config if config is not None else dictionary.config),
        "format": FORMAT,
        "k": dictionary.k,
        "activation": dictionary.activation,
        "threshold": dictionary.threshold,
        "scale": dictionary.scale,
    }
    return bytes(save(tensors, metadata={"actviz": json.dumps(record, default=str)}))


def _written_beside(file: Path) -> Path | None:
    """The newest ``FOLDER-N/sae.safetensors`` for a missing ``FOLDER/sae.safetensors``: where
    ``actviz sae`` writes when its default folder already held a run."""
    folder = file.parent
    if file.name != FILE or not folder.name:
        return None
    found = [p for p in folder.parent.glob(f"{folder.name}-*/{FILE}") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def load_dictionary(path: Path | str, device: Any = "cpu") -> SparseDictionary:
    """A dictionary ``actviz sae`` trained, from its ``sae.safetensors`` (or the folder that
    holds it), on ``device``.

    Raises:
        UsageError: For a missing file, or one that is not an actviz dictionary.
    """
    from safetensors import SafetensorError, safe_open

    file = Path(path)
    if file.is_dir():
        file = file / FILE
    if not file.is_file():
        nearby = _written_beside(file)
        hint = f"; the latest one beside it is {nearby}" if nearby is not None else ""
        raise UsageError(
            f"--sae {path}: no such file; pass the sae.safetensors that actviz sae wrote "
            f"(or its folder){hint}"
        )
    try:
        with safe_open(str(file), framework="pt", device="cpu") as fh:
            meta = fh.metadata() or {}
            tensors = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as exc:
        raise UsageError(f"--sae {file} is not a safetensors file ({exc})") from None
    try:
        config = json.loads(meta["actviz"])
        missing = [name for name in _TENSORS if name not in tensors]
        if config.get("format") != FORMAT or missing:
            raise KeyError("format")
        dictionary = SparseDictionary(
            **{name: tensors[name] for name in _TENSORS},
            scale=float(config["scale"]),
            k=int(config["k"]),
            activation=config["activation"],
            threshold=float(config["threshold"]),
            config=config,
            per_feature={
                name.removeprefix(_FEATURE): t
                for name, t in tensors.items()
                if name.startswith(_FEATURE)
            },
            file=file,
        )
    except (KeyError, TypeError, ValueError, json.JSONDecodeError):
        raise UsageError(
            f"--sae {file} is not a dictionary actviz sae wrote (no {FORMAT} config in it)"
        ) from None
    return dictionary.to(device)


#: Model sources whose names say which network it is: a dictionary trained on one of them
#: is refused on another name. A factory or a module object may be the same network under
#: another spelling, so it is only warned about.
_NAMED_SOURCES = frozenset({"torchvision", "timm", "hf"})


def check_fit(
    dictionary: SparseDictionary,
    source: Path,
    *,
    model: str,
    model_source: str,
    input_size: tuple[int, int],
    warn: Callable[[str], None],
) -> None:
    """Refuse a dictionary trained on another named model; ``warn`` (one line) when its
    training did not finish (saved on Ctrl-C), when the model may differ or the input size
    does (the layer's maps then differ from those it learned).

    Raises:
        UsageError: When the dictionary's model and ``model`` are both names of a model
            source and differ.
    """
    config = dictionary.config
    trained = config.get("model")
    layer = (config.get("layer") or {}).get("key")
    if config.get("complete") is False:
        steps = (config.get("training") or {}).get("steps")
        done = f" after {steps:,} steps" if isinstance(steps, int) else ""
        warn(
            f"--sae {source} was saved before its training finished (stopped{done}): its "
            "features may be half-learned; finish it by running the same actviz sae command "
            "with --resume"
        )
    if isinstance(trained, str) and trained != model:
        was = (config.get("model_info") or {}).get("source")
        if was in _NAMED_SOURCES and model_source in _NAMED_SOURCES:
            raise UsageError(
                f"--sae {source} was trained on {trained} ({layer}), not {model}: its features "
                f"are directions in {trained}'s activations; use it with {trained}"
            )
        warn(
            f"--sae {source} was trained on {trained}; this model is {model}: its features "
            "mean something only if this is the same network with the same weights"
        )
    size = config.get("input_size")
    if isinstance(size, list) and len(size) == 2 and tuple(size) != tuple(input_size):
        warn(
            f"--sae {source} was trained on {size[0]} x {size[1]} inputs and this run is at "
            f"{input_size[0]} x {input_size[1]}: pass --input-size {size[0]},{size[1]} for the "
            "maps it learned from"
        )
