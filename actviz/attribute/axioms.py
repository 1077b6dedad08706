"""What each method's axiom says about one image, and over a folder.

- Integrated Gradients, **completeness**: the attributions sum to ``F(x) - F(x')``; the
  residual ``|sum(a) - (F(x) - F(x'))|`` is the path integral's error, so one above
  :data:`COMPLETENESS_TOLERANCE` of ``|F(x) - F(x')|`` says the steps are too few.
- LRP, **conservation**: the relevance that reaches the input over the seed; biases and the
  epsilon stabilizer absorb part of it, so it is near 1, not 1; one further than
  :data:`CONSERVATION_TOLERANCE` from 1 says the rules do not fit the model.
- Attention rollout, **row sums**: every row of the rolled-out matrix sums to 1 (a deviation
  above :data:`ROW_SUM_TOLERANCE` means a block's weights were not a distribution).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "COMPLETENESS_TOLERANCE",
    "CONSERVATION_TOLERANCE",
    "ROW_SUM_TOLERANCE",
    "axiom_line",
    "judged",
    "summarize",
    "warning",
]

#: A completeness residual above this fraction of ``|F(x) - F(x')|`` flags the image.
COMPLETENESS_TOLERANCE = 0.05
#: Below this absolute residual an image is never flagged (``F(x)`` close to ``F(x')``).
COMPLETENESS_FLOOR = 1e-4
#: Relevance kept at the input further than this from the seed flags the image.
CONSERVATION_TOLERANCE = 0.5
#: A row sum of the rollout further than this from 1 flags the image.
ROW_SUM_TOLERANCE = 1e-6


def judged(axiom: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The axiom with its verdict, ``ok`` (False flags the image), and its ``line``
    (:func:`axiom_line`: what pictures and the page say)."""
    if axiom is None:
        return None
    out = dict(axiom)
    name = out.get("name")
    if name == "completeness":
        residual, relative = float(out["residual"]), float(out["relative"])
        ok = math.isfinite(residual) and (
            residual <= COMPLETENESS_FLOOR or relative <= COMPLETENESS_TOLERANCE
        )
    elif name == "conservation":
        kept = float(out["kept"])
        ok = math.isfinite(kept) and abs(kept - 1) <= CONSERVATION_TOLERANCE
    elif name == "row sums":
        deviation = float(out["deviation"])
        ok = math.isfinite(deviation) and deviation <= ROW_SUM_TOLERANCE
    else:
        ok = True
    out["ok"] = bool(ok)
    out = {k: _finite(v) for k, v in out.items()}
    out["line"] = axiom_line(out)
    return out


def _finite(value: Any) -> Any:
    """JSON has no NaN: a non-finite number is recorded as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def axiom_line(axiom: Mapping[str, Any] | None) -> str | None:
    """One line for a picture's header and the page: what the axiom came to."""
    if axiom is None:
        return None
    name = axiom.get("name")
    flag = "" if axiom.get("ok", True) else "  [FLAGGED]"
    if name == "completeness":
        return (
            f"completeness: sum {_g(axiom.get('sum'))} vs F(x) - F(x') "
            f"{_g(_difference(axiom))}, residual {_g(axiom.get('residual'))} "
            f"({_pct(axiom.get('relative'))}){flag}"
        )
    if name == "conservation":
        return f"conservation: {_g(axiom.get('kept'))} of the unit seed reached the input{flag}"
    if name == "row sums":
        return f"row sums: 1 within {_g(axiom.get('deviation'))}{flag}"
    return None


def _difference(axiom: Mapping[str, Any]) -> float | None:
    score, start = axiom.get("score"), axiom.get("baseline_score")
    if score is None or start is None:
        return None
    return float(score) - float(start)


def _g(value: Any) -> str:
    return "-" if value is None else f"{float(value):.4g}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2%}"


def summarize(
    records: Sequence[Mapping[str, Any]], methods: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per method: its axiom's name, the images checked and flagged, and the worst value
    (the largest completeness residual, relative; the conservation furthest from 1; the
    largest row-sum deviation)."""
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        axioms = [
            r["methods"][method]["axiom"]
            for r in records
            if r.get("status") == "ok" and (r.get("methods") or {}).get(method, {}).get("axiom")
        ]
        if not axioms:
            out[method] = {"axiom": None, "images": 0, "flagged": 0, "worst": None}
            continue
        name = axioms[0]["name"]
        worst: float | None = None
        if name == "completeness":
            worst = max((float(a["relative"] or 0) for a in axioms), default=None)
        elif name == "conservation":
            kept = [float(a["kept"]) for a in axioms if a.get("kept") is not None]
            worst = max(kept, key=lambda k: abs(k - 1)) if kept else None
        elif name == "row sums":
            worst = max((float(a["deviation"] or 0) for a in axioms), default=None)
        out[method] = {
            "axiom": name,
            "images": len(axioms),
            "flagged": sum(1 for a in axioms if not a.get("ok", True)),
            "worst": worst,
        }
    return out


def warning(method: str, summary: Mapping[str, Any], steps: int) -> str | None:
    """The command's warning when ``method``'s axiom flagged images, naming the fix."""
    flagged, images = int(summary.get("flagged") or 0), int(summary.get("images") or 0)
    if not flagged:
        return None
    name, worst = summary.get("axiom"), summary.get("worst")
    if name == "completeness":
        return (
            f"ig: the completeness residual is above {COMPLETENESS_TOLERANCE:.0%} of "
            f"F(x) - F(x') on {flagged} of {images} images (worst {_pct(worst)}): the {steps} "
            "steps are too few for this model; raise --steps"
        )
    if name == "conservation":
        return (
            f"lrp: the relevance kept at the input is further than {CONSERVATION_TOLERANCE} "
            f"from the seed on {flagged} of {images} images (worst {_g(worst)}): the rules "
            "lose or add relevance on this model (biases, unsupported layers); try another "
            "--composite"
        )
    return (
        f"{method}: the rollout's rows do not sum to 1 on {flagged} of {images} images "
        f"(worst deviation {_g(worst)}): a block's attention is not a distribution"
    )
