"""The user's own models: factories in files and packages, every error, awkward outputs."""

from __future__ import annotations

import json
import sys
import textwrap
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from actviz.cli import app
from actviz.errors import ModelError, UsageError
from actviz.hooks import ActivationRecorder, layer_refs
from actviz.layouts import default_selector, layer_contexts, to_drawable
from actviz.models.factories import (
    build_user_model,
    is_factory_spec,
    load_factory,
    parse_factory_spec,
)
from actviz.selectors import select_layers
from tests.conftest import run_images

runner = CliRunner()

TINY = """
    import torch
    from torch import nn

    from {helper} import WIDTH, double


    class Tiny(nn.Module):
        def __init__(self, width: int = WIDTH) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, width, 3, padding=1)

        def forward(self, x):
            return double(self.conv(x))

        @classmethod
        def build(cls, width: int = 2):
            return cls(width)


    def build(width: int = WIDTH):
        return Tiny(width)


    def lazy():
        import {helper} as h  # imported when the factory runs, not when the file is loaded

        return Tiny(h.WIDTH + 1)


    instance = Tiny(5)
    not_callable = 42
"""


@pytest.fixture(autouse=True)
def _isolated_imports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Forget the modules a test imported from its files, and check sys.path is unchanged."""
    modules = set(sys.modules)
    path = list(sys.path)
    yield
    root = str(tmp_path_factory.getbasetemp())
    for name in set(sys.modules) - modules:
        # Only the user's modules: torch imports some of its own lazily, for good.
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(root):
            del sys.modules[name]
    assert sys.path == path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def tiny_file(tmp_path: Path) -> Path:
    """nets/tiny.py, which imports its sibling nets/tiny_helpers.py."""
    write(tmp_path / "nets" / "tiny_helpers.py", "WIDTH = 4\n\ndef double(x):\n    return 2 * x\n")
    return write(tmp_path / "nets" / "tiny.py", TINY.format(helper="tiny_helpers"))


# --------------------------------------------------------------------------------------------
# Specs


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("resnet34", False),
        ("vit_b_16", False),
        ("pkg.models:build", True),
        ("nets/tiny.py:build", True),
        ("nets/tiny.py", True),
        (r"C:\nets\tiny.py:build", True),
        ("tiny.py:Net.build", True),
    ],
)
def test_is_factory_spec(model: str, expected: bool) -> None:
    assert is_factory_spec(model) is expected


def test_split_uses_the_last_colon_so_windows_paths_work() -> None:
    windows = parse_factory_spec(r"C:\nets\tiny.py:Net.build")
    assert (windows.target, windows.attribute) == (r"C:\nets\tiny.py", "Net.build")
    spaced = parse_factory_spec(" pkg.models:build ")
    assert (spaced.target, spaced.attribute) == ("pkg.models", "build")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("nets/tiny.py", "'nets/tiny.py' names no factory; write MODULE:FACTORY, e.g. nets/"),
        ("pkg.models:", "names no factory"),
        (":build", "names no factory"),
        ("nets/tiny.py:1build", "'1build' in 'nets/tiny.py:1build' is not a Python name"),
        ("nets/tiny.py:build-x", "is not a Python name"),
        ("nets/tiny.py:build(width=3+1)", "argument width=3+1 in"),
        ("nets/tiny.py:build(open('x'))", "argument open('x') in"),
        ("nets/tiny.py:build(*sizes)", "argument *sizes in"),
        ("nets/tiny.py:build(**opts)", "argument **opts in"),
        ("nets/tiny.py:build(width=)", "cannot read the arguments (width=)"),
        ("not a module:build", "is neither a Python module path"),
    ],
)
def test_malformed_specs_are_usage_errors(spec: str, words: str) -> None:
    with pytest.raises(UsageError) as info:
        load_factory(spec)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("nets/tiny.py:build()", ("nets/tiny.py", "build", (), {})),
        ("nets/tiny.py:build(width=32)", ("nets/tiny.py", "build", (), {"width": 32})),
        ("pkg.mod:build(3, depth=2)", ("pkg.mod", "build", (3,), {"depth": 2})),
        (
            r"C:\nets\tiny.py:Net.build('a:b', sizes=(1, 2), opts={'x': None}, neg=-1.5)",
            (
                r"C:\nets\tiny.py",
                "Net.build",
                ("a:b",),
                {"sizes": (1, 2), "opts": {"x": None}, "neg": -1.5},
            ),
        ),
    ],
)
def test_factory_arguments_are_literals(spec: str, parsed: tuple[object, ...]) -> None:
    got = parse_factory_spec(spec)
    assert (got.target, got.attribute, got.args, got.kwargs) == parsed


def test_a_non_literal_argument_is_never_evaluated(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    spec = f"nets/tiny.py:build(__import__('pathlib').Path({str(marker)!r}).touch())"
    with pytest.raises(UsageError, match="is not a literal"):
        parse_factory_spec(spec)
    assert not marker.exists()


def test_factory_arguments_reach_the_factory(tiny_file: Path) -> None:
    assert width(load_factory(f"{tiny_file}:build(width=7)")()) == 7
    assert width(load_factory(f"{tiny_file}:Tiny(3)")()) == 3
    assert width(build_user_model(f"{tiny_file}:Tiny.build(width=9)")) == 9
    # Keywords given in Python are added to the spec's own.
    assert width(build_user_model(f"{tiny_file}:Tiny.build()", width=6)) == 6


def test_arguments_that_do_not_fit_the_signature_are_usage_errors(tiny_file: Path) -> None:
    with pytest.raises(UsageError) as info:
        load_factory(f"{tiny_file}:build(widht=7)")
    message = str(info.value)
    assert "unexpected keyword argument 'widht'" in message
    assert "build(width: int = 4)" in message and "\n" not in message
    with pytest.raises(UsageError, match="takes no arguments"):
        load_factory(f"{tiny_file}:instance(3)")()


# --------------------------------------------------------------------------------------------
# Loading


def width(model: nn.Module, conv: str = "conv") -> int:
    layer = model.get_submodule(conv)
    assert isinstance(layer, nn.Conv2d)
    return layer.out_channels


def test_factory_file_with_a_sibling_import(tiny_file: Path) -> None:
    model = build_user_model(f"{tiny_file}:build")
    assert isinstance(model, nn.Module) and width(model) == 4
    out = model(torch.ones(1, 3, 4, 4))
    assert out.shape == (1, 4, 4, 4)
    # Bytecode caches are not left beside the user's files.
    assert not (tiny_file.parent / "__pycache__").exists()
    # The folder was searchable only while importing (checked by the autouse fixture).
    assert str(tiny_file.parent) not in sys.path


def test_factory_kwargs_classes_dotted_paths_and_instances(tiny_file: Path) -> None:
    assert width(build_user_model(f"{tiny_file}:build", width=7)) == 7
    assert width(build_user_model(f"{tiny_file}:Tiny")) == 4
    assert width(build_user_model(f"{tiny_file}:Tiny", width=3)) == 3
    assert width(build_user_model(f"{tiny_file}:Tiny.build")) == 2
    # A module instance is handed back as it is, not called.
    factory = load_factory(f"{tiny_file}:instance")
    assert width(factory()) == 5 and factory() is factory()
    with pytest.raises(UsageError, match="is a module instance and takes no arguments"):
        factory(width=3)


def test_a_factory_may_import_siblings_when_it_runs(tiny_file: Path) -> None:
    factory = load_factory(f"{tiny_file}:lazy")
    sys.modules.pop("tiny_helpers", None)  # make the factory's own import find the file
    assert width(factory()) == 5


def test_two_files_with_the_same_name_do_not_clash(tmp_path: Path) -> None:
    a = write(tmp_path / "a" / "model.py", "from torch import nn\nbuild = lambda: nn.ReLU()\n")
    b = write(tmp_path / "b" / "model.py", "from torch import nn\nbuild = lambda: nn.Tanh()\n")
    assert isinstance(build_user_model(f"{a}:build"), nn.ReLU)
    assert isinstance(build_user_model(f"{b}:build"), nn.Tanh)


def test_package_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "userpkg_a" / "__init__.py", "")
    write(tmp_path / "userpkg_a" / "layers.py", "from torch import nn\nWIDTH = 6\n")
    write(
        tmp_path / "userpkg_a" / "models.py",
        """
        from torch import nn

        from userpkg_a.layers import WIDTH


        class Zoo:
            @staticmethod
            def small(width: int = WIDTH):
                return nn.Sequential(nn.Conv2d(3, width, 1), nn.ReLU())
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = build_user_model("userpkg_a.models:Zoo.small")
    assert isinstance(model, nn.Sequential) and width(model, "0") == 6
    assert width(build_user_model("userpkg_a.models:Zoo.small", width=2), "0") == 2


