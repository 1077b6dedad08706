"""Video models: clips sampled from files written here, drawn as time strips, and equal to a
plain hook on the model under its own transform."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from actviz.cli import app
from actviz.errors import UsageError, VideoLoadError
from actviz.io.video import discover_clips, pick_frames, read_frames, read_pair, sample_times
from tests.conftest import make_image, run_images

VIDEO_FPS = 12
VIDEO_FRAMES = 24


def write_video(
    path: Path,
    frames: int = VIDEO_FRAMES,
    size: tuple[int, int] = (48, 40),
    step: int = 10,
    codec: str = "mpeg4",
) -> Path:
    """An mp4 whose frame i is flat grey at level step * i (a decoded frame says its index)."""
    import av

    width, height = size
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=VIDEO_FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            pixels = np.full((height, width, 3), step * i, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_gif(path: Path, frames: int = 10, duration_ms: int = 100) -> Path:
    """An animated GIF whose frame i is flat grey at level 20 * i."""
    pictures = [Image.new("RGB", (40, 32), (20 * i,) * 3) for i in range(frames)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=duration_ms)
    return path


def grey_levels(pictures: list[Image.Image]) -> list[int]:
    return [round(float(np.asarray(p).mean())) for p in pictures]


# ------------------------------------------------------------------------------- sampling


def test_sample_times_take_consecutive_frames_from_the_middle_or_spread_a_short_video() -> None:
    assert sample_times(2.0, 4, 10.0) == pytest.approx([0.8, 0.9, 1.0, 1.1])
    assert sample_times(0.3, 4, 10.0) == pytest.approx([0.0375, 0.1125, 0.1875, 0.2625])
    assert sample_times(None, 3, 10.0) == pytest.approx([0.0, 0.1, 0.2])


def test_pick_frames_holds_one_frame_and_stops_once_every_time_has_its_frame() -> None:
    seen = []

    def stream():  # type: ignore[no-untyped-def]
        for i in range(100):
            seen.append(i)
            yield i / 10, f"f{i}"

    picked = list(pick_frames(stream(), [0.25, 0.3, 0.31, 0.95]))
    assert picked == [(0, "f2"), (1, "f3"), (2, "f3"), (3, "f9")]
    assert seen[-1] == 10  # the stream is left at the first frame after the last time


def test_a_video_is_sampled_at_the_recipe_rate_from_its_middle(tmp_path: Path) -> None:
    video = write_video(tmp_path / "v.mp4")  # 2 s at 12 fps
    pictures = read_frames(video, 4, 15.0)
    times = sample_times(VIDEO_FRAMES / VIDEO_FPS, 4, 15.0)
    expected = [10 * int(t * VIDEO_FPS + 1e-9) for t in times]
    assert grey_levels(pictures) == pytest.approx(expected, abs=4)  # mpeg4 is lossy


def test_a_long_video_is_entered_at_a_key_frame_before_its_clip(tmp_path: Path) -> None:
    # 5 s, lossless (ffv1 in mkv): the clip starts at 2.4 s.
    video = write_video(tmp_path / "long.mkv", frames=60, step=4, codec="ffv1")
    times = sample_times(60 / VIDEO_FPS, 4, 15.0)
    assert times[0] > 1.0  # read after a seek, not decoded from the start
    expected = [4 * int(t * VIDEO_FPS + 1e-9) for t in times]
    assert grey_levels(read_frames(video, 4, 15.0)) == pytest.approx(expected, abs=1)


def test_an_animated_gif_is_sampled_by_its_frame_durations(tmp_path: Path) -> None:
    gif = write_gif(tmp_path / "a.gif")  # 10 frames of 0.1 s
    times = sample_times(1.0, 5, 10.0)  # consecutive from the middle: frames 2..6
    assert grey_levels(read_frames(gif, 5, 10.0)) == [20 * int(t * 10 + 1e-6) for t in times]


def test_an_optical_flow_pair_is_the_two_middle_frames(tmp_path: Path) -> None:
    # Of n frames, frames (n - 1) // 2 and the next: a frame's grey level says its index.
    for frames, step, name in ((24, 10, "v.mp4"), (2, 10, "two.mp4"), (64, 3, "v.mkv")):
        lossless = name.endswith(".mkv")  # ffv1: levels within 1; mpeg4 is lossy
        codec = "ffv1" if lossless else "mpeg4"
        video = write_video(tmp_path / name, frames=frames, step=step, codec=codec)
        middle = (frames - 1) // 2
        expected = [step * middle, step * (middle + 1)]
        levels = grey_levels(list(read_pair(video)))
        assert levels == pytest.approx(expected, abs=1 if lossless else 4)
    # 5 s, entered at a key frame before its middle (2.46 s): frames 29 and 30.
    long = write_video(tmp_path / "long.mkv", frames=60, step=4, codec="ffv1")
    assert grey_levels(list(read_pair(long))) == pytest.approx([116, 120], abs=1)
    for frames, durations in ((10, 100), (2, 40), (11, 0)):
        gif = write_gif(tmp_path / f"a{frames}.gif", frames=frames, duration_ms=durations)
        middle = (frames - 1) // 2
        assert grey_levels(list(read_pair(gif))) == [20 * middle, 20 * (middle + 1)]
    one = write_gif(tmp_path / "one.gif", frames=1)
    with pytest.raises(VideoLoadError, match="holds a single frame; a flow model needs two"):
        read_pair(one)


def test_discovery_finds_videos_animations_and_frame_folders(tmp_path: Path) -> None:
    write_video(tmp_path / "in" / "v.mp4", frames=3)
    write_gif(tmp_path / "in" / "sub" / "a.gif", frames=3)
    for i in range(3):
        make_image(tmp_path / "in" / "clip" / f"{i:03d}.png", size=(20, 16), seed=i)
    (tmp_path / "in" / "notes.txt").write_text("x")
    found = discover_clips([tmp_path / "in"])
    assert sorted(str(c.rel) for c in found.images) == ["clip", "sub/a.gif", "v.mp4"]
    assert [p.name for p, _ in found.skipped] == ["notes.txt"]
    with pytest.raises(UsageError, match="still image"):
        discover_clips([make_image(tmp_path / "x.png")])


def test_an_unreadable_video_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video" * 20)
    with pytest.raises(VideoLoadError) as caught:
        read_frames(bad, 4, 15.0)
    message = str(caught.value)
    assert message.startswith(f"cannot read video {bad}: not a readable video")
    assert "\n" not in message


# ------------------------------------------------------------------------ preprocessing


def test_clip_preprocessing_equals_the_weights_transforms() -> None:
    import torch
    from torchvision.models.video import R3D_18_Weights

    from actviz.models.clips import clip_preprocessing

    weights = R3D_18_Weights.DEFAULT
    prep = clip_preprocessing(weights)
    assert (prep.frames, prep.fps, prep.resize_hw, prep.crop_size) == (
        16,
        15.0,
        (128, 171),
        (112, 112),
    )
    rng = np.random.default_rng(0)
    frames = [Image.fromarray(rng.integers(0, 255, (90, 120, 3), dtype=np.uint8)) for _ in range(3)]
    ours = prep.normalize(torch.stack([prep.resized(f) for f in frames]))
    raw = torch.stack([torch.from_numpy(np.array(f)).permute(2, 0, 1) for f in frames])
    theirs = weights.transforms()(raw)
    assert ours.shape == theirs.shape == (3, 3, 112, 112)
    assert torch.allclose(ours, theirs, atol=1e-6)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_video_layer_equals_a_plain_hook_under_the_models_own_transform(tmp_path: Path) -> None:
    import av
    import torch
    from torchvision.transforms._presets import VideoClassification

    import actviz
    from actviz.models import load_model

    video = write_video(tmp_path / "in" / "v.mp4")
    out = tmp_path / "out"
    layers = ["stem.0", "layer2.0"]
    actviz.run(
        "r3d_18",
        video,
        weights="none",
        input_size=(32, 32),
        frames=4,
        out=out,
        layers=",".join(layers),
        save_tensors="npy",
        report=False,
    )
    manifest = json.loads((out / "manifest.json").read_text())
    prep = manifest["model_info"]["preprocessing"]
    assert manifest["model_info"]["family"] == "video"
    assert (prep["frames"], prep["fps"], prep["crop"], prep["resize"]) == (
        4,
        15.0,
        [32, 32],
        [37, 49],
    )
    assert prep["mean"] == pytest.approx([0.43216, 0.394666, 0.37645])

    # The oracle: every frame decoded here, the sampled ones picked by time, the preset.
    with av.open(str(video)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    times = sample_times(VIDEO_FRAMES / VIDEO_FPS, 4, 15.0)
    clip = np.stack([decoded[int(t * VIDEO_FPS + 1e-9)] for t in times])
    preset = VideoClassification(
        crop_size=(32, 32), resize_size=(37, 49), mean=prep["mean"], std=prep["std"]
    )
    x = preset(torch.from_numpy(clip).permute(0, 3, 1, 2))[None]
    model = load_model("r3d_18", weights="none").module
    seen: dict[str, torch.Tensor] = {}
    handles = [
        model.get_submodule(name).register_forward_hook(
            lambda _m, _a, out, name=name: seen.__setitem__(name, out.detach().clone())
        )
        for name in layers
    ]
    with torch.inference_mode():
        logits = model(x)
    for handle in handles:
        handle.remove()
    record = run_images(out)[0]
    by_name = {layer["name"]: layer for layer in record["layers"]}
    for name in layers:
        saved = np.load(out / by_name[name]["tensor"])
        assert saved.shape == tuple(seen[name].shape[1:])
        np.testing.assert_allclose(saved, seen[name][0].numpy(), atol=1e-4, rtol=1e-4)
        assert by_name[name]["layout"] == "ncthw"
    top = torch.softmax(logits[0], 0).topk(5)
    assert [p["index"] for p in record["predictions"]] == top.indices.tolist()
    assert record["predictions"][0]["label"] == manifest_label(int(top.indices[0]))


def manifest_label(index: int) -> str:
    from torchvision.models.video import R3D_18_Weights

    return str(R3D_18_Weights.DEFAULT.meta["categories"][index])


NET = """
from torch import nn


