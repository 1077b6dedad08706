"""The command kit: the opening every image command shares, the JSON head, the progress
protocol and the batched forward of one model or two."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from actviz import __version__
from actviz.command import (
    BatchForward,
    CommandSpec,
    ExecutionOptions,
    LoadOptions,
    SilentReporter,
    json_head,
    model_fields,
    open_command,
    start_progress,
)
from actviz.errors import OutputError, UsageError
from actviz.models import WeightsInfo

from .conftest import make_image


def _tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )


class _Record:
    def __init__(self) -> None:
        self.said: list[tuple[str, Any]] = []

    def warn(self, message: str) -> None:
        self.said.append(("warn", message))

    def start(self, total: int) -> None:
        self.said.append(("start", total))

    def advance(self, result: Any) -> None:
        self.said.append(("advance", result))


LOAD = LoadOptions(device="cpu", input_size=(32, 32))


def test_the_opening_loads_selects_and_gives_the_module_back(tmp_path: Path) -> None:
    make_image(tmp_path / "in" / "a.png", size=(40, 32))
    model = _tiny().train()
    notify = _Record()
    with open_command(model, tmp_path / "out", reporter=notify, inputs=[tmp_path / "in"]) as cmd:
        assert cmd.model == "Sequential" and cmd.found is not None
        assert [item.path.name for item in cmd.found.images] == ["a.png"]
        opened = cmd.load(LOAD, shows="The grids show")
        assert opened.random is None and opened.warning is None  # a module keeps its weights
        assert not model.training  # in eval mode while the command runs
        assert cmd.select(opened.model, "Conv2d") == ("Conv2d", ["0"])
        assert cmd.deepest(opened.model, "Conv2d,Linear")[1] == ["0", "4"]
        cmd.warn("something to know")
        assert cmd.seconds() >= 0
    assert model.training  # given back as it came
    assert cmd.warnings == ["something to know"]
    assert notify.said == [("warn", "something to know")]


def test_a_command_that_fails_before_writing_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(UsageError), open_command("resnet18", out):
        raise UsageError("stopped")
    assert not out.exists()


def test_the_checks_come_before_the_output_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.txt").write_text("not ours")

    def refuse(found: Any) -> None:
        raise UsageError("no images")

    def opening(**keywords: Any) -> None:
        with open_command(keywords.pop("model", "resnet18"), out, **keywords):
            pass

    # A module object cannot go to Ray workers: refused first, by a command that uses them.
    ray = ExecutionOptions(engine="ray")
    with pytest.raises(UsageError, match="engine='ray'"):
        opening(model=_tiny(), spec=CommandSpec(ray=True), execution=ray)
    with pytest.raises(UsageError, match="no images"):
        opening(inputs=[], check_inputs=refuse)
    with pytest.raises(OutputError, match="another out"):
        opening(spec=CommandSpec(hint="choose another --out"))
    guarded: list[Path] = []
    with open_command("resnet18", out, guard=guarded.append):
        pass  # the command's own rule replaces the folder guard
    assert guarded == [out] and (out / "x.txt").exists()


def test_random_weights_warn_once_and_are_data(tmp_path: Path) -> None:
    notify = _Record()
    with open_command("resnet18", tmp_path / "out", reporter=notify) as cmd:
        opened = cmd.load(LoadOptions(device="cpu", weights="auto"), shows="The grids show")
    assert opened.model.weights.random  # no network here: pretrained weights are unavailable
    assert opened.random is not None and opened.random.model == "resnet18"
    assert opened.warning is not None and opened.warning.startswith("RANDOM WEIGHTS:")
    assert "The grids show an untrained resnet18" in opened.warning
    assert cmd.warnings == [opened.warning] and notify.said == [("warn", opened.warning)]
    with open_command("resnet18", tmp_path / "none") as cmd:
        asked = cmd.load(LoadOptions(device="cpu", weights="none"), shows="The grids show")
    assert asked.random is None and cmd.warnings == []


def test_the_json_head() -> None:
    weights = WeightsInfo(spec="none", source="random")
    fields = model_fields("m", {"versions": {"timm": "1.0"}}, weights, "loud")
    assert fields["weights"]["warning"] == "loud" and fields["weights"]["random"] is True
    head = json_head(infos=[{"versions": {"timm": "1.0"}}, None], device="cpu", model=fields)
    assert list(head) == [
        "actviz",
        "versions",
        "created",
        "model",
        "model_info",
        "weights",
        "device",
    ]
    assert head["actviz"] == __version__ and head["versions"]["timm"] == "1.0"
    assert {"torch", "torchvision", "pillow"} <= set(head["versions"])
    bare = json_head(infos=[], device="cpu", model={}, created=False, tool=False)
    assert list(bare) == ["versions", "device"]


def test_progress_starts_past_what_an_earlier_run_did() -> None:
    notify = _Record()
    start_progress(notify, 3, ["a", "b"])
    assert notify.said == [("start", 3), ("advance", "a"), ("advance", "b")]
    SilentReporter().advance(None)  # ignores everything


def test_the_batched_forward_drives_a_second_model(tmp_path: Path) -> None:
    from actviz.hooks import ActivationRecorder

    paths = [make_image(tmp_path / f"{i}.png", size=(32, 32), seed=i) for i in range(3)]
    with open_command(_tiny(0), tmp_path / "out") as cmd:
        a = cmd.load(LOAD, shows="The grids show").model
        b = cmd.load(LOAD, shows="The grids show", given=_tiny(1)).model
        forward = BatchForward(a, a.module, ExecutionOptions(batch_size=2), second=b)
        seen = []
        with (
            ActivationRecorder(a.module, ["0"]) as rec_a,
            ActivationRecorder(b.module, ["0"]) as rec_b,
            contextlib.ExitStack() as stack,
        ):
            for good, logits, x in forward.batches(paths, stack):
                assert logits.shape == (len(good), 3)
                expected = b.module[0](x)  # B ran on the very input A got
                assert torch.allclose(rec_b["0"], expected.cpu(), atol=1e-5)
                assert not torch.allclose(rec_a["0"], rec_b["0"])
                seen += [index for index, _, _ in good]
    assert seen == [0, 1, 2]


def test_a_command_runs_with_its_forced_execution_options(tmp_path: Path) -> None:
    spec = CommandSpec("sae", forced={"amp": False, "channels_last": False})
    given = ExecutionOptions(batch_size=3, amp=True, channels_last=True, resume=True)
    assert spec.execution(given) == ExecutionOptions(batch_size=3, resume=True)
    assert CommandSpec().execution(given) is given and CommandSpec().execution(None).amp is False
    with open_command(_tiny(), tmp_path / "out", spec, given) as cmd:
        assert cmd.execution == ExecutionOptions(batch_size=3, resume=True)
        loaded = cmd.load(LOAD, shows="The grids show").model
        forward = BatchForward(loaded, loaded.module, cmd.execution)
        assert (forward.batch_size, forward.amp, forward.channels_last) == (3, False, False)
    # A module object with engine='ray' is only refused by a command that runs on Ray.
    with open_command(_tiny(), tmp_path / "ray", None, ExecutionOptions(engine="ray")):
        pass
