"""Hooks on a tiny model with known names: copies, repeated calls, cleanup."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import actviz
from actviz.errors import ActvizError, LayerSelectionError, ModelError
from actviz.hooks import ActivationRecorder, HookSession, eval_mode


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_bn_output_keeps_negative_values_despite_inplace_relu(tiny_net: nn.Module) -> None:
    x = torch.randn(1, 3, 8, 8)
    with ActivationRecorder(tiny_net, ["stem.bn", "stem.relu"]) as acts:
        tiny_net(x)
    assert acts["stem.bn"].min() < -0.5  # bias -1 makes most values negative
    assert acts["stem.relu"].min() >= 0
    # Without a copy the two would be the same storage, post-ReLU.
    assert not torch.equal(acts["stem.bn"], acts["stem.relu"])
    assert torch.equal(acts["stem.bn"].clamp(min=0), acts["stem.relu"])


def test_reused_module_gives_one_capture_per_call(tiny_net: nn.Module) -> None:
    with ActivationRecorder(tiny_net, ["act"]) as recorder:
        tiny_net(torch.randn(2, 3, 8, 8))
    caps = recorder.captures
    assert [c.key for c in caps] == ["act", "act:2"]
    assert [c.call for c in caps] == [1, 2]
    assert caps[0].shape == (2, 4, 8, 8)  # after the stem
    assert caps[1].shape == (2, 6, 8, 8)  # after the block
    assert recorder.calls("act") == 2


def test_captures_are_cpu_float32_copies_in_firing_order(tiny_net: nn.Module) -> None:
    with actviz.capture(tiny_net, "conv,relu,linear") as acts:
        out = tiny_net(torch.randn(1, 3, 8, 8))
    assert list(acts) == ["stem.conv", "stem.relu", "act", "block.conv", "act:2", "head"]
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in acts.values())
    assert torch.equal(acts["head"], out)
    assert acts["head"].data_ptr() != out.data_ptr()


def test_each_forward_starts_a_fresh_record(tiny_net: nn.Module) -> None:
    with ActivationRecorder(tiny_net, ["act"]) as recorder:
        tiny_net(torch.randn(1, 3, 8, 8))
        tiny_net(torch.randn(1, 3, 8, 8))
    assert [c.key for c in recorder.captures] == ["act", "act:2"]


def test_no_hooks_remain_after_success_or_an_exception(tiny_net: nn.Module) -> None:
    before = _hook_count(tiny_net)
    with ActivationRecorder(tiny_net, ["stem.conv", "act", "head"]):
        # Three layers, the root's reset hook, and the root's batch-size watch.
        assert _hook_count(tiny_net) == before + 5
        tiny_net(torch.randn(1, 3, 8, 8))
    assert _hook_count(tiny_net) == before
    with (
        pytest.raises(RuntimeError),
        ActivationRecorder(tiny_net, ["stem.conv", "act", "head"]),
    ):
        tiny_net(torch.randn(1, 5, 8, 8))  # wrong channel count: the conv raises
    assert _hook_count(tiny_net) == before


def test_tuple_dict_and_none_outputs() -> None:
    class Multi(nn.Module):
        def forward(self, x: torch.Tensor) -> object:
            return (x, {"a": x * 2, "none": None}, None)

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.multi = Multi()
            self.nothing = nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.multi(x)
            return x

    model = Wrap()

    def nothing_forward(x: torch.Tensor) -> None:
        return None

    model.nothing.forward = nothing_forward  # type: ignore[method-assign]
    model.forward = lambda x: (model.multi(x), model.nothing(x))[0][0]  # type: ignore[method-assign]
    with ActivationRecorder(model, ["multi", "nothing"]) as recorder:
        model(torch.ones(1, 2))
    assert list(recorder) == ["multi[0]", "multi[1][a]"]
    assert torch.equal(recorder["multi[1][a]"], torch.full((1, 2), 2.0))
    assert [s.key for s in recorder.skipped] == ["nothing"]
    assert "NoneType" in recorder.skipped[0].reason


def test_shapes_only_on_the_meta_device() -> None:
    from torchvision.models import resnet18

    with torch.device("meta"):
        model = resnet18()
    with ActivationRecorder(model, ["layer1.0.relu", "fc"], keep_tensors=False) as rec:
        model(torch.empty(1, 3, 224, 224, device="meta"))
    assert [(c.key, c.shape) for c in rec.captures] == [
        ("layer1.0.relu", (1, 64, 56, 56)),
        ("layer1.0.relu:2", (1, 64, 56, 56)),
        ("fc", (1, 1000)),
    ]
    with pytest.raises(KeyError):
        rec["fc"]


def test_never_called_modules_are_reported(tiny_net: nn.Module) -> None:
    tiny_net.unused = nn.Conv2d(1, 1, 1)
    with ActivationRecorder(tiny_net, ["unused", "head"]) as rec:
        tiny_net(torch.randn(1, 3, 8, 8))
    assert rec.never_called() == ["unused"]


def test_unknown_module_and_empty_selector(tiny_net: nn.Module) -> None:
    with pytest.raises(ModelError, match="no module named nope"):
        ActivationRecorder(tiny_net, ["nope"]).__enter__()
    with pytest.raises(LayerSelectionError, match="close"):
        actviz.capture(tiny_net, "stem.con")


def test_scripted_and_compiled_models_are_refused(tiny_net: nn.Module) -> None:
    with warnings.catch_warnings():  # torch.jit.script is deprecated in newer torch
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(nn.Sequential(nn.Conv2d(3, 3, 1)))
    with pytest.raises(ModelError, match="TorchScript"):
        ActivationRecorder(scripted, ["0"]).__enter__()
    fake_compiled = nn.Sequential(nn.ReLU())
    fake_compiled._orig_mod = nn.ReLU()  # what torch.compile's wrapper carries
    with pytest.raises(ModelError, match="torch.compile"):
        ActivationRecorder(fake_compiled, ["0"]).__enter__()


def test_eval_mode_restores_each_module_flag(tiny_net: nn.Module) -> None:
    tiny_net.train()
    tiny_net.stem.bn.eval()
    with eval_mode(tiny_net):
        assert not any(m.training for m in tiny_net.modules())
    assert tiny_net.training and tiny_net.block.training
    assert not tiny_net.stem.bn.training


def test_capture_inputs_through_pre_hooks(tiny_net: nn.Module) -> None:
    x = torch.randn(1, 3, 8, 8)
    with ActivationRecorder(tiny_net, ["stem.bn", "stem.relu"], mode="both") as acts:
        tiny_net(x)
    assert list(acts) == ["stem.bn<in>", "stem.bn", "stem.relu<in>", "stem.relu"]
    # The in-place ReLU's input was copied before the ReLU overwrote it.
    assert torch.equal(acts["stem.relu<in>"], acts["stem.bn"])
    assert acts["stem.relu<in>"].min() < 0 <= acts["stem.relu"].min()
    assert acts.calls("stem.relu") == 1
    kinds = {c.key: c.kind for c in acts.captures}
    assert kinds["stem.bn<in>"] == "input" and kinds["stem.bn"] == "output"


def test_input_only_counts_repeated_calls(tiny_net: nn.Module) -> None:
    with ActivationRecorder(tiny_net, ["act"], mode="input") as acts:
        tiny_net(torch.randn(1, 3, 8, 8))
    assert list(acts) == ["act<in>", "act:2<in>"]
    assert acts["act<in>"].shape[1] == 4 and acts["act:2<in>"].shape[1] == 6
    with pytest.raises(ActvizError, match="capture mode"):
        ActivationRecorder(tiny_net, ["act"], mode="weights")  # type: ignore[arg-type]


def test_channels_last_captures_come_back_contiguous(tiny_net: nn.Module) -> None:
    model = tiny_net.to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    with ActivationRecorder(model, ["stem.conv"]) as acts:
        model(x)
    assert acts["stem.conv"].is_contiguous()


# --------------------------------------------------------------------------- the hook core


class _Shapes(HookSession):
    """The smallest recorder on the core: each call's output shape, and which gradients ran."""

    def __init__(self, model: nn.Module, layers: list[str], *, eval_mode: bool = False) -> None:
        super().__init__(model, layers, eval_mode=eval_mode)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.outputs: list[torch.Tensor] = []
        self.grads: list[str] = []

    def _start_record(self) -> None:
        super()._start_record()
        self.shapes = {}

    def _register(self, name: str, module: nn.Module) -> None:
        def hook(_module: nn.Module, _args: object, output: torch.Tensor) -> None:
            _, key = self._next_call(name)
            self.shapes[key] = tuple(output.shape)
            self.outputs.append(output)
            self._add_tensor_hook(output, lambda _grad: self.grads.append(key))

        self._add_forward_hook(module, hook)


