"""The one check every command makes before it resumes into a folder: the settings the folder's
files were written with against the settings of this run. Any difference refuses the resume
with one error (:class:`~actviz.errors.SettingsChanged`, exit 2) that names what changed,
before anything is written."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actviz.errors import SettingsChanged

__all__ = ["check_settings", "differences", "settings_changed"]


def check_settings(out: Path, earlier: Any, now: Mapping[str, Any]) -> None:
    """Refuse to resume into ``out`` when ``earlier`` (the settings its files were written
    with, as read back from JSON; anything else counts as none) differ from ``now``.

    Raises:
        SettingsChanged: Naming each setting that changed, its value then and now.
    """
    current = json.loads(json.dumps(dict(now), default=str))
    before = earlier if isinstance(earlier, dict) else {}
    if _digest(before) != _digest(current):
        raise settings_changed(out, differences(before, current))


def settings_changed(out: Path, what: str) -> SettingsChanged:
    """The refusal of a resume into ``out`` written with ``what`` (:func:`differences`)."""
    return SettingsChanged(
        f"--resume: {out} was written with {what}; use --overwrite or another --out"
    )


def differences(earlier: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """``selector=layer4.* (now conv) and draw.max_channels=64 (now 16)``: only what differs,
    nested settings by their dotted path, in the order of the current settings."""
    old, new = _flatten(earlier), _flatten(now)
    parts = []
    for key in [*new, *(k for k in old if k not in new)]:
        if key not in old:
            parts.append(f"{key} not set (now {_value(new[key])})")
        elif key not in new:
            parts.append(f"{key}={_value(old[key])} (now not set)")
        elif _digest({"": old[key]}) != _digest({"": new[key]}):  # NaN-proof comparison
            parts.append(f"{key}={_value(old[key])} (now {_value(new[key])})")
    if not parts:
        return "other settings"
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _digest(settings: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _flatten(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _value(value: Any) -> str:
    return value if isinstance(value, str) and value else json.dumps(value, ensure_ascii=False)
