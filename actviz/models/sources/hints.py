"""Near misses across model sources: a MODEL name spelled for one source that another owns.

``vit_small_patch16_224`` is a timm name without its ``timm/``; ``timm:convnext_tiny`` spells
timm's prefix with a colon (so it reads as a factory); ``hf/vit``, a ``save_pretrained``
folder, lacks its ``hf:``. Each answers the spelling that loads, or None; they are asked only
on the error path, so the optional libraries are imported only then.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["MODEL_SPELLINGS", "other_source_hint"]

#: How MODEL is spelled for each source, as the help and the errors say it.
MODEL_SPELLINGS = "a torchvision name (resnet34), timm/NAME, hf:FOLDER_OR_ID, or file.py:factory"

#: Prefixes written for timm or Hugging Face with the wrong separator.
_MISSPELLED = {
    "timm:": "timm/",
    "timm.": "timm/",
    "huggingface:": "hf:",
    "hf_hub:": "hf:",
}


def other_source_hint(name: str) -> str | None:
    """The spelling of ``name`` that another source loads (``timm/vit_small_patch16_224``,
    ``hf:hf/vit``), or None when no other source knows it."""
    text = name.strip()
    if not text:
        return None
    if _hf_folder(text):
        return f"hf:{text}"
    lowered = text.lower()
    for wrong, right in _MISSPELLED.items():
        if lowered.startswith(wrong) and len(text) > len(wrong):
            rest = text[len(wrong) :]
            if right == "timm/" and not _timm_knows(rest):
                continue
            return f"{right}{rest}"
    if _timm_knows(text):
        return f"timm/{text}"
    return None


def _hf_folder(text: str) -> bool:
    """A ``save_pretrained`` folder (it holds a config.json)."""
    try:
        return (Path(text).expanduser() / "config.json").is_file()
    except OSError:
        return False


def _timm_knows(name: str) -> bool:
    """timm's registry has the architecture (tag aside); False without timm."""
    arch = name.partition(".")[0]
    if not arch or importlib.util.find_spec("timm") is None:
        return False
    return bool(importlib.import_module("timm").is_model(arch))
