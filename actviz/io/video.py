"""Video input: a clip sampled from a video file, an animated GIF/WebP or a folder of frames.

A clip is ``frames`` frames taken at the model's frame rate from the middle of the video (or
spread evenly over a video shorter than that), each resized as soon as it is decoded: the
video is streamed, and only the sampled frames are ever kept. Video files are decoded with
PyAV (the ``video`` extra); animated GIF and WebP, and folders of frames, need only Pillow.
Every input that cannot be read is a ``VideoLoadError`` with a one-line reason.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from PIL import Image as PILImage

from actviz.errors import ImageLoadError, UsageError, VideoLoadError, first_line, import_extra
from actviz.io.images import ALLOWED_FORMATS, IMAGE_SUFFIXES, Discovery, ImageInput, load_rgb

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "ANIMATED_SUFFIXES",
    "VIDEO_SUFFIXES",
    "animation_note",
    "discover_pairs",
    "read_frames",
    "read_pair",
    "discover_clips",
    "is_clip_input",
    "sample_times",
]

#: Files PyAV decodes as videos.
VIDEO_SUFFIXES: frozenset[str] = frozenset(
    {".mp4", ".avi", ".webm", ".mkv", ".mov", ".m4v", ".mpg", ".mpeg", ".ogv"}
)
#: Image files that may hold an animation, decoded with Pillow.
ANIMATED_SUFFIXES: frozenset[str] = frozenset({".gif", ".webp"})
_INSTALL = "decoding a video file needs PyAV"


def sample_times(duration: float | None, frames: int, fps: float) -> list[float]:
    """The times (seconds) of the frames a clip takes: ``frames`` consecutive frames at
    ``fps`` from the middle of a video of ``duration`` seconds, or spread evenly over a video
    shorter than that (frames then repeat); from the start when the duration is unknown."""
    span = frames / fps
    if duration is None or duration <= 0:
        return [k / fps for k in range(frames)]
    if duration >= span:
        start = (duration - span) / 2
        return [start + k / fps for k in range(frames)]
    return [duration * (k + 0.5) / frames for k in range(frames)]


def pick_frames(
    stream: Iterable[tuple[float, Any]], times: Sequence[float]
) -> Iterator[tuple[int, Any]]:
    """For each time in ``times`` (ascending), the frame on screen then: ``(index of the
    time, frame)`` pairs, in order, from a stream of ``(time, frame)``; only the latest frame
    is held, and the stream is left as soon as every time has its frame."""
    held: Any = None
    k = 0
    for t, frame in stream:
        while k < len(times) and times[k] < t - 1e-6:  # float noise of summed durations
            yield k, held if held is not None else frame
            k += 1
        if k == len(times):
            return
        held = frame
    while held is not None and k < len(times):
        yield k, held
        k += 1


def read_frames(path: Path, frames: int, fps: float) -> list[Image.Image]:
    """The ``frames`` frames a clip of ``path`` takes, as RGB pictures.

    Raises:
        VideoLoadError: ``path`` is missing, not a video, damaged, or holds no frame.
        UsageError: A video file while PyAV (the ``video`` extra) is not installed.
    """
    if path.is_dir():
        return _folder_frames(path, frames)
    if not path.exists():
        raise VideoLoadError(str(path), "no such file")
    suffix = path.suffix.lower()
    if suffix in ANIMATED_SUFFIXES or suffix in IMAGE_SUFFIXES:
        return _animated_frames(path, frames, fps)
    return _av_frames(path, frames, fps)


def _take(stream: Iterable[tuple[float, Any]], times: Sequence[float], path: Path) -> list[Any]:
    picked = [frame for _, frame in pick_frames(stream, times)]
    if not picked:
        raise VideoLoadError(str(path), "the video holds no frame")
    return picked


def _animated_frames(path: Path, frames: int, fps: float) -> list[Image.Image]:
    with _animation(path) as (im, count):
        durations = []
        for index in range(count):  # reading durations seeks but decodes little
            im.seek(index)
            durations.append(max(float(im.info.get("duration", 0) or 0) / 1000, 0.0))
        if count == 1:
            raise VideoLoadError(
                str(path), "a still image, not a video; pass a video or an animation"
            )
        step = [d if d > 0 else 1 / fps for d in durations]
        starts = [sum(step[:i]) for i in range(count)]
        times = sample_times(sum(step), frames, fps)

        def stream() -> Iterator[tuple[float, Image.Image]]:
            for index, start in enumerate(starts):
                im.seek(index)
                yield start, im.convert("RGB")

        return _take(stream(), times, path)


@contextlib.contextmanager
def _animation(path: Path) -> Iterator[tuple[Any, int]]:
    """The animation (GIF, WebP, ...) opened, and its number of frames, for the block; what
    Pillow raises in it, as one :class:`VideoLoadError`."""
    try:
        with PILImage.open(path, formats=ALLOWED_FORMATS) as im:
            yield im, int(getattr(im, "n_frames", 1))
    except VideoLoadError:
        raise
    except (OSError, ValueError, EOFError, SyntaxError) as exc:
        raise VideoLoadError(
            str(path), f"cannot decode the animation ({first_line(exc)})"
        ) from None


def _av_frames(path: Path, frames: int, fps: float) -> list[Image.Image]:
    with _video_stream(path) as (container, stream, duration):
        times = sample_times(duration, frames, fps)
        # Jump to the key frame before the clip: a long video is not decoded from 0.
        _seek_before(container, stream, times[0])

        def decoded() -> Iterator[tuple[float, Any]]:
            for frame in container.decode(stream):
                t = frame.time if frame.time is not None else 0.0
                yield float(t), frame

        # Only the frames picked become pictures (once each, though a short video's
        # frames repeat): the others are decoded and let go.
        picked = _take(decoded(), times, path)
        pictures = {id(f): f.to_image() for f in picked}
        return [pictures[id(f)] for f in picked]


@contextlib.contextmanager
def _video_stream(path: Path) -> Iterator[tuple[Any, Any, float | None]]:
    """The video file's container, its first video stream (decoded on several threads) and
    its duration in seconds (None: unknown), for the block; what PyAV or the file raises
    in it, as one :class:`VideoLoadError`."""
    av: Any = import_extra("av", "video", _INSTALL)
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoLoadError(str(path), "holds no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            yield container, stream, _duration(container, stream)
    except VideoLoadError:
        raise
    except (av.FFmpegError, OSError, ValueError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or first_line(exc)
        raise VideoLoadError(str(path), f"not a readable video ({why})") from None


def _seek_before(container: Any, stream: Any, seconds: float) -> None:
    """Jump to the key frame before ``seconds`` (past the first second, and when the
    stream can say where that is)."""
    if seconds > 1.0 and stream.time_base is not None:
        container.seek(int(seconds / stream.time_base), stream=stream, backward=True)


def _duration(container: Any, stream: Any) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000  # av.time_base: microseconds
    return None


def _folder_frames(folder: Path, frames: int) -> list[Image.Image]:
    """``frames`` consecutive frames from the middle of a folder of images (sorted by name);
    a folder with fewer gives all of them, spread evenly (frames repeat)."""

    names = frame_files(folder)
    if not names:
        raise VideoLoadError(str(folder), "a folder of frames holds no image")
    times = sample_times(len(names), frames, 1.0)
    picked = [names[min(int(t), len(names) - 1)] for t in times]
    loaded: dict[Path, Image.Image] = {}
    for name in dict.fromkeys(picked):
        loaded[name] = load_rgb(name)
    return [loaded[name] for name in picked]


def frame_files(folder: Path) -> list[Path]:
    """The image files directly in ``folder``, sorted by name (hidden files left out)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise VideoLoadError(str(folder), f"folder cannot be read ({first_line(exc)})") from None
    found = []
    for name in names:
        suffix = Path(name).suffix.lower()
        if name.startswith("."):
            continue
        if suffix in VIDEO_SUFFIXES:
            return []  # a folder of videos, not of frames
        if suffix in IMAGE_SUFFIXES:
            if suffix in ANIMATED_SUFFIXES and _frame_count(folder / name) > 1:
                return []  # animations are clips of their own
            found.append(folder / name)
    return found