def build():
    return nn.Sequential(
        nn.Conv3d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
        nn.Linear(4, 5),
    )
"""


@pytest.mark.slow
def test_a_users_own_video_model_takes_clips_and_images_are_refused(tmp_path: Path) -> None:
    net = tmp_path / "net.py"
    net.write_text(NET)
    gif = write_gif(tmp_path / "in" / "a.gif", frames=6)
    out = tmp_path / "out"
    args = ["-w", "none", "--input-size", "24,24", "--frames", "3", "--no-report", "-q"]
    argv = ["run", f"{net}:build", str(gif), "-o", str(out), "--cam", "--grads", *args]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    layers = run_images(out)[0]["layers"]
    conv = layers[0]
    assert (conv["shape"], conv["layout"]) == ([1, 4, 3, 24, 24], "ncthw")
    strips = Image.open(out / conv["file"])
    assert strips.size[0] > strips.size[1] / 2  # 3 frames side by side, 4 channel rows
    cams = [layer["cam"] for layer in layers if layer["cam"]]
    assert cams == ["a/00_0_cam.png"]  # the Conv3d (the default selection), per frame
    assert Image.open(out / cams[0]).width >= 3 * 112  # one panel per frame
    assert conv["gradient_file"] == "a/00_0_grad.png"  # the gradient as time strips too

    image = make_image(tmp_path / "x.png")
    refused = CliRunner().invoke(
        app, ["run", f"{net}:build", str(image), "-o", str(tmp_path / "o2"), *args]
    )
    assert refused.exit_code == 2
    assert "still image; a video model takes a video file" in refused.output
    assert not (tmp_path / "o2").exists()


SHORT_NET = """
from torch import nn