def test_package_in_the_current_folder_imports_like_python_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "userpkg_b" / "__init__.py", "")
    write(tmp_path / "userpkg_b" / "nets.py", "from torch import nn\nbuild = nn.Identity\n")
    monkeypatch.chdir(tmp_path)
    assert isinstance(build_user_model("userpkg_b.nets:build"), nn.Identity)


# --------------------------------------------------------------------------------------------
# Errors: one line each, naming the fix


def error_of(spec: str, kind: type[Exception]) -> str:
    with pytest.raises(kind) as info:
        build_user_model(spec)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    message = error_of(f"{tmp_path}/nope.py:build", UsageError)
    assert message == f"model file {tmp_path}/nope.py does not exist; check the path before the ':'"
    folder = write(tmp_path / "pkg.py" / "x.txt", "").parent
    assert "is a folder, not a .py file" in error_of(f"{folder}:build", UsageError)


def test_module_not_importable() -> None:
    message = error_of("no_such_pkg_q7.models:build", ModelError)
    assert message.startswith(
        "cannot import no_such_pkg_q7.models: No module named 'no_such_pkg_q7'"
    )
    assert "run from the folder that holds it" in message


def test_a_missing_dependency_inside_the_users_file(tmp_path: Path) -> None:
    net = write(tmp_path / "net.py", "import no_such_dep_q7\n")
    before = {m for m in sys.modules if m.startswith("actviz_user_net_")}
    message = error_of(f"{net}:build", ModelError)
    assert message == f"cannot import {net}: ModuleNotFoundError: No module named 'no_such_dep_q7'"
    # Other tests' files called net.py may be loaded; this one is not left half-imported.
    assert {m for m in sys.modules if m.startswith("actviz_user_net_")} == before


