"""Finding input images and decoding them into plain RGB pictures.

Everything that touches image files lives here, so the rest of actviz can assume an RGB
``PIL.Image.Image`` and never has to think about EXIF, palettes, alpha, 16-bit or float data.
Every file that cannot be decoded becomes an ``ImageLoadError`` with a one-line reason.
"""

from __future__ import annotations

import os
import stat
import struct
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps, UnidentifiedImageError

from actviz.errors import ImageLoadError, UsageError

__all__ = [
    "ALLOWED_FORMATS",
    "IMAGE_SUFFIXES",
    "Discovery",
    "ImageInput",
    "discover",
    "load_rgb",
]

# Passed to Image.open(formats=...): Pillow otherwise also tries plugins such as EPS (which runs
# Ghostscript) or obscure formats that are poorly hardened against hostile files.
ALLOWED_FORMATS: tuple[str, ...] = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")

IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
)

# What Pillow's decoders raise on malformed input besides OSError. Its plugins parse untrusted
# bytes by hand, so a broken file can surface as any of these (the list follows the exceptions
# Pillow's own fuzzing accepts, plus the parsing errors its plugins are known to leak).
_DECODE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    struct.error,
    IndexError,
    KeyError,
    TypeError,
    ZeroDivisionError,
    OverflowError,
    NotImplementedError,
    MemoryError,
)

_SUPPORTED_NAMES = ", ".join(ALLOWED_FORMATS)

# Leading bytes of the allowed formats: when Pillow cannot identify a file that starts with one
# of these, the header is damaged, which is a more useful thing to say than "not an image".
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"II+\x00", "TIFF"),
    (b"MM\x00+", "TIFF"),
    (b"BM", "BMP"),
)

_MAX_REASON_DETAIL = 100


@dataclass(frozen=True)
class ImageInput:
    """One image to process.

    Attributes:
        path: The file.
        rel: Its path relative to the folder it was found in, extension included; for a file
            named directly on the command line, just its name. Used to name outputs.
    """

    path: Path
    rel: PurePosixPath


@dataclass(frozen=True)
class Discovery:
    """What ``discover`` found.

    Attributes:
        images: The images, in command-line order and sorted by relative path within a folder.
        skipped: Files seen in folders that are not images, each with the reason.
    """

    images: list[ImageInput]
    skipped: list[tuple[Path, str]]

    def require(self, inputs: Sequence[Path | str]) -> Discovery:
        """This discovery, or a usage error naming ``inputs`` and the extensions looked for
        when it found no image: a run over nothing would succeed with nothing written."""
        if self.images:
            return self
        named = ", ".join(str(p) for p in inputs) or "(none)"
        looked = " ".join(sorted(IMAGE_SUFFIXES))
        raise UsageError(
            f"no images found in {named} (looked for {looked}; {len(self.skipped)} other "
            "file(s) skipped); give image files or folders that hold some"
        )


def discover(inputs: Sequence[Path]) -> Discovery:
    """Expand files and folders into the list of images to process.

    Files named directly are always included, so that an unreadable one is reported as a
    failure by ``load_rgb`` rather than silently dropped. Folders are walked recursively;
    hidden entries, AppleDouble ``._*`` files and ``__MACOSX`` folders are ignored. Inside a
    folder, a file is an image when its extension says so or when Pillow recognises its
    header; anything else is listed in ``skipped``.

    Args:
        inputs: Files and folders, in the order given on the command line.

    Returns:
        The images (each file once, first occurrence wins) and the skipped files.

    Raises:
        ImageLoadError: An input does not exist or cannot be examined.
    """
    images: list[ImageInput] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[str] = set()
    seen_skipped: set[str] = set()

    for raw in inputs:
        path = Path(raw)
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise ImageLoadError(str(path), "no such file or folder; check the path") from None
        except OSError as exc:
            raise ImageLoadError(str(path), _os_error_reason(exc)) from None

        if stat.S_ISDIR(info.st_mode):
            found, not_images = _walk(path)
            for entry in not_images:
                key = os.path.realpath(entry[0])
                if key not in seen_skipped:
                    seen_skipped.add(key)
                    skipped.append(entry)
        else:
            found = [ImageInput(path, PurePosixPath(path.name))]

        for item in found:
            # realpath rather than Path.resolve: it never raises, even on symlink loops.
            key = os.path.realpath(item.path)
            if key not in seen:
                seen.add(key)
                images.append(item)

    return Discovery(images=images, skipped=skipped)


