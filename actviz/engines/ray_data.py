"""The Ray engine: a folder's per-image summaries computed on a pool of Ray actors.

The conventional shape of batch inference on Ray Data: ``from_items(paths)`` -> ``map_batches``
over an actor pool, each actor holding the model -> results streamed back to the driver. Each
actor builds the model once, exactly as a local run does (same weights resolution, the same seed
for random weights, checkpoints loaded as safely), decodes its own images, and returns small
per-image summaries only (statistics, top-k candidates), never activations. The driver merges
them into the same files the local engine writes.

Only this module imports ray, and only when the engine is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.errors import ActvizError, UsageError, import_extra

if TYPE_CHECKING:
    import numpy as np

    from actviz.options import LoadOptions

__all__ = ["INSTALL_HINT", "RayOptions", "WorkerSpec", "ray_batches", "require_ray"]

INSTALL_HINT = "pip install 'actviz[ray]'"


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide the Ray job runs.

    Attributes:
        address: None starts a local Ray instance on this machine; ``auto`` joins the cluster
            that ``ray start`` runs here; ``ray://host:port`` or ``host:port`` another one.
        workers: Actors in the pool, each holding one copy of the model.
        batch_size: Images per actor call.
    """

    address: str | None = None
    workers: int = 2
    batch_size: int = 8


@dataclass(frozen=True)
class WorkerSpec:
    """What an actor needs to rebuild the model and hook it as the driver would.

    Attributes:
        model: The model name or factory spec.
        load: How to load it (the device is the actor's: ``auto`` picks its accelerator).
        layers: The qualified module names to hook, as the driver selected them.
        summarize: ``summarize(loaded, paths, layers) -> [(indices, payload)]``: the work on
            one batch, a picklable top-level function; ``indices`` (into ``paths``) say which
            images each payload covers (one for a per-image summary, several for a batch's
            top-k candidates). Payloads come back pickled.
    """

    model: str
    load: LoadOptions
    layers: tuple[str, ...]
    summarize: Callable[..., list[Any]]


def require_ray() -> Any:
    """Import ray, or say how to install it.

    Raises:
        UsageError: When the ``ray`` extra is not installed.
    """
    return import_extra("ray", "ray", "--engine ray needs Ray, which is not installed")


def ray_batches(
    spec: WorkerSpec, paths: Sequence[Path], options: RayOptions
) -> Iterator[list[tuple[list[int], Any]]]:
    """Run ``spec.summarize`` over ``paths`` on an actor pool; yield each batch's
    ``(indices into paths, payload)`` pairs as they come back, in no particular order.

    The Ray job is stopped when the caller stops iterating (Ctrl-C included), and a Ray instance
    this call started is shut down.

    Raises:
        UsageError: Without the ray extra, or for a cluster address that cannot be reached.
        ActvizError: When an actor fails (the model cannot be built there, ...).
    """
    ray = require_ray()
    if options.workers < 1:
        raise UsageError("--workers must be at least 1 with --engine ray (the actor pool size)")
    with _quiet_ray_logs():
        yield from _run(ray, spec, paths, options)


def _run(
    ray: Any, spec: WorkerSpec, paths: Sequence[Path], options: RayOptions
) -> Iterator[list[tuple[list[int], Any]]]:
    started = _connect(ray, options)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        items = [{"index": i, "path": str(p)} for i, p in enumerate(paths)]
        dataset = ray.data.from_items(items, override_num_blocks=_blocks(len(items), options))
        with warnings.catch_warnings():
            # max_restarts=0: a failed actor is an error to report, not to retry with
            # constructor arguments Ray may have dropped; Ray deprecates passing it this way.
            warnings.simplefilter("ignore", DeprecationWarning)
            mapped = dataset.map_batches(
                _Summarizer,
                fn_constructor_kwargs={"spec": spec},
                batch_size=options.batch_size,
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=options.workers),
                num_cpus=_cpus_per_actor(ray, options),
                max_restarts=0,
            )
        try:
            for batch in mapped.iter_batches(batch_size=None, batch_format="numpy"):
                yield [
                    (list(pickle.loads(i)), pickle.loads(p))
                    for i, p in zip(batch["indices"], batch["payload"], strict=True)
                ]
        except ray.exceptions.RayError as exc:
            raise ActvizError(f"the Ray job failed: {_ray_reason(exc)}") from exc
    finally:
        if started:
            with contextlib.suppress(Exception):
                ray.shutdown()


class _Summarizer:
    """The actor: builds the model once, then summarizes one batch of paths per call."""

    def __init__(self, spec: WorkerSpec) -> None:
        from actviz.models import load_with

        self.spec = spec
        self.loaded = load_with(spec.model, spec.load)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        paths = [Path(p) for p in batch["path"]]
        pairs = self.spec.summarize(self.loaded, paths, list(self.spec.layers))
        # Pickled bytes in object columns: Ray Data moves them as they are.
        indices = np.empty(len(pairs), dtype=object)
        indices[:] = [pickle.dumps([int(batch["index"][i]) for i in rows]) for rows, _ in pairs]
        payloads = np.empty(len(pairs), dtype=object)
        payloads[:] = [pickle.dumps(payload) for _, payload in pairs]
        return {"indices": indices, "payload": payloads}


@contextlib.contextmanager
def _quiet_ray_logs() -> Iterator[None]:
    """Ray's own log lines stay out of actviz's stderr (they are in Ray's log files); errors
    still come through. The levels are restored for whoever else uses Ray in this process."""
    import ray.data  # noqa: F401  # importing it configures its logger, so first

    loggers = [logging.getLogger(name) for name in ("ray", "ray.data")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _connect(ray: Any, options: RayOptions) -> bool:
    """Join the cluster at ``options.address``, or start a local instance; True if started."""
    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR, "configure_logging": False}
    try:
        if options.address is None:
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, **quiet)
        else:
            ray.init(address=options.address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = options.address or "a local instance"
        raise UsageError(
            f"--ray-address: cannot connect to {where} ({_ray_reason(exc)}); start a cluster "
            "with `ray start --head` and pass --ray-address auto, or leave the option out"
        ) from exc
    return True


def _blocks(count: int, options: RayOptions) -> int:
    # Enough blocks for every actor to stay busy, few enough that each holds whole batches.
    return max(1, min(count, options.workers * 4, -(-count // options.batch_size)))


def _cpus_per_actor(ray: Any, options: RayOptions) -> float:
    # A pool wider than the cluster's cores still starts: actors share the cores.
    total = float(ray.cluster_resources().get("CPU", 1.0))
    return max(0.1, min(1.0, total / options.workers))


def _ray_reason(exc: BaseException) -> str:
    from actviz.errors import first_line

    cause = getattr(exc, "cause", None)
    return first_line(cause if isinstance(cause, BaseException) else exc)