def test_a_syntax_error_in_the_users_file(tmp_path: Path) -> None:
    net = write(tmp_path / "net.py", "def build(:\n    pass\n")
    message = error_of(f"{net}:build", ModelError)
    assert message.startswith(f"cannot import {net}: SyntaxError:")


def test_missing_attribute_lists_close_names(tiny_file: Path) -> None:
    message = error_of(f"{tiny_file}:buidl", UsageError)
    assert message == f"{tiny_file} has no attribute 'buidl'; close: build"
    message = error_of(f"{tiny_file}:Tiny.bulid", UsageError)
    assert message.startswith(f"{tiny_file}.Tiny has no attribute 'bulid'; close: build")
    message = error_of(f"{tiny_file}:zzz", UsageError)
    assert "has no attribute 'zzz'; it has: " in message and "build" in message


def test_an_attribute_that_is_not_callable(tiny_file: Path) -> None:
    message = error_of(f"{tiny_file}:not_callable", UsageError)
    assert message.startswith(f"{tiny_file}:not_callable is a int, not a function")


def test_a_factory_that_raises(tmp_path: Path) -> None:
    net = write(
        tmp_path / "net.py", "def build():\n    raise ValueError('width must be even\\nsee docs')\n"
    )
    message = error_of(f"{net}:build", ModelError)
    assert message == (
        f"factory {net}:build raised ValueError: width must be even; "
        "fix the factory or call it yourself to see the traceback"
    )
    with pytest.raises(ModelError, match="raised TypeError"):
        build_user_model(f"{net}:build", unexpected=1)


def test_a_factory_returning_something_else(tmp_path: Path) -> None:
    net = write(tmp_path / "net.py", "def build():\n    return {'model': None}\n")
    assert error_of(f"{net}:build", ModelError) == (
        f"factory {net}:build returned dict, not a torch.nn.Module; "
        "make it return the model instance"
    )