def animation_note(path: Path) -> str | None:
    """What an image model is told of an animated GIF or WebP: only its first frame is drawn
    (reads the file's header); None for any other file."""
    if path.suffix.lower() not in ANIMATED_SUFFIXES:
        return None
    count = _frame_count(path)
    if count < 2:
        return None
    return (
        f"image {path} is an animation of {count} frames: its first frame is drawn (a video "
        "model, r3d_18 or mvit_v2_s, reads them all)"
    )


def is_clip_input(path: Path) -> bool:
    """Whether a path is something a video model takes: a video file, an animation, or a
    folder of frames."""
    if path.is_dir():
        return bool(frame_files(path))
    suffix = path.suffix.lower()
    if suffix in VIDEO_SUFFIXES:
        return True
    return suffix in ANIMATED_SUFFIXES and _frame_count(path) > 1


def _frame_count(path: Path) -> int:

    try:
        with PILImage.open(path, formats=ALLOWED_FORMATS) as im:
            return int(getattr(im, "n_frames", 1))
    except (OSError, ValueError, EOFError, SyntaxError):
        return 0


def discover_clips(inputs: Sequence[Path]) -> Discovery:
    """The clips among the inputs: each video file or animation is one clip; a folder that
    holds images directly is one clip of its frames; other folders are walked for videos.

    Raises:
        ImageLoadError: An input does not exist.
        UsageError: An input is a still image (a video model takes clips), or none is a clip.
    """
    clips: list[ImageInput] = []
    skipped: list[tuple[Path, str]] = []
    for path in inputs:
        if not os.path.exists(path):
            raise VideoLoadError(str(path), "no such file or folder; check the path")
        if not path.is_dir():
            if not is_clip_input(path) and path.suffix.lower() in IMAGE_SUFFIXES:
                raise UsageError(
                    f"{path} is a still image; a video model takes a video file (mp4, avi, "
                    "webm), an animated GIF/WebP, or a folder of frames"
                )
            clips.append(ImageInput(path, PurePosixPath(path.name)))
            continue
        if frame_files(path):
            clips.append(ImageInput(path, PurePosixPath(path.name)))
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            here = Path(root)
            if here != path and frame_files(here):
                rel = here.relative_to(path)
                clips.append(ImageInput(here, PurePosixPath(rel.as_posix())))
                dirs[:] = []
                continue
            for name in sorted(files):
                child = here / name
                if name.startswith("."):
                    continue
                if is_clip_input(child):
                    rel = child.relative_to(path)
                    clips.append(ImageInput(child, PurePosixPath(rel.as_posix())))
                else:
                    skipped.append((child, "not a video"))
    if not clips:
        named = ", ".join(str(p) for p in inputs) or "(none)"
        raise UsageError(
            f"no videos found in {named}; a video model takes video files (mp4, avi, webm), "
            "animated GIF/WebP files, or folders of frames"
        )
    return Discovery(images=clips, skipped=skipped)


