"""Options that would do nothing are refused in one line, before any work; near-miss model
names get the spelling that loads; an empty cache, a log of garbage and a folder without its
image processor say so."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from actviz.cli import app
from actviz.errors import CheckpointError, UnknownModelError
from actviz.models.checkpoints import load_checkpoint
from actviz.models.registry import check_model_name
from tests.conftest import make_image


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _one_line_usage_error(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--cam"], "--cam"),
        (["--cam-classes", "3"], "--cam-classes"),
        (["--grads"], "--grads"),
        (["--overlay"], "--overlay"),
        (["--overlay-channel", "3"], "--overlay-channel"),
    ],
)
def test_pictures_asked_for_with_no_images_are_a_usage_error(
    tmp_path: Path, image_file: Path, flags: list[str], named: str
) -> None:
    out = tmp_path / "out"
    code, _, stderr = _invoke(
        "run", "resnet18", str(image_file), "-w", "none", "-o", str(out), "--no-images", *flags
    )
    _one_line_usage_error(code, stderr, named, "drop --no-images")
    assert not out.exists()  # refused before anything was written


@pytest.mark.slow
def test_overlay_channel_alone_draws_that_channels_overlay(
    tmp_path: Path, image_file: Path
) -> None:
    out = tmp_path / "out"
    code, _, stderr = _invoke(
        "run", "resnet18", str(image_file), "-w", "none", "-q", "-o", str(out),
        "-l", "layer4.1.conv2", "--overlay-channel", "3", "--no-report",
    )  # fmt: skip
    assert code == 0, stderr
    stem = image_file.stem
    assert (out / stem / "00_layer4.1.conv2_overlay.png").is_file()


def test_an_overlay_channel_past_every_containers_channels_is_refused_before_the_run(
    tmp_path: Path, image_file: Path
) -> None:
    """A container's channels are read from one forward of a blank input, as list-layers
    traces the model: a channel none of them has is refused before anything is written; one
    that only some have draws the others' overlays and names the rest."""

    def run(channel: int) -> tuple[int, str, Path]:
        out = tmp_path / str(channel)
        code, _, stderr = _invoke(
            "run", "resnet18", str(image_file), "-w", "none", "-q", "-o", str(out),
            "-l", "layer3,layer4", "--overlay-channel", str(channel), "--input-size", "64,64",
            "--no-report",
        )  # fmt: skip
        return code, stderr, out / image_file.stem

    code, stderr, folder = run(9999)
    _one_line_usage_error(
        code, stderr, "--overlay-channel 9999: the selected layers have at most 512 channels"
    )
    assert not folder.parent.exists()
    # A channel one of them has: its overlay, and the other one named.
    code, stderr, folder = run(300)
    assert code == 0, stderr
    assert (
        "warning: --overlay-channel 300: 1 of 2 layers drawn have no such channel and got no "
        "overlay (channels: layer3 256); pick one below 256 for an overlay of every layer"
    ) in stderr
    assert (folder / "01_layer4_overlay.png").is_file()
    assert not (folder / "00_layer3_overlay.png").exists()
    # One every layer has: nothing said.
    code, stderr, folder = run(255)
    assert code == 0 and "overlay" not in stderr, stderr
    assert (folder / "00_layer3_overlay.png").is_file()


@pytest.mark.parametrize("command", ["run", "stats"])
def test_inputs_without_images_are_a_usage_error_like_top_images(
    tmp_path: Path, command: str
) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "notes.txt").write_text("no picture here", encoding="utf-8")
    out = tmp_path / "out"
    code, stdout, stderr = _invoke(
        command, "resnet18", str(folder), "-w", "none", "-o", str(out), "--fail-on", "nan"
    )
    _one_line_usage_error(code, stderr, "no images found in", str(folder), ".jpg", ".png")
    assert "1 other file(s) skipped" in stderr
    assert stdout == "" and not out.exists()


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("vit_small_patch16_224", "did you mean timm/vit_small_patch16_224?"),
        ("timm:convnext_tiny", "did you mean timm/convnext_tiny?"),
        ("timm.resnet18", "did you mean timm/resnet18?"),
    ],
)
def test_a_name_of_another_source_gets_its_spelling(name: str, hint: str) -> None:
    pytest.importorskip("timm")
    with pytest.raises(UnknownModelError, match=hint.replace("?", r"\?")):
        check_model_name(name)
    code, _, stderr = _invoke("list-layers", name)
    _one_line_usage_error(code, stderr, hint)