def _walk(root: Path) -> tuple[list[ImageInput], list[tuple[Path, str]]]:
    """Collect the images under ``root``, sorted by relative path, and the files skipped."""
    images: list[tuple[PurePosixPath, Path]] = []
    skipped: list[tuple[PurePosixPath, Path, str]] = []

    def visit(folder: Path, rel: PurePosixPath, ancestors: frozenset[tuple[int, int]]) -> None:
        try:
            names = os.listdir(folder)
        except OSError as exc:
            skipped.append((rel, folder, f"folder cannot be read: {_os_error_reason(exc)}"))
            return
        for name in sorted(names):
            # Hidden files, AppleDouble "._x" forks and macOS archive debris are never images
            # a user meant to pass; listing them as skipped would only add noise.
            if name.startswith(".") or name == "__MACOSX":
                continue
            child = folder / name
            child_rel = rel / name
            try:
                info = os.stat(child)  # follows links: a linked image counts as an image
            except OSError as exc:
                if _has_image_suffix(child):
                    images.append((child_rel, child))  # load_rgb reports why it is unusable
                elif isinstance(exc, FileNotFoundError) and child.is_symlink():
                    skipped.append((child_rel, child, "broken link"))
                else:
                    skipped.append((child_rel, child, _os_error_reason(exc)))
                continue
            if stat.S_ISDIR(info.st_mode):
                identity = (info.st_dev, info.st_ino)
                # Linked folders are followed, except a link back to a folder being walked,
                # which would recurse forever.
                if identity in ancestors:
                    skipped.append((child_rel, child, "link to an enclosing folder (not followed)"))
                else:
                    visit(child, child_rel, ancestors | {identity})
                continue
            if _has_image_suffix(child):
                images.append((child_rel, child))
                continue
            reason = _not_an_image_reason(child, info)
            if reason is None:
                images.append((child_rel, child))
            else:
                skipped.append((child_rel, child, reason))

    root_info = os.stat(root)
    visit(root, PurePosixPath(), frozenset({(root_info.st_dev, root_info.st_ino)}))
    # Sorting by path components (not by the joined string) keeps a folder's contents together
    # and makes the order independent of the order the file system lists entries in.
    images.sort(key=lambda entry: entry[0].parts)
    skipped.sort(key=lambda entry: entry[0].parts)
    return (
        [ImageInput(path, rel) for rel, path in images],
        [(path, reason) for _, path, reason in skipped],
    )