def test_scripted_and_compiled_models_are_refused(tmp_path: Path) -> None:
    net = write(
        tmp_path / "net.py",
        """
        import torch
        from torch import nn

        def scripted():
            return torch.jit.script(nn.Sequential(nn.Conv2d(3, 2, 1), nn.ReLU()))

        def compiled():
            return torch.compile(nn.Conv2d(3, 2, 1))
        """,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # newer torch deprecates torch.jit.script
        assert "TorchScript" in error_of(f"{net}:scripted", ModelError)
    assert "torch.compile'd" in error_of(f"{net}:compiled", ModelError)


# --------------------------------------------------------------------------------------------
# A custom model with awkward module names and outputs

AWKWARD = '''
    from collections import namedtuple

    import torch
    from torch import nn

    Pair = namedtuple("Pair", ["features", "score"])


    class TupleOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 6, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            return y, y.mean(dim=(2, 3)), None


    class DictOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(8, 5)

        def forward(self, x):
            return {"map": torch.relu(x), "logits": self.head(x.mean(dim=(2, 3))),
                    "mask": x.argmax(dim=1)}


    class NamedOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 3, 1)

        def forward(self, x):
            y = self.conv(x)
            return Pair(y, y.amax(dim=(1, 2, 3)))


    class ChannelsLast(nn.Module):
        """Works on (N, H, W, C) with a permute in forward, as Swin and ConvNeXt do."""

        def __init__(self, dim):
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.fc = nn.Linear(dim, 12)

        def forward(self, x):
            return self.fc(self.norm(x.permute(0, 2, 3, 1)))


    class Tokens(nn.Module):
        """A ViT-like block: 4 x 4 patches and a class token."""

        def __init__(self):
            super().__init__()
            self.cls_token = nn.Parameter(torch.zeros(1, 1, 16))
            self.conv_proj = nn.Conv2d(8, 16, 4, stride=4)
            self.mix = nn.Linear(16, 16)

        def forward(self, x):
            t = self.conv_proj(x).flatten(2).transpose(1, 2)
            t = torch.cat([self.cls_token.expand(len(t), -1, -1), t], dim=1)
            return self.mix(t)


    class Awkward(nn.Module):
        def __init__(self):
            super().__init__()
            self.stages = nn.ModuleDict({
                "stem-conv 1": nn.Conv2d(3, 8, 3, padding=1),
                "tuple:out": TupleOut(),
                "dict[x]": DictOut(),
                "named": NamedOut(),
                "nhwc block": ChannelsLast(8),
                "tokens-\\u00e9": Tokens(),
            })

        def forward(self, x):
            x = self.stages["stem-conv 1"](x)
            self.stages["tuple:out"](x)
            self.stages["dict[x]"](x)
            self.stages["named"](x)
            self.stages["nhwc block"](x)
            return self.stages["tokens-\\u00e9"](x)


    def build():
        torch.manual_seed(0)
        return Awkward()
'''


def test_awkward_outputs_each_become_the_right_drawable(tmp_path: Path) -> None:
    net = write(tmp_path / "awkward.py", AWKWARD)
    model = build_user_model(f"{net}:build").eval()
    names = [r.name for r in layer_refs(model)]
    # nn.Module forbids '.' in names but allows dashes, spaces, ':', '[', non-ASCII.
    assert "stages.stem-conv 1" in names and "stages.tuple:out" in names
    assert "stages.tokens-é" in names
    chosen = [n for n in names if n.count(".") == 1] + ["stages.nhwc block.norm"]
    contexts = layer_contexts(model, (16, 16))
    with ActivationRecorder(model, chosen) as acts, torch.inference_mode():
        model(torch.randn(2, 3, 16, 16))
    got = {}
    for cap in acts.captures:
        assert cap.tensor is not None
        d = to_drawable(cap.tensor[1], contexts[cap.module])
        got[cap.key] = (d.kind, d.layout, d.drawn_shape)
    assert got == {
        "stages.stem-conv 1": ("maps", "nchw", (8, 16, 16)),
        "stages.tuple:out[0]": ("maps", "nchw", (6, 16, 16)),
        "stages.tuple:out[1]": ("vector", "vector", (6,)),
        "stages.dict[x][map]": ("maps", "nchw", (8, 16, 16)),
        "stages.dict[x][logits]": ("vector", "vector", (5,)),
        # argmax over channels: (H, W) indices, cast to float by the hook; the module's
        # channels (5) say it is not a token sequence.
        "stages.dict[x][mask]": ("none", "none", None),
        "stages.named[features]": ("maps", "nchw", (3, 16, 16)),
        "stages.named[score]": ("none", "none", None),  # one number per image
        "stages.nhwc block.norm": ("maps", "nhwc", (8, 16, 16)),
        "stages.nhwc block": ("maps", "nhwc", (12, 16, 16)),
        "stages.tokens-é": ("maps", "tokens", (16, 4, 4)),
    }
    tokens = to_drawable(acts["stages.tokens-é"][0], contexts["stages.tokens-é"])
    assert tokens.note == "class token dropped; 16 patch tokens as 4 x 4"
    # The patch grid came from the block's own conv_proj, not from a guess.
    assert contexts["stages.tokens-é"].token_grid == (4, 4)
    assert not any(m._forward_hooks for m in model.modules())
    # The default selector on a custom CNN-like model is its convolutions.
    assert default_selector(model) == "conv"
    assert len(select_layers(layer_refs(model), "conv")) == 4


# --------------------------------------------------------------------------------------------
# The user's model from the command line: arguments, and checkpoints pickled in full

MYNET = """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self, width=8, depth=1):
            super().__init__()
            self.conv = nn.Conv2d(3, width, 3, padding=1)
            self.blocks = nn.Sequential(
                *[nn.Conv2d(width, width, 3, padding=1) for _ in range(depth)]
            )
            self.head = nn.Linear(width, 4)

        def forward(self, x):
            x = self.blocks(torch.relu(self.conv(x)))
            return self.head(x.mean(dim=(2, 3)))


    def build(width=8, depth=1):
        return Net(width, depth)
"""


@pytest.fixture
def mynet(tmp_path: Path) -> Path:
    return write(tmp_path / "nets" / "mynet.py", MYNET)


def _pickle_in_full(net_file: Path, out: Path, width: int) -> nn.Module:
    """torch.save(model) of a model whose classes live in ``mynet``, imported as ``mynet``,
    as the user's own training script would have it; ``mynet`` is forgotten afterwards."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mynet", net_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mynet"] = module
    try:
        spec.loader.exec_module(module)
        torch.manual_seed(11)
        model: nn.Module = module.build(width=width)
        torch.save(model, out)
    finally:
        del sys.modules["mynet"]
    return model


def test_a_full_pickle_loads_with_the_file_form_of_its_factory(
    mynet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actviz.errors import CheckpointError
    from actviz.models import load_model
    from tests.conftest import make_image

    full = tmp_path / "full.pt"
    saved = _pickle_in_full(mynet, full, width=6)
    monkeypatch.chdir(make_image(tmp_path / "elsewhere" / "cat.png").parent)  # not mynet's folder
    spec = f"{mynet}:build(width=6)"
    with pytest.raises(CheckpointError, match=r"full pickle .*mynet\.Net"):
        load_model(spec, weights=str(full), device="cpu")
    loaded = load_model(spec, weights=str(full), device="cpu", trust_checkpoint=True)
    assert loaded.weights.source == "checkpoint"
    assert torch.equal(loaded.module.get_parameter("conv.weight"), saved.conv.weight)
    assert "mynet" not in sys.modules  # registered only while unpickling

    result = runner.invoke(
        app,
        ["run", spec, "cat.png", "--weights", str(full), "--trust-checkpoint", "-o", "out"],
    )
    assert result.exit_code == 0, result.output
    assert "wrote 2 grids for 1 image(s)" in result.stdout

    # A different module already imported as `mynet` is never replaced.
    other = types.ModuleType("mynet")
    monkeypatch.setitem(sys.modules, "mynet", other)
    with pytest.raises(CheckpointError, match="cannot load trusted checkpoint"):
        load_model(spec, weights=str(full), device="cpu", trust_checkpoint=True)
    assert sys.modules["mynet"] is other


def test_a_full_pickle_naming_a_module_nowhere_to_be_found(tmp_path: Path, mynet: Path) -> None:
    full = tmp_path / "full.pt"
    _pickle_in_full(mynet, full, width=8)
    other = write(tmp_path / "other.py", MYNET)  # the same classes, under another name
    result = runner.invoke(
        app,
        ["list-layers", f"{other}:build"],
    )
    assert result.exit_code == 0
    image = tmp_path / "cat.png"
    from tests.conftest import make_image

    make_image(image)
    result = runner.invoke(
        app,
        [
            "run",
            f"{other}:build",
            str(image),
            "--weights",
            str(full),
            "--trust-checkpoint",
            "-o",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1
    message = result.stderr.strip()
    assert "\n" not in message
    assert "it needs the module 'mynet', which cannot be imported" in message
    assert "mynet.py:FACTORY" in message


def test_factory_arguments_from_the_command_line(mynet: Path, tmp_path: Path) -> None:
    from tests.conftest import make_image

    image = make_image(tmp_path / "cat.png")
    spec = f"{mynet}:build(5, depth=2)"
    listing = runner.invoke(app, ["list-layers", spec, "--json"])
    assert listing.exit_code == 0, listing.output
    rows = {row["name"]: row for row in json.loads(listing.stdout)["layers"]}
    assert rows["conv"]["shape"] == [1, 5, 224, 224] and "blocks.1" in rows

    out = tmp_path / "out"
    result = runner.invoke(app, ["run", spec, str(image), "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == spec
    assert [x["channels_total"] for x in run_images(out)[0]["layers"]] == [5, 5, 5]
    stats = runner.invoke(app, ["stats", spec, str(image), "-o", str(tmp_path / "s")])
    assert stats.exit_code == 0, stats.output

    bad = runner.invoke(
        app, ["run", f"{mynet}:build(width=2**5)", str(image), "-o", str(tmp_path / "new")]
    )
    assert bad.exit_code == 2
    assert bad.stderr.strip().count("\n") == 0
    assert "argument width=2**5 in" in bad.stderr and "is not a literal" in bad.stderr
    wrong = runner.invoke(app, ["list-layers", f"{mynet}:build(widht=3)"])
    assert wrong.exit_code == 2 and "unexpected keyword argument 'widht'" in wrong.stderr
