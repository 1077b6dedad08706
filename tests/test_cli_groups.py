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
}

#: What a group needs beyond its defaults to build its options at all.
NEEDED: dict[str, dict[str, Any]] = {"actviz.cli.label:LabelFlags": {"classes": True}}


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


@pytest.mark.parametrize("flags_path", sorted(OWN_GROUPS))
def test_an_own_group_has_the_dataclass_fields_and_defaults(flags_path: str) -> None:
    flags, options = _named(flags_path), _named(OWN_GROUPS[flags_path])
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(options)
        if f.default is not dataclasses.MISSING
    }
    for item in dataclasses.fields(flags):
        if item.name in flags.read_by_command:
            continue
        name = item.name[3:] if item.name.startswith("no_") else item.name
        assert name in {f.name for f in dataclasses.fields(options)}, (flags_path, item.name)
        if name == "out":
            assert item.default is None  # the first free folder, chosen by the command
        elif item.name.startswith("no_"):
            assert item.default is False and defaults[name] is True, (flags_path, name)
        else:
            assert item.default == defaults[name], (flags_path, name)
    # Every field of the dataclass the command line offers is in the group, none copied by hand.
    given = NEEDED.get(flags_path, {})
    built = flags(**given).build(
        options, out=Path("o"), load=LoadFlags(), execution=ExecutionFlags()
    )
    assert built == options(out=Path("o"), **given)


def test_a_group_builds_layers_as_one_selector_and_no_switches_negated() -> None:
    from actviz.cli.sae import SaeFlags
    from actviz.sae import SaeOptions

    flags = SaeFlags(layers=["layer3", "layer4.*"], no_pages=True, k=4)
    built = flags.build(SaeOptions, out=Path("o"), load=LoadFlags(weights="none"))
    assert built.layers == "layer3,layer4.*" and built.pages is False and built.k == 4
    assert built.load.weights == "none" and built.out == Path("o")
