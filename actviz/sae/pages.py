"""A page per feature and their index, built on top-images: the trained dictionary ranks the
folder's images per feature (``top-images --sae``: contact sheets with the feature's heat map
over the crops where it fires), and each feature's page adds its figures over the whole folder
(density, images, strength, peak: one pass, the same vectors), its stability across seeds, the
classes of the images it fires on, and the channels its decoder direction is made of. The
index sorts by each figure, filters by stability, and searches by class."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz import output
from actviz.command.options import ExecutionOptions
from actviz.command.session import RANDOM_NOTE
from actviz.sae.survey import survey
from actviz.sae.write import FILE
from actviz.top_images import TopImagesOptions, top_images

if TYPE_CHECKING:
    from torch import nn

    from actviz.command import Command
    from actviz.models import LoadedModel
    from actviz.sae.session import Run
    from actviz.top_images.plan import LayerPlan

__all__ = ["FEATURES", "FOLDER", "INDEX", "feature_pages"]

INDEX = "sae.html"
FOLDER = "sae-features"
#: Every feature's figures, classes and files, as JSON.
FEATURES = f"{FOLDER}/features.json"
#: Channels listed per feature: the largest weights of its decoder direction.
CHANNELS = 8

_STYLE = """body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}td,th{padding:.2em .6em;border-bottom:1px solid #ddd;
text-align:right}th{cursor:pointer;background:#f4f4f4}td.l,th.l{text-align:left}
img{max-width:100%;image-rendering:pixelated}.note{color:#666}
.random{background:#fff1e5;border:1px solid #d4760f;color:#7a3e00;padding:.5em .8em;
font-weight:600}"""

_INDEX = """<!doctype html><html><head><meta charset="utf-8"><title>{{ title }}</title>
<style>{{ style }}</style></head><body>
{% if random %}<p class="random">{{ random }}</p>{% endif %}<h1>{{ title }}</h1>
<p class="note">{{ summary }}</p>
<p class="note">{{ over }}</p>
<p>Class <input id="cls" placeholder="search a class"> stability at least
<input id="stab" type="number" step="0.05" value="0" style="width:5em"></p>
<table id="t"><thead><tr><th class="l" data-k="f">feature</th><th data-k="d">density</th>
<th data-k="i">images</th><th data-k="s">strength</th><th data-k="p">peak</th>
<th data-k="st">stability</th>
<th class="l" data-k="c">top-1 classes of the images it fires on</th></tr></thead><tbody>
{% for r in rows %}<tr data-f="{{ r.feature }}" data-d="{{ r.density }}"
data-i="{{ r.images }}" data-s="{{ r.strength }}" data-p="{{ r.peak }}"
data-st="{{ r.stability_sort }}" data-c="{{ r.label }}">
<td class="l"><a href="{{ r.page }}">{{ r.feature }}</a></td><td>{{ r.density_text }}</td>
<td>{{ r.images_text }}</td><td>{{ r.strength_text }}</td><td>{{ r.peak_text }}</td>
<td>{{ r.stability_text }}</td><td class="l">{{ r.label }}</td></tr>
{% endfor %}</tbody></table>
<script>
const t=document.getElementById('t'),body=t.tBodies[0];let dir={};
t.querySelectorAll('th').forEach(h=>h.onclick=()=>{const k=h.dataset.k;dir[k]=-(dir[k]||1);
const rows=[...body.rows];rows.sort((a,b)=>{const x=a.dataset[k],y=b.dataset[k];
const nx=parseFloat(x),ny=parseFloat(y);return (isNaN(nx)?x.localeCompare(y):nx-ny)*dir[k];});
rows.forEach(r=>body.appendChild(r));});
function filt(){const c=document.getElementById('cls').value.toLowerCase();
const s=parseFloat(document.getElementById('stab').value)||0;
[...body.rows].forEach(r=>{const st=parseFloat(r.dataset.st);
r.hidden=!(r.dataset.c.toLowerCase().includes(c)&&(st<0||st>=s));});}
document.getElementById('cls').oninput=filt;document.getElementById('stab').oninput=filt;
</script></body></html>
"""

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{{ title }}</title>
<style>{{ style }}</style></head><body>
{% if random %}<p class="random">{{ random }}</p>{% endif %}
<p><a href="../{{ index }}">all features</a></p>
<h1>{{ title }}</h1>
<p class="note">{{ over }}</p>
<table><tr><th class="l">density (share of the vectors it is active on)</th>
<td>{{ r.density_text }}</td></tr>
<tr><th class="l">images it fires on (share of the images)</th><td>{{ r.images_text }}</td></tr>
<tr><th class="l">strength (mean activation where active)</th><td>{{ r.strength_text }}</td></tr>
<tr><th class="l">peak (largest activation)</th><td>{{ r.peak_text }}</td></tr>
<tr><th class="l">stability across seeds (matched decoder cosine)</th>
<td>{{ r.stability_text }}</td></tr>
</table>
<h2>Top images, with the feature's heat map</h2>
{% if sheet %}<img src="../{{ sheet }}" alt="top images of feature {{ r.feature }}">{% endif %}
<table><tr><th class="l">image</th><th>score</th><th>at (row, column)</th></tr>
{% for e in top %}<tr><td class="l">{{ e.path }}</td><td>{{ e.score }}</td>
<td>{{ e.y }}, {{ e.x }}</td></tr>{% endfor %}</table>
<h2>Below the top: images at activation quantiles</h2>
<p class="note">From a random sample of the images it fires on ({{ fired }} of them): the
image at each quantile of their scores.</p>
<table><tr><th class="l">quantile</th><th class="l">image</th><th>score</th></tr>
{% for q, src, name, score in quantiles %}<tr><td class="l">{{ q }}</td>
<td class="l"><img src="{{ src }}" alt="" style="height:64px;vertical-align:middle">
{{ name }}</td><td>{{ "%.3g"|format(score) }}</td></tr>{% endfor %}</table>
<h2>Classes it co-occurs with</h2>
<p class="note">The model's top-1 class on the images it fires on.</p>
<table><tr><th class="l">class</th><th>share of those images</th></tr>
{% for name, share in classes %}<tr><td class="l">{{ name }}</td>
<td>{{ "%.1f%%"|format(100 * share) }}</td></tr>{% else %}<tr><td class="l">none (not a
classifier, or it never fires)</td><td></td></tr>{% endfor %}</table>
<h2>Channels it is made of</h2><p class="note">The largest weights of its decoder direction
(unit norm) over the layer's {{ channels }} channels.</p>
<table><tr><th class="l">channel</th><th>weight</th></tr>
{% for c, w in made_of %}<tr><td class="l">{{ c }}</td><td>{{ "%.3f"|format(w) }}</td></tr>
{% endfor %}</table></body></html>
"""


def feature_pages(
    model: str | nn.Module,
    cmd: Command,
    loaded: LoadedModel,
    plan: LayerPlan,
    run: Run,
    doc: dict[str, Any],
    inputs: Sequence[Path | str] | Path | str,
    paths: list[Path],
) -> Path:
    """Rank the folder's images per feature, survey it (quantile examples, classes), then
    write every feature's page and the index; the index's path."""

    import jinja2

    opts = run.opts
    assert run.saes is not None
    ranked = top_images(
        model,
        inputs,
        TopImagesOptions(
            out=opts.out,
            k=opts.top,
            sae=opts.out / FILE,
            report=False,
            load=opts.load,
            execution=ExecutionOptions(
                batch_size=opts.execution.batch_size,
                workers=opts.execution.workers,
                overwrite=True,
            ),
        ),
    )
    layer = ranked.document["layers"][0]
    sae = run.saes[0]
    found = survey(
        loaded,
        plan,
        sae,
        paths,
        execution=cmd.execution,
        seed=opts.seed,
    )
    names = loaded.categories or []
    pages_dir = (opts.out / FOLDER).resolve()
    stability = sae.per_feature.get("stability")
    env = jinja2.Environment(autoescape=True)
    page = env.from_string(_PAGE)
    over = f"Every figure over the whole folder: {found.seen:,} images, {found.vectors:,} vectors"
    index_over = f"{over} (the dictionary's quality above is on the held-out images alone)."
    random = _random_banner(loaded)
    rows = []
    weights = sae.w_dec.detach().cpu()
    for f, entry in enumerate(layer["channels"]):
        classes = [
            (names[c] if c < len(names) else f"class {c}", share)
            for c, share in found.top_classes(f)
        ]
        stable = float(stability[f]) if stability is not None else None
        row = _row(f, found.figures(f), stable, classes)
        row["sheet"] = entry["sheet"]
        rows.append(row)
        order = weights[f].abs().argsort(descending=True)[:CHANNELS].tolist()
        html = page.render(
            title=f"{plan.key}: feature {f}",
            style=_STYLE,
            index=INDEX,
            random=random,
            over=f"{over}.",
            r=row,
            sheet=entry["sheet"],
            top=entry["top"],
            channels=plan.channels,
            made_of=[(int(c), float(weights[f, c])) for c in order],
            fired=int(found.fired[f]),
            quantiles=[
                (f"{q:.0%}", Path(os.path.relpath(p.resolve(), pages_dir)).as_posix(), p.name, s)
                for q, p, s in found.examples(f)
            ],
            classes=classes,
        )
        output.write_bytes(opts.out / row["page"], html.encode())
    summary = _summary(cmd.model, plan, sae, run.opts.seeds, doc)
    index = env.from_string(_INDEX).render(
        title=f"{cmd.model} {plan.key}: sparse dictionary features",
        style=_STYLE,
        random=random,
        summary=summary,
        over=index_over,
        rows=rows,
    )
    output.write_bytes(opts.out / INDEX, index.encode())
    output.write_json(
        opts.out / FEATURES,
        {
            "model": cmd.model,
            "layer": plan.key,
            "random_weights": random,
            "summary": summary,
            "images": found.seen,
            "vectors": found.vectors,
            "features": [{k: row[k] for k in _KEPT} | {"classes": row["classes"]} for row in rows],
        },
    )
    return opts.out / INDEX


def _summary(model: str, plan: LayerPlan, sae: Any, seeds: int, doc: dict[str, Any]) -> str:
    """The index's line on the dictionary: its size and its quality, said plainly."""
    quality = doc.get("metrics") or {}
    summary = (
        f"{sae.features} features (k {sae.k}) over the {plan.channels} channels of "
        f"{plan.key} of {model}. On the held-out images: variance explained "
        f"{_share(quality.get('fve'))}, L0 {quality.get('l0')}, dead "
        f"{_share(quality.get('dead_share'))}, dense {_share(quality.get('dense_share'))}, "
        f"top-1 changed with the layer replaced by its reconstruction "
        f"{_share(quality.get('top1_changed_share'))}."
    )
    stable = doc.get("stability")
    if stable:
        summary += (
            f" Stability across {seeds} seeds: mean matched cosine "
            f"{stable['mean']:.3f}, {_share(stable['stable_share'])} of features above "
            f"{stable['stable_above']}."
        )
    summary += " Click a header to sort."
    return summary


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _random_banner(loaded: LoadedModel) -> str | None:
    """The line every page of an untrained model opens with, as the other reports do."""

    weights = loaded.weights
    if not weights.random:
        return None
    return f"RANDOM WEIGHTS: {RANDOM_NOTE.removeprefix('random weights: ')}" + (
        f" ({weights.reason})" if weights.reason else ""
    )


#: A feature's figures kept in ``sae-features/features.json`` (for the notebook browser).
_KEPT = ("feature", "page", "sheet", "density", "images", "strength", "peak", "stability")


def _row(
    f: int,
    figures: dict[str, float],
    stability: float | None,
    classes: list[tuple[str, float]],
) -> dict[str, Any]:
    label = ", ".join(f"{name} ({share:.0%})" for name, share in classes)
    return {
        "feature": f,
        "page": f"{FOLDER}/f{f:05d}.html",
        **figures,
        "stability": stability,
        "stability_sort": stability if stability is not None else -1,
        "density_text": f"{figures['density']:.3%}",
        "images_text": f"{figures['images']:.1%}",
        "strength_text": f"{figures['strength']:.3g}",
        "peak_text": f"{figures['peak']:.3g}",
        "stability_text": f"{stability:.3f}" if stability is not None else "one seed",
        "classes": [[name, round(share, 6)] for name, share in classes],
        "label": label,
    }
