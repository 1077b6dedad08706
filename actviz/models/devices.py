"""Device choice: turn ``--device`` into a torch device that is really there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actviz.errors import DeviceError, UsageError

if TYPE_CHECKING:
    import torch

__all__ = ["resolve_device"]


def resolve_device(spec: str) -> torch.device:
    """Turn ``auto|cpu|cuda|cuda:N|mps`` into a device that is really there.

    Raises:
        UsageError: If the spec is not a device name.
        DeviceError: If the device is not available, with what is available instead.
    """
    import torch

    spec = spec.strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UsageError(f"unknown device '{spec}'; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise DeviceError(
                f"CUDA is not available here (torch {torch.__version__}, "
                f"CUDA build {torch.version.cuda or 'none'}, 0 GPUs visible); "
                "use --device cpu or --device auto"
            )
        if device.index is not None and device.index >= count:
            raise DeviceError(
                f"{spec} does not exist: {count} GPU(s) visible (cuda:0..cuda:{count - 1}); "
                "pick one of those or use --device auto"
            )
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError("MPS is not available here; use --device cpu or --device auto")
        return device
    raise UsageError(f"unsupported device '{spec}'; use auto, cpu, cuda, cuda:N or mps")
