"""``--clip``: concepts from a word list, each image tagged with the words a local CLIP model
finds nearest to it (the idea of CLIP-Dissect, scored here like any tags).

Offline always: the checkpoint is a local file (``ARCH@FILE``, an architecture open_clip knows
and its weights) or a local folder holding ``open_clip_config.json`` and the weights (the
layout of open_clip's models on the Hugging Face Hub); nothing is downloaded, and the Hub is
told so while the model loads. The images are normalised with the checkpoint's own mean and
std: from ``open_clip_config.json`` when the checkpoint has one (beside the file, or in its
folder), else from the architecture's own configuration, never silently from OpenAI's
defaults when the checkpoint says otherwise; the record says which values and where from.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actviz.errors import ImageLoadError, UsageError, first_line, import_extra
from actviz.io.images import load_rgb
from actviz.label.concepts import Concepts
from actviz.label.options import LabelOptions
from actviz.models import resolve_device

__all__ = ["TEMPLATE", "CONFIG", "clip_concepts", "read_words"]

#: What each word is embedded as.
TEMPLATE = "a photo of a {}."
#: The configuration file open_clip's Hub models carry beside their weights.
CONFIG = "open_clip_config.json"
_BATCH = 32


def read_words(path: Path) -> list[str]:
    """The word list: one concept a line, blank lines and ``#`` comments skipped, repeats
    dropped.

    Raises:
        UsageError: When the file cannot be read or holds no word.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise UsageError(f"--words {path} cannot be read: {exc.strerror or exc}") from None
    words = [w.strip() for w in text.splitlines()]
    words = list(dict.fromkeys(w for w in words if w and not w.startswith("#")))
    if not words:
        raise UsageError(f"--words {path} holds no word; write one concept a line")
    return words


def _checkpoint(spec: str) -> tuple[str, str | None, Path, Path | None]:
    """``(open_clip model name, weights file or None, checkpoint, its config or None)``.

    Raises:
        UsageError: For a checkpoint that is not a local file or folder.
    """
    offline = (
        "CLIP runs offline from a local checkpoint: give ARCH@FILE (e.g. "
        "ViT-B-32@open_clip_pytorch_model.bin) or a folder holding open_clip_config.json and "
        "the weights, downloaded beforehand"
    )
    arch, at, file = spec.rpartition("@")
    if not at:
        folder = Path(spec)
        if folder.is_dir():
            if not (folder / CONFIG).is_file():
                raise UsageError(f"--clip {folder} holds no {CONFIG}; {offline}")
            return f"local-dir:{folder}", None, folder, folder / CONFIG
        raise UsageError(f"--clip {spec}: no such folder, and no ARCH@ before a file; {offline}")
    path = Path(file)
    if not arch.strip() or not path.is_file():
        raise UsageError(f"--clip {spec}: {path} is no local file; {offline}")
    beside = path.parent / CONFIG
    return arch.strip(), str(path), path, beside if beside.is_file() else None


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Tell the Hugging Face Hub (which open_clip's tokenizers may ask) not to go online."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {key: os.environ.get(key) for key in keys}
    os.environ.update(dict.fromkeys(keys, "1"))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _own_preprocess(config: Path | None) -> dict[str, Any] | None:
    """The mean and std a checkpoint's ``open_clip_config.json`` gives, if it does."""
    if config is None:
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = (data.get("preprocess_cfg") or {}) if isinstance(data, dict) else {}
    kept = {key: found[key] for key in ("mean", "std") if key in found}
    return kept or None


def clip_concepts(opts: LabelOptions, paths: Sequence[Path]) -> Concepts:
    """Tag every image with its ``clip_top`` nearest words by CLIP.

    Raises:
        UsageError: Without open_clip, for a checkpoint that is not local, one open_clip
            cannot build or load, or an unreadable word list.
    """
    assert opts.clip is not None and opts.words is not None
    name, weights, checkpoint, config = _checkpoint(opts.clip)
    words = read_words(opts.words)
    open_clip = import_extra("open_clip", "clip", "--clip needs open_clip")
    import torch

    device = resolve_device(opts.load.device)
    own = _own_preprocess(config)
    try:
        with _offline():
            model, _, preprocess = open_clip.create_model_and_transforms(
                name,
                pretrained=weights,
                device=device,
                image_mean=tuple(own["mean"]) if own and "mean" in own else None,
                image_std=tuple(own["std"]) if own and "std" in own else None,
                pretrained_text=False,  # a tower's own base weights would be a download
            )
            tokenizer = open_clip.get_tokenizer(name)
    except Exception as exc:  # open_clip's own errors, of any type: one line
        raise UsageError(
            f"--clip {opts.clip}: open_clip cannot load it offline: {type(exc).__name__}: "
            f"{first_line(exc)}"
        ) from None
    model.eval()
    cfg = getattr(model.visual, "preprocess_cfg", {}) or {}
    mean, std = [float(v) for v in cfg.get("mean", ())], [float(v) for v in cfg.get("std", ())]
    with torch.inference_mode():
        text = tokenizer([TEMPLATE.format(w) for w in words]).to(device)
        text_features = model.encode_text(text).float()
        text_features = text_features / text_features.norm(dim=-1, keepdim=True)
        images = _image_features(model, preprocess, paths, device)
    similarity = images @ text_features.cpu().numpy().T
    top = min(opts.clip_top, len(words))
    labels = np.zeros((len(paths), len(words)), dtype=bool)
    readable = np.isfinite(similarity).all(axis=1)
    nearest = np.argsort(-np.nan_to_num(similarity, nan=-np.inf), axis=1, kind="stable")[:, :top]
    rows = np.repeat(np.arange(len(paths)), top)
    labels[rows, nearest.ravel()] = True
    labels[~readable] = False
    return Concepts(
        source="clip",
        names=words,
        labels=labels,
        file=str(opts.words),
        extra={
            "checkpoint": str(checkpoint),
            "architecture": name,
            "mean": mean,
            "std": std,
            "mean_std_from": str(config) if own else "the architecture's configuration",
            "template": TEMPLATE,
            "top": top,
        },
    )


def _image_features(model: Any, preprocess: Any, paths: Sequence[Path], device: Any) -> Any:
    """``(N, D)`` unit-length CLIP image features (NaN rows for unreadable images)."""
    import torch

    out = np.full((len(paths), 0), np.nan, dtype=np.float32)
    chunks: list[np.ndarray[Any, Any]] = []
    for first in range(0, len(paths), _BATCH):
        tensors, kept = [], []
        for i, path in enumerate(paths[first : first + _BATCH]):
            try:
                tensors.append(preprocess(load_rgb(path)))
                kept.append(i)
            except ImageLoadError:
                continue
        block = None
        if tensors:
            features = model.encode_image(torch.stack(tensors).to(device)).float()
            block = (features / features.norm(dim=-1, keepdim=True)).cpu().numpy()
        size = len(paths[first : first + _BATCH])
        width = block.shape[1] if block is not None else (chunks[0].shape[1] if chunks else 1)
        chunk = np.full((size, width), np.nan, dtype=np.float32)
        if block is not None:
            chunk[kept] = block
        chunks.append(chunk)
    return np.concatenate(chunks) if chunks else out


def _short(values: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"