def read_pair(path: Path) -> tuple[Image.Image, Image.Image]:
    """The two middle frames of a video or animation: of ``n`` frames, frames
    ``(n - 1) // 2`` and the one after it.

    Raises:
        VideoLoadError: For a video that cannot be read or holds a single frame.
        UsageError: A video file while PyAV (the ``video`` extra) is not installed.
    """
    if path.suffix.lower() in ANIMATED_SUFFIXES:
        return _animated_pair(path)
    return _av_pair(path)


def _single(path: Path) -> VideoLoadError:
    return VideoLoadError(str(path), "holds a single frame; a flow model needs two")


def _animated_pair(path: Path) -> tuple[Image.Image, Image.Image]:
    """An animation's two middle frames, by index (frame durations do not matter)."""
    with _animation(path) as (im, count):
        if count < 2:
            raise _single(path)
        middle = (count - 1) // 2
        pair = []
        for index in (middle, middle + 1):
            im.seek(index)
            pair.append(im.convert("RGB"))
        return pair[0], pair[1]


def _av_pair(path: Path) -> tuple[Image.Image, Image.Image]:
    """A video file's two middle frames: the frame on screen half a frame before the middle
    of its duration (frame ``(n - 1) // 2`` of ``n`` at a constant rate) and the frame
    decoded after it."""
    with _video_stream(path) as (container, stream, duration):
        rate = float(stream.average_rate or stream.guessed_rate or 0)
        middle = max((duration or 0.0) / 2 - (0.5 / rate if rate > 0 else 0.0), 0.0)
        # Jump to the key frame before the middle: a long video is not decoded from 0.
        _seek_before(container, stream, middle)
        before: Any = None
        held: Any = None
        for frame in container.decode(stream):
            t = float(frame.time) if frame.time is not None else 0.0
            if held is not None and t > middle + 1e-6:  # float noise of frame times
                return held.to_image(), frame.to_image()
            before, held = held, frame
        if held is None:
            raise VideoLoadError(str(path), "the video holds no frame")
        if before is None:
            raise _single(path)
        # A duration longer than its frames: the last two.
        return before.to_image(), held.to_image()


def discover_pairs(inputs: Sequence[Path]) -> tuple[Discovery, dict[str, str]]:
    """The image pairs among the inputs, for an optical-flow model: image files named in a
    row are consecutive pairs (two images: one pair); a folder of frames gives the pairs of
    its consecutive frames; a video (or animation) its two middle frames.

    Returns:
        The pairs as inputs (each named by its first picture), and each pair's first
        picture's path -> its second's (a video has none: it is read whole).

    Raises:
        ImageLoadError: An input does not exist.
        UsageError: Fewer than two pictures: nothing to pair.
    """
    pairs: list[ImageInput] = []
    partners: dict[str, str] = {}
    stills: list[Path] = []

    def flush() -> None:
        for first, second in zip(stills, stills[1:], strict=False):
            pairs.append(ImageInput(first, PurePosixPath(first.name)))
            partners[str(first)] = str(second)
        stills.clear()

    for path in inputs:
        if not os.path.exists(path):
            raise ImageLoadError(str(path), "no such file or folder")
        if path.is_dir():
            flush()
            frames = frame_files(path)
            for first, second in zip(frames, frames[1:], strict=False):
                rel = PurePosixPath(path.name, first.name)
                pairs.append(ImageInput(first, rel))
                partners[str(first)] = str(second)
        elif is_clip_input(path):
            flush()
            pairs.append(ImageInput(path, PurePosixPath(path.name)))
        else:
            stills.append(path)
    flush()
    if not pairs:
        raise UsageError(
            "an optical-flow model takes pairs of images: pass two images (IMAGE1 IMAGE2), "
            "a folder of frames, or a video"
        )
    return Discovery(images=pairs, skipped=[]), partners