def build():  # two temporal kernels of 3 without padding: clips of 5 frames or more
    return nn.Sequential(
        nn.Conv3d(3, 4, (3, 1, 1)), nn.Conv3d(4, 4, (3, 1, 1)), nn.AdaptiveAvgPool3d(1),
        nn.Flatten(), nn.Linear(4, 5),
    )
"""


def test_a_clip_too_short_for_the_model_is_named_before_the_run(tmp_path: Path) -> None:
    net = tmp_path / "net.py"
    net.write_text(SHORT_NET)
    gif = write_gif(tmp_path / "in" / "a.gif", frames=6)
    args = ["-w", "none", "--input-size", "24,24", "--no-report", "-q"]
    for frames, code in (("4", 2), ("5", 0)):
        out = tmp_path / f"out{frames}"
        argv = ["run", f"{net}:build", str(gif), "-o", str(out), "--frames", frames, *args]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == code, result.output
    assert result.exit_code == 0 and run_images(tmp_path / "out5")[0]["layers"]
    refused = CliRunner().invoke(
        app, ["run", f"{net}:build", str(gif), "-o", str(tmp_path / "o"), "--frames", "4", *args]
    )
    assert refused.stderr.strip() == (
        f"error: {net}:build takes clips of at least 5 frames; --frames 4 is too short: pass "
        "--frames 16 (its default) or leave it out"
    )
    assert "--input-size" not in refused.stderr and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_s3d_and_mvit_name_the_frames_they_take(tmp_path: Path) -> None:
    gif = write_gif(tmp_path / "a.gif", frames=6)
    said = {
        ("s3d", "4"): "s3d takes clips of at least 13 frames; --frames 4 is too short",
        ("mvit_v1_b", "4"): "mvit_v1_b takes clips of 15 to 16 frames; --frames 4 is too short",
        ("mvit_v1_b", "32"): "mvit_v1_b takes clips of 15 to 16 frames; --frames 32 is too long",
    }
    for (model, frames), message in said.items():
        out = tmp_path / f"{model}{frames}"
        argv = ["run", model, str(gif), "-w", "none", "--frames", frames, "-o", str(out)]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert message in result.stderr and not out.exists()


TINY_MVIT = """
from torchvision.models.video.mvit import MSBlockConfig, MViT