class _FailsOnHead(_Shapes):
    state_at_failure: tuple[int, list[bool]] = (0, [])

    def _register(self, name: str, module: nn.Module) -> None:
        if name == "head":
            self.state_at_failure = (
                _hook_count(self.model),
                [m.training for m in self.model.modules()],
            )
            raise RuntimeError("cannot hook head")
        super()._register(name, module)


def _flags(model: nn.Module) -> dict[str, bool]:
    return {name: m.training for name, m in model.named_modules()}


def test_a_tiny_subclass_names_counts_and_hooks_gradients(tiny_net: nn.Module) -> None:
    x = torch.randn(2, 3, 8, 8)
    with _Shapes(tiny_net, ["act", "head", "pool"]) as rec:
        out = tiny_net(x)
        assert list(rec.shapes.items()) == [
            ("act", (2, 4, 8, 8)),
            ("act:2", (2, 6, 8, 8)),
            ("pool", (2, 6, 1, 1)),
            ("head", (2, 3)),
        ]
        assert (rec.calls("act"), rec.calls("head"), rec.calls("stem.conv")) == (2, 1, 0)
        assert rec.never_called() == [] and rec.skipped == []
        out.sum().backward(retain_graph=True)
        assert rec.grads == ["head", "pool", "act:2", "act"]  # backward runs from the end
        # A new forward starts a fresh record and drops the previous forward's tensor hooks.
        tiny_net(x[:1])
        assert list(rec.shapes) == ["act", "act:2", "pool", "head"]
        assert rec.shapes["head"] == (1, 3)
        out.sum().backward()
        assert rec.grads == ["head", "pool", "act:2", "act"]
    assert _hook_count(tiny_net) == 0