def _has_image_suffix(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def _not_an_image_reason(path: Path, info: os.stat_result) -> str | None:
    """Return why a file without an image extension is not an image, or None if it is one."""
    if not stat.S_ISREG(info.st_mode):
        # Opening a FIFO or device to sniff it could block forever.
        return "not a regular file"
    if info.st_size == 0:
        return "file is empty"
    try:
        with warnings.catch_warnings():
            # Only the header is read here; the size limit is enforced by load_rgb.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path, formats=ALLOWED_FORMATS):
                return None
    except Image.DecompressionBombError:
        return None  # recognised as an image; load_rgb will refuse it with the reason
    except UnidentifiedImageError:
        return "not an image"
    except OSError as exc:
        return _os_error_reason(exc)
    except _DECODE_ERRORS:
        return "not an image"


def load_rgb(path: Path, *, background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """Decode an image file into a fully loaded RGB image, drawn as a viewer would show it.

    EXIF orientation is applied; only the first frame of an animation is used; transparency
    is composited over ``background``; 16-bit and float greyscale are scaled to 8 bits.

    Args:
        path: The image file.
        background: The colour that transparent areas are drawn over.

    Returns:
        An image in mode ``"RGB"`` whose file is already closed.

    Raises:
        ImageLoadError: The file is missing, unreadable, not a supported image, damaged or
            larger than ``PIL.Image.MAX_IMAGE_PIXELS``.
    """
    _check_file(path)
    try:
        with warnings.catch_warnings():
            # Locally, not process-wide: a bomb must fail this image, not warn and decode it.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            # Pillow warns about damaged metadata it then ignores ("Corrupt EXIF data"); the
            # picture either decodes or fails below, so those lines would only be noise.
            warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
            with Image.open(path, formats=ALLOWED_FORMATS) as im:
                # Image.open leaves an animation on its first frame; load only that one.
                im.load()
                frame = _upright(im)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageLoadError(str(path), _too_large_reason(exc)) from None
    except UnidentifiedImageError:
        raise ImageLoadError(str(path), _unidentified_reason(path)) from None
    except _DECODE_ERRORS as exc:
        raise ImageLoadError(str(path), _decode_error_reason(exc)) from None

    if frame.width == 0 or frame.height == 0:
        raise ImageLoadError(str(path), f"image has no pixels ({frame.width}x{frame.height})")
    try:
        return _to_rgb(frame, background)
    except ValueError:
        # Pillow has no conversion for some rare pixel layouts.
        raise ImageLoadError(str(path), f"unsupported pixel format {frame.mode}") from None


def _check_file(path: Path) -> None:
    """Reject what Image.open would misreport or hang on, with a precise reason."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ImageLoadError(str(path), _os_error_reason(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise ImageLoadError(str(path), "is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        # A FIFO or device would block or stream forever.
        raise ImageLoadError(str(path), "not a regular file")
    if info.st_size == 0:
        raise ImageLoadError(str(path), "file is empty")


def _upright(im: Image.Image) -> Image.Image:
    """Return a detached copy of the current frame, rotated as its EXIF orientation says."""
    try:
        upright = ImageOps.exif_transpose(im)
    except _DECODE_ERRORS:
        # A damaged EXIF block should not cost an otherwise readable picture its pixels.
        return im.copy()
    # exif_transpose returns a new image (a copy when nothing needs rotating), never None
    # when in_place is False; the check only narrows the type.
    return upright if upright is not None else im.copy()


def _to_rgb(im: Image.Image, background: tuple[int, int, int]) -> Image.Image:
    mode = im.mode
    if mode == "RGB":
        return im
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        return _grey_to_rgb(_scale_integer(np.asarray(im)))
    if mode == "F":
        return _grey_to_rgb(_scale_float(np.asarray(im)))
    if im.has_transparency_data:
        if mode == "La":
            im = im.convert("LA")  # premultiplied; Pillow converts it only to LA
        # Through RGBA so palette and "transparency" entries become a real alpha channel
        # instead of being dropped (which would leave transparent areas black).
        rgba = im.convert("RGBA")
        out = Image.new("RGB", rgba.size, background)
        out.paste(rgba.convert("RGB"), mask=rgba.getchannel("A"))
        return out
    return im.convert("RGB")


def _scale_integer(data: npt.NDArray[np.generic]) -> npt.NDArray[np.uint8]:
    """Map 16-bit (or 32-bit integer) greyscale to 8 bits without clipping."""
    values = data.astype(np.float64)
    lo, hi = float(values.min()), float(values.max())
    # Pillow's own convert() clips at 255, which turns most 16-bit images white. Data that fits
    # 16 bits is scaled as 16-bit so brightness is kept; anything wider is stretched.
    if (lo >= 0 and hi <= 65535) or hi == lo:
        scaled = values / 257.0
    else:
        scaled = (values - lo) * (255.0 / (hi - lo))
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def _scale_float(data: npt.NDArray[np.generic]) -> npt.NDArray[np.uint8]:
    """Map float greyscale to 8 bits: [0, 1] data by 255, anything else stretched."""
    values = data.astype(np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return np.zeros(values.shape, dtype=np.uint8)
    lo, hi = float(values[finite].min()), float(values[finite].max())
    if (lo >= 0 and hi <= 1) or hi == lo:
        scaled = values * 255.0
    else:
        scaled = (values - lo) * (255.0 / (hi - lo))
    # +inf and -inf end up at 255 and 0 through the clip; NaN has no sensible value: black.
    scaled = np.where(np.isnan(values), 0.0, np.clip(scaled, 0, 255))
    return np.rint(scaled).astype(np.uint8)


def _grey_to_rgb(grey: npt.NDArray[np.uint8]) -> Image.Image:
    return Image.fromarray(np.ascontiguousarray(grey)).convert("RGB")


def _too_large_reason(exc: BaseException) -> str:
    # Pillow's message is "Image size (N pixels) exceeds limit of M pixels, ..."; its M is
    # twice the limit for the error level, so report the limit actually enforced here.
    limit = Image.MAX_IMAGE_PIXELS
    pixels = _first_int_after(str(exc), "(")
    size = f"{pixels} pixels" if pixels is not None else "the image"
    return f"image too large: {size} exceeds the limit of {limit}"


def _first_int_after(text: str, marker: str) -> int | None:
    start = text.find(marker)
    if start < 0:
        return None
    digits = ""
    for char in text[start + len(marker) :]:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else None


def _unidentified_reason(path: Path) -> str:
    """Say what a file that Pillow could not identify seems to be."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError as exc:
        return _os_error_reason(exc)
    if not head:
        return "file is empty"
    if _looks_like_text(head):
        return "not an image (text file?)"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "damaged WEBP header"
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return f"damaged {name} header"
    return f"not a supported image (supported: {_SUPPORTED_NAMES})"


def _looks_like_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    # The read may have cut a multi-byte character in half; allow that at the very end.
    for cut in range(4):
        try:
            head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return True
    return False


def _decode_error_reason(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        return "not enough memory to decode the image"
    if isinstance(exc, OSError) and exc.errno is not None:
        return _os_error_reason(exc)
    detail = _one_line(str(exc))
    if isinstance(exc, EOFError) or "truncat" in detail.lower():
        return "truncated image data"
    return f"damaged image data ({detail})" if detail else "damaged image data"


def _os_error_reason(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, IsADirectoryError):
        return "is a folder, not a file"
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return "no such file"
    if exc.strerror:
        return exc.strerror.lower()
    detail = _one_line(str(exc))
    return detail or "cannot be read"


def _one_line(text: str) -> str:
    """Collapse an exception message to one short line fit to follow a colon."""
    line = " ".join(text.split())
    if len(line) > _MAX_REASON_DETAIL:
        line = line[: _MAX_REASON_DETAIL - 3].rstrip() + "..."
    return line