def build():  # torchvision's MViT, three blocks: 4 frames of 32 x 32 -> 2 x 8 x 8 tokens
    blocks = [
        MSBlockConfig(
            num_heads=1, input_channels=8, output_channels=8, kernel_q=[3, 3, 3],
            kernel_kv=[3, 3, 3], stride_q=[1, 1, 1], stride_kv=[1, 2, 2],
        )
        for _ in range(3)
    ]
    return MViT(
        spatial_size=(32, 32), temporal_size=4, block_setting=blocks, residual_pool=False,
        residual_with_cls_embed=True, rel_pos_embed=False, proj_after_attn=False,
        num_classes=5,
    )
"""


def test_mvits_default_cam_is_drawn_where_its_patch_tokens_reach_the_class_token(
    tmp_path: Path,
) -> None:
    net = tmp_path / "mvit.py"
    net.write_text(TINY_MVIT)
    gif = write_gif(tmp_path / "a.gif", frames=6)
    out = tmp_path / "out"
    args = ["-w", "none", "--input-size", "32,32", "--frames", "4", "--cam", "--no-report"]
    result = CliRunner().invoke(app, ["run", f"{net}:build", str(gif), "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    layers = {layer["name"]: layer for layer in run_images(out)[0]["layers"]}
    cams = [name for name, layer in layers.items() if layer["cam"]]
    # The last block's patch tokens get no gradient (the head reads the class token after
    # the last attention): the block before it is the default.
    assert cams == ["blocks.1[0]"]
    assert "all zero" not in result.stderr
    picture = np.asarray(Image.open(out / layers["blocks.1[0]"]["cam"]).convert("RGB"))
    # The map's panels are coloured (jet over the frames), not the grey of a zero map.
    spread = picture.astype(int).max(axis=-1) - picture.astype(int).min(axis=-1)
    assert (spread > 100).mean() > 0.05


def test_a_video_to_an_image_model_says_what_to_pass(tmp_path: Path) -> None:
    video = write_video(tmp_path / "v.mp4", frames=2)
    result = CliRunner().invoke(
        app, ["run", "resnet18", str(video), "-w", "none", "-o", str(tmp_path / "o"), "-q"]
    )
    assert result.exit_code == 2
    assert "v.mp4 is a video, and resnet18 takes images" in result.output
    assert not (tmp_path / "o").exists()


def test_an_animated_gif_to_an_image_model_is_drawn_from_its_first_frame(tmp_path: Path) -> None:
    import torch

    from actviz.models.registry import load_model

    # Named alone, and inside a folder of photos: its first frame is drawn, and said.
    gif = write_gif(tmp_path / "in" / "g3.gif", frames=3)
    write_gif(tmp_path / "in" / "g1.gif", frames=1)
    still_size = Image.open(gif).size
    out = tmp_path / "out"
    argv = ["run", "resnet18", "-w", "none", "-l", "conv1", "--save-tensors", "--no-report"]
    for named, folder in (([gif], out / "alone"), ([tmp_path / "in"], out / "folder")):
        result = CliRunner().invoke(app, [*argv, *map(str, named), "-o", str(folder)])
        assert result.exit_code == 0, result.output
        said = f"image {gif} is an animation of 3 frames: its first frame is drawn"
        assert said in result.stderr
        records = {Path(r["path"]).name: r for r in run_images(folder)}
        assert records["g3.gif"]["note"].startswith(said)
        if "g1.gif" in records:  # a GIF of one frame is an image like any other
            assert "animation" not in (records["g1.gif"]["note"] or "")
    # The first frame (black) is what the model saw: its conv1 map is the one of a black image.
    loaded = load_model("resnet18", weights="none", device="cpu")
    black = loaded.preprocess(Image.new("RGB", still_size)).unsqueeze(0)
    with torch.inference_mode():
        expected = loaded.module.conv1(black)[0].numpy()
    saved = np.load(next((out / "alone" / "g3").glob("*conv1.npy")))
    np.testing.assert_allclose(saved, expected, rtol=1e-5, atol=1e-5)


def test_a_model_says_it_is_a_video_model_with_an_attribute() -> None:
    from torch import nn

    from actviz.models.families import VIDEO, family_of

    net = nn.Sequential(nn.Linear(3, 3))
    assert family_of(net) is not VIDEO
    net.actviz_family = "video"  # type: ignore[assignment]
    assert family_of(net) is VIDEO
    assert family_of(nn.Sequential(nn.Conv3d(3, 2, 1), nn.Conv2d(2, 2, 1))) is VIDEO


def test_a_video_runs_summary_counts_clips(tmp_path: Path) -> None:
    net = tmp_path / "net.py"
    net.write_text(NET)
    write_gif(tmp_path / "in" / "a.gif", frames=4)
    (tmp_path / "in" / "notes.txt").write_text("not a video")
    out = tmp_path / "out"
    args = ["-w", "none", "--input-size", "16,16", "--frames", "2", "--no-report"]
    result = CliRunner().invoke(
        app, ["run", f"{net}:build", str(tmp_path / "in"), "-o", str(out), *args]
    )
    assert result.exit_code == 0, result.output
    assert run_images(out)[0]["layers"][0]["shape"] == [1, 4, 2, 16, 16]
    summary = result.stderr
    assert summary.startswith("clips ") and "clips/s" in summary
    assert "1 done" in summary and "1 non-video skipped" in summary
    assert "images/s" not in summary and "for 1 clip(s)" in result.stdout


def test_a_video_runs_progress_counts_clips(tmp_path: Path) -> None:
    import actviz

    net = tmp_path / "net.py"
    net.write_text(NET)
    for name in ("a", "b"):
        write_gif(tmp_path / "in" / f"{name}.gif", frames=4)

    class Old:
        """A reporter written before units were named: it keeps working."""

        total = 0

        def warn(self, message: str) -> None: ...

        def start(self, total: int) -> None:
            self.total = total

        def advance(self, result: object) -> None: ...

    class Units(Old):
        unit = ""

        def name_unit(self, unit: str) -> None:
            self.unit = unit

    seen = Units()
    actviz.run(
        f"{net}:build",
        tmp_path / "in",
        out=tmp_path / "out",
        reporter=seen,
        weights="none",
        input_size=(16, 16),
        frames=2,
        report=False,
    )
    assert (seen.unit, seen.total) == ("clips", 2)
    image = make_image(tmp_path / "x.png")
    plain, old = Units(), Old()
    actviz.run("resnet18", image, out=tmp_path / "o2", weights="none", reporter=plain)
    actviz.run("resnet18", image, out=tmp_path / "o3", weights="none", reporter=old)
    assert (plain.unit, plain.total, old.total) == ("images", 1, 1)