def test_registration_failing_part_way_removes_hooks_and_restores_flags(
    tiny_net: nn.Module,
) -> None:
    tiny_net.train()
    tiny_net.get_submodule("stem.bn").eval()
    flags = _flags(tiny_net)
    rec = _FailsOnHead(tiny_net, ["stem.conv", "act", "head"], eval_mode=True)
    with pytest.raises(RuntimeError, match="cannot hook head"), rec:
        pass
    # The root's hook and two layers' hooks were in place, in eval mode, when it failed.
    hooks, training = rec.state_at_failure
    assert hooks == 3 and not any(training)
    assert _hook_count(tiny_net) == 0
    assert _flags(tiny_net) == flags


def test_forward_raising_removes_tensor_hooks_too_and_restores_flags(
    tiny_net: nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom in pool")

    monkeypatch.setattr(tiny_net.get_submodule("pool"), "forward", boom)
    tiny_net.train()
    tiny_net.get_submodule("block").eval()
    flags = _flags(tiny_net)
    rec = _Shapes(tiny_net, ["act", "head"], eval_mode=True)
    with pytest.raises(RuntimeError, match="boom in pool"), rec:
        assert not any(m.training for m in tiny_net.modules())
        tiny_net(torch.randn(1, 3, 8, 8))
    assert list(rec.shapes) == ["act", "act:2"]  # both calls ran before pool raised
    assert rec.never_called() == ["head"]
    assert _hook_count(tiny_net) == 0
    assert _flags(tiny_net) == flags
    rec.outputs[1].sum().backward()
    assert rec.grads == []  # the gradient hook went with the forward hooks


def test_activation_recorder_leaves_training_flags_alone(tiny_net: nn.Module) -> None:
    tiny_net.train()
    tiny_net.get_submodule("stem.bn").eval()
    flags = _flags(tiny_net)
    with ActivationRecorder(tiny_net, ["act"]) as acts:
        assert _flags(tiny_net) == flags
        tiny_net(torch.randn(2, 3, 8, 8))
    assert _flags(tiny_net) == flags
    assert list(acts) == ["act", "act:2"]


class _Sequences(nn.Module):
    """Outputs whose first dimension is not the batch: an LSTM's (layers, B, H) state, a
    sequence-first LSTM, a module given a tuple, and rows of every image's points at once."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.seq_first = nn.LSTM(6, 5)
        self.pair = _Pair()
        self.rows = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)  # (B, T, 6)
        seq, _ = self.seq_first(out.transpose(0, 1))  # (T, B, 5)
        joined = self.pair((seq, seq.flip(0)))
        return self.rows(joined.reshape(-1, 5)).reshape(x.shape[0], -1).sum(1)


class _Pair(nn.Module):
    def forward(self, both: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return both[0] + both[1]


def _plain_hooks(model: nn.Module, names: list[str], x: torch.Tensor) -> dict[str, object]:
    """What plain forward hooks see (each output cloned), by module name."""
    seen: dict[str, object] = {}

    def clone(value: object) -> object:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        return type(value)(clone(v) for v in value)  # type: ignore[call-arg, attr-defined]

    modules = dict(model.named_modules())
    handles = [
        modules[n].register_forward_hook(lambda _m, _i, out, n=n: seen.__setitem__(n, clone(out)))
        for n in names
    ]
    with torch.inference_mode():
        model(x)
    for handle in handles:
        handle.remove()
    return seen


def test_capture_hands_back_what_a_plain_hook_saw() -> None:
    """An LSTM's ``(layers, B, H)`` state, a sequence-first output, a tuple argument and rows
    of every image's points come back whole, bit for bit, where they were emptied to
    ``(B, 0)``; the capture says where its rows are not the images."""
    torch.manual_seed(0)
    model = _Sequences().eval()
    x = torch.randn(3, 7, 4)
    plain = _plain_hooks(model, ["lstm", "seq_first", "pair", "rows"], x)
    with actviz.capture(model, "lstm,seq_first,pair,rows") as acts, torch.inference_mode():
        model(x)
    out, (h, c) = plain["lstm"]  # type: ignore[misc]
    assert h.shape == (2, 3, 6)
    expected = {
        "lstm[0]": out,
        "lstm[1][0]": h,
        "lstm[1][1]": c,
        "seq_first[0]": plain["seq_first"][0],  # type: ignore[index]
        "seq_first[1][0]": plain["seq_first"][1][0],  # type: ignore[index]
        "seq_first[1][1]": plain["seq_first"][1][1],  # type: ignore[index]
        "pair": plain["pair"],
        "rows": plain["rows"],
    }
    assert list(acts) == list(expected)
    for key, tensor in expected.items():
        assert torch.equal(acts[key], tensor), key  # type: ignore[arg-type]
    refused = {cap.key: cap.refused for cap in acts.captures}
    assert refused["lstm[0]"] is None and refused["rows"] is not None
    assert "cannot be attributed to images" in (refused["lstm[1][0]"] or "")
    assert "(2 rows of (3, 6))" in (refused["lstm[1][0]"] or "")


def test_drawing_a_raw_capture_says_which_rows_are_not_images() -> None:
    """Drawing one image keeps its per-image policy: a run's recorder (per_image=True) keeps
    an unattributable output empty with the reason, and the browser on a raw capture says
    the reason rather than draw another tensor's first row as the image."""
    from actviz.notebook.browser import LiveData

    torch.manual_seed(0)
    model = _Sequences().eval()
    x = torch.randn(3, 7, 4)
    with ActivationRecorder(model, ["lstm"], per_image=True) as drawn, torch.inference_mode():
        model(x)
    state = {c.key: c for c in drawn.captures}["lstm[1][0]"]
    assert state.tensor is not None and state.tensor.shape == (3, 0)
    assert state.shape == (2, 3, 6) and state.refused is not None
    with actviz.capture(model, "lstm") as acts, torch.inference_mode():
        model(x)
    strips, why = LiveData(acts, None).channels("lstm[1][0]")
    assert strips == [] and "does not follow the images of the batch" in why
