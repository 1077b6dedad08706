"""Each command's own options are one group made from its options dataclass: every field of the
group is a field of the dataclass (or its ``no_X`` switch), with the dataclass's default, and
the group builds the dataclass by name."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest

import actviz.cli  # noqa: F401  (registers every command, so every group is defined)
from actviz.cli.groups import ExecutionFlags, LoadFlags, OptionsFlags

#: Each command's own group -> its library options dataclass.
OWN_GROUPS = {
    "actviz.cli.sae:SaeFlags": "actviz.sae:SaeOptions",
    "actviz.cli.top_images:TopImagesFlags": "actviz.top_images:TopImagesOptions",
    "actviz.cli.label:LabelFlags": "actviz.label:LabelOptions",
    "actviz.cli.diff:DiffFlags": "actviz.diff:DiffOptions",
    "actviz.cli.tcav:TcavFlags": "actviz.tcav:TcavOptions",
    "actviz.cli.attribute:AttributeFlags": "actviz.attribute:AttributeOptions",
    "actviz.cli.cam_eval:CamEvalFlags": "actviz.cam_eval:CamEvalOptions",
    "actviz.cli.ablate:AblateFlags": "actviz.ablate:AblateOptions",
    "actviz.cli.atlas:AtlasFlags": "actviz.atlas:AtlasOptions",
    "actviz.cli.optimize:OptimizeFlags": "actviz.optimize:OptimizeOptions",
    "actviz.cli.commands:RunFlags": "actviz.run.options:RunOptions",
    "actviz.cli.commands:StatsFlags": "actviz.run.options:RunOptions",
}

#: A command's default that differs from its options' on purpose: stats writes its report
#: only when asked for.
OWN_DEFAULTS: dict[str, dict[str, Any]] = {"actviz.cli.commands:StatsFlags": {"report": False}}

#: What a group needs beyond its defaults to build its options at all.
NEEDED: dict[str, dict[str, Any]] = {
    "actviz.cli.label:LabelFlags": {"classes": True},
    # The options the command line requires, given as it gives them.
    "actviz.cli.tcav:TcavFlags": {"concept": ["c=d"], "random": [Path("r")], "target": ["1"]},
    "actviz.cli.ablate:AblateFlags": {"layer": "layer1", "units": "0"},
    "actviz.cli.atlas:AtlasFlags": {"layer": "layer1"},
}


def _named(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _all_subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _all_subclasses(sub)
    return found


def test_every_own_group_is_listed() -> None:
    defined = {f"{c.__module__}:{c.__qualname__}" for c in _all_subclasses(OptionsFlags)}
    assert defined == set(OWN_GROUPS)


def _defaults(options: type) -> dict[str, Any]:
    """The dataclass's defaults by field name; a nested dataclass's as a dict of its own."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(options):
        if f.default is not dataclasses.MISSING:
            found[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = f.default_factory()
    return found


@pytest.mark.parametrize("flags_path", sorted(OWN_GROUPS))
def test_an_own_group_has_the_dataclass_fields_and_defaults(flags_path: str) -> None:
    flags, options = _named(flags_path), _named(OWN_GROUPS[flags_path])
    defaults = _defaults(options)
    homes = {name: outer for outer, names in flags.nested.items() for name in names}
    needed = {flags.renamed.get(k, k): v for k, v in NEEDED.get(flags_path, {}).items()}
    for item in dataclasses.fields(flags):
        if item.name in flags.read_by_command:
            continue
        name = item.name[3:] if item.name.startswith("no_") else item.name
        name = flags.renamed.get(item.name, name)
        home = homes.get(item.name)
        where = dataclasses.asdict(defaults[home]) if home else defaults
        assert name in where, (flags_path, item.name)
        default = where[name]
        if item.name in OWN_DEFAULTS.get(flags_path, {}):
            assert item.default == OWN_DEFAULTS[flags_path][item.name], (flags_path, name)
        elif item.default is dataclasses.MISSING:
            assert item.name in NEEDED[flags_path], (flags_path, item.name)  # required
        elif name == "out":
            assert item.default is None  # the first free folder, chosen by the command
        elif item.name in flags.defaulted:
            assert item.default is None, (flags_path, name)  # the options' own default
        elif item.name.startswith("no_"):
            assert item.default is False and default is True, (flags_path, name)
        elif home or name in needed:
            assert item.default == default, (flags_path, name)
        else:  # as the options hold it once checked ("pooled" is atlas's Points("pooled"))
            held = getattr(options(out=Path("o"), **{**needed, name: item.default}), name)
            assert held == default, (flags_path, name)
    # Every field of the dataclass the command line offers is in the group, none copied by hand.
    given = NEEDED.get(flags_path, {})
    groups = {"load": LoadFlags(), "execution": ExecutionFlags()}
    names = {f.name for f in dataclasses.fields(options)}
    built = flags(**given).build(
        options, out=Path("o"), **{k: v for k, v in groups.items() if k in names}
    )
    assert built == options(out=Path("o"), **needed, **OWN_DEFAULTS.get(flags_path, {}))


def test_a_group_renames_and_nests_fields_and_leaves_unset_ones_to_the_options() -> None:
    from actviz.attribute import DEFAULT_METHODS, AttributeOptions
    from actviz.cli.attribute import AttributeFlags

    built = AttributeFlags(method=["smoothgrad"], steps=8, seed=3).build(
        AttributeOptions, out=Path("o")
    )
    assert built.methods == ("smoothgrad",)
    assert built.settings.steps == 8 and built.settings.seed == 3
    assert AttributeFlags().build(AttributeOptions, out=Path("o")).methods == DEFAULT_METHODS


def test_a_nested_field_also_fills_the_options_own_field_of_its_name() -> None:
    from actviz.cam_eval import CamEvalOptions
    from actviz.cli.cam_eval import CamEvalFlags

    built = CamEvalFlags(seed=5, ig_steps=7, steps=9).build(CamEvalOptions, out=Path("o"))
    assert (built.seed, built.steps) == (5, 9)
    assert (built.attribution.seed, built.attribution.steps) == (5, 7)


def test_a_group_builds_layers_as_one_selector_and_no_switches_negated() -> None:
    from actviz.cli.sae import SaeFlags
    from actviz.sae import SaeOptions

    flags = SaeFlags(layers=["layer3", "layer4.*"], no_pages=True, k=4)
    built = flags.build(SaeOptions, out=Path("o"), load=LoadFlags(weights="none"))
    assert built.layers == "layer3,layer4.*" and built.pages is False and built.k == 4
    assert built.load.weights == "none" and built.out == Path("o")
