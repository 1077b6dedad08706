"""Decoding inputs: finding and decoding images (``images``), clips and pairs from videos,
animations and folders of frames (``video``), and the streaming loader that decodes ahead of
the model (``loader``). Importing this package imports no torch.
"""

from __future__ import annotations

from actviz.io.images import (
    ALLOWED_FORMATS,
    IMAGE_SUFFIXES,
    Discovery,
    ImageInput,
    discover,
    load_rgb,
)
from actviz.io.loader import Decoded, decode_batches
from actviz.io.video import (
    ANIMATED_SUFFIXES,
    VIDEO_SUFFIXES,
    animation_note,
    discover_clips,
    discover_pairs,
    is_clip_input,
    read_frames,
    read_pair,
    sample_times,
)

__all__ = [
    "ALLOWED_FORMATS",
    "ANIMATED_SUFFIXES",
    "IMAGE_SUFFIXES",
    "VIDEO_SUFFIXES",
    "Decoded",
    "Discovery",
    "ImageInput",
    "animation_note",
    "decode_batches",
    "discover",
    "discover_clips",
    "discover_pairs",
    "is_clip_input",
    "load_rgb",
    "read_frames",
    "read_pair",
    "sample_times",
]