def test_a_save_pretrained_folder_without_its_prefix_gets_hf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hf" / "vit").mkdir(parents=True)
    (tmp_path / "hf" / "vit" / "config.json").write_text("{}", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, _, stderr = _invoke("list-layers", "hf/vit")
    _one_line_usage_error(code, stderr, "did you mean hf:hf/vit?")


def test_model_help_names_every_source() -> None:
    for command in ("run", "stats", "list-layers", "top-images", "diff", "optimize"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        text = " ".join(result.stdout.split())
        assert "timm/NAME" in text and "hf:FOLDER_OR_ID" in text, command
    result = CliRunner().invoke(app, ["models", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.stdout.split())
    assert "timm (timm/NAME)" in text and "hf (hf:ID" in text


def test_an_empty_hugging_face_cache_says_so_and_how_to_fill_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    import huggingface_hub

    def empty() -> object:
        raise huggingface_hub.CacheNotFound("no cache", tmp_path)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(huggingface_hub, "scan_cache_dir", empty)
    code, stdout, stderr = _invoke("models", "--source", "hf")
    assert code == 1 and stdout == ""
    assert "None" not in stderr
    assert "Hugging Face cache" in stderr and "holds no models" in stderr
    assert "hf download" in stderr and "hf:FOLDER" in stderr


@pytest.mark.parametrize("key", ["model_state", "state_dict", "model", "module", "net", "ema_w"])
def test_a_state_dict_one_level_down_is_unwrapped(tmp_path: Path, key: str) -> None:
    state = torch.nn.Linear(2, 3).state_dict()
    path = tmp_path / "ck.pt"
    torch.save({key: state, "epoch": 3, "optimizer": {"lr": 0.1}}, path)
    loaded = load_checkpoint(path)
    assert set(loaded) == {"weight", "bias"}
    assert torch.equal(loaded["weight"], state["weight"])


def test_a_checkpoint_without_tensors_names_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "ck.pt"
    torch.save({"epoch": 3, "config": {"lr": 0.1}}, path)
    with pytest.raises(CheckpointError, match=r"holds no tensors, only the keys 'epoch', 'config'"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "content", ["garbage\nmore garbage\n", '{"other": "tool"}\n', "", "[1, 2]\n"]
)
def test_report_on_a_log_of_garbage_is_a_one_line_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "watch.jsonl").write_text(content, encoding="utf-8")
    code, stdout, stderr = _invoke("report", str(tmp_path))
    assert code == 1 and stdout == ""
    assert stderr.startswith("error: ") and len(stderr.strip().splitlines()) == 1
    assert "holds no actviz.watch records" in stderr
    assert not (tmp_path / "report.html").exists()


def test_a_hugging_face_folder_without_its_processor_warns_once(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=32,
        patch_size=8,
        num_labels=3,
    )
    transformers.ViTForImageClassification(config).save_pretrained(tmp_path / "bare")
    image = make_image(tmp_path / "a.png")
    out = tmp_path / "out"
    code, _, stderr = _invoke(
        "run", f"hf:{tmp_path / 'bare'}", str(image), "-o", str(out), "-q", "--no-report",
    )  # fmt: skip
    assert code == 0, stderr
    warned = [line for line in stderr.splitlines() if "preprocessor_config.json" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: "), stderr
    assert "ImageNet mean and std" in warned[0] and "centre crop to 32" in warned[0]


def test_pca_of_layers_without_positions_is_refused_before_anything_is_drawn(
    tmp_path: Path, image_file: Path
) -> None:
    out = tmp_path / "out"
    code, _, stderr = _invoke(
        "run", "resnet18", str(image_file), "-w", "none", "-q", "-o", str(out),
        "-l", "fc", "--view", "pca",
    )  # fmt: skip
    _one_line_usage_error(code, stderr, "--view pca", "fc:", "-l layer4")
    assert not out.exists()


def test_pca_says_which_selected_layer_it_could_not_colour(
    tmp_path: Path, image_file: Path
) -> None:
    out = tmp_path / "out"
    code, _, stderr = _invoke(
        "run", "resnet18", str(image_file), "-w", "none", "-o", str(out),
        "-l", "layer4.1.conv2,fc", "--view", "pca", "--no-report",
    )  # fmt: skip
    assert code == 0, stderr
    assert "--view pca: no PCA picture of fc:" in stderr
    assert (out / image_file.stem / "00_layer4.1.conv2_pca.png").is_file()
    assert not list((out / image_file.stem).glob("*fc_pca.png"))
