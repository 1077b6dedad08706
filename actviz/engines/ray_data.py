"""The Ray engine: a folder's per-image summaries computed on a pool of Ray actors.

Each actor builds the model once, exactly as a local run does (same weights resolution, the
same seed for random weights, checkpoints loaded as safely), decodes its own images, and returns
small summaries only (statistics, top-k candidates), never activations. The driver hands out
batches of paths as actors free up (two queued on each, so none idles between calls), merges
what comes back into the same files the local engine writes, and keeps nothing per image beyond
the list of paths it was given and the batches in flight.

An actor whose process dies (killed, out of memory, its node lost) is replaced by a fresh one,
and the batch it was running is tried again, up to ``RayOptions.retries`` times; the batches
merely queued on it are handed out again without counting against them (an actor runs its calls
in order, so the oldest unfinished one was running). A batch that still fails is given back as
lost, each of its images with a one-line reason, and the run goes on. An exception raised by the
work itself, or a model that cannot be built on an actor, stops the run, as it would locally.

An actor the cluster cannot start within ``pool.START_TIMEOUT`` seconds (no free CPU, or
resources it will never have, as when a node is lost) is given up: its batches go to the actors
that run, and when none is left the run stops with one line that names the cause and the fix. An
actor builds its model on its first call, so its start is only its scheduling, however slow the
model is to build.

Only this module imports ray, and only when the engine is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actviz.engines.pool import Batch, Pool, unschedulable
from actviz.errors import ActvizError, UsageError, first_line, import_extra
from actviz.models import load_with

if TYPE_CHECKING:
    from actviz.models.options import LoadOptions

__all__ = ["RETRIES", "RayOptions", "WorkerSpec", "ray_batches", "require_ray"]

#: Times a batch is tried again after the actor running it died, each time on a fresh actor.
RETRIES = 2


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide the Ray job runs.

    Attributes:
        address: None starts a local Ray instance on this machine; ``auto`` joins the cluster
            that ``ray start`` runs here; ``ray://host:port`` or ``host:port`` another one.
        workers: Actors in the pool, each holding one copy of the model.
        batch_size: Images per actor call.
        retries: Times a batch is tried again after the actor running it died.
    """

    address: str | None = None
    workers: int = 2
    batch_size: int = 8
    retries: int = RETRIES


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
    spec: WorkerSpec,
    paths: Sequence[Path],
    options: RayOptions,
    *,
    lost: Callable[[str], Any] | None = None,
) -> Iterator[list[tuple[list[int], Any]]]:
    """Run ``spec.summarize`` over ``paths`` on an actor pool; yield each batch's
    ``(indices into paths, payload)`` pairs as they come back, in no particular order.

    A batch whose actor died more than ``options.retries`` times comes back as
    ``[([i], lost(reason)) for each of its images]``: ``lost`` makes the payload of an image
    that could not be processed (without it, such a batch stops the run with ActvizError).
    The Ray job is stopped when the caller stops iterating (Ctrl-C included), and a Ray instance
    this call started is shut down.

    Raises:
        UsageError: Without the ray extra, or for a cluster address that cannot be reached.
        ActvizError: When the model cannot be built on an actor, or the work on a batch raises.
    """
    ray = require_ray()
    if options.workers < 1:
        raise UsageError("--workers must be at least 1 with --engine ray (the actor pool size)")
    with _quiet_ray_logs():
        yield from _run(ray, spec, paths, options, lost)


def _run(
    ray: Any,
    spec: WorkerSpec,
    paths: Sequence[Path],
    options: RayOptions,
    lost: Callable[[str], Any] | None,
) -> Iterator[list[tuple[list[int], Any]]]:
    started = _connect(ray, options)
    pool: Pool | None = None
    try:
        need = _resources(ray, options)
        custom = {name: amount for name, amount in need.items() if name != "CPU"}
        # No restarts by Ray itself: a dead actor is replaced here, so the batch it was running
        # is known and its retries counted.
        actor = ray.remote(
            num_cpus=need.get("CPU", 0.0),
            max_restarts=0,
            **({"resources": custom} if custom else {}),
        )(_Summarizer)
        pool = Pool(ray, actor, spec, options.workers, need)
        yield from _schedule(ray, pool, paths, options, lost)
    finally:
        if pool is not None:
            pool.stop()
        if started:
            with contextlib.suppress(Exception):
                ray.shutdown()


def _schedule(
    ray: Any,
    pool: Pool,
    paths: Sequence[Path],
    options: RayOptions,
    lost: Callable[[str], Any] | None,
) -> Iterator[list[tuple[list[int], Any]]]:
    size = max(1, options.batch_size)
    fresh = (Batch(range(s, min(s + size, len(paths)))) for s in range(0, len(paths), size))
    again: deque[Batch] = deque()  # batches whose actor died, sent before new ones
    while True:
        _give_up_late(ray, pool, again)
        while (slot := pool.free()) is not None:
            batch = again.popleft() if again else next(fresh, None)
            if batch is None:
                break
            pool.submit(slot, batch, paths)
        if not pool.batches:
            return
        ready, _ = ray.wait(pool.waiting(), num_returns=1, timeout=pool.timeout())
        if not ready:
            continue  # an actor's start is overdue: given up on above
        [ref] = ready
        if ref in pool.starting:
            # Started (or died starting: its queued calls say so and are handled as any).
            del pool.starting[ref]
            continue
        slot, batch = pool.batches[ref]
        result = _result(ray, ref)
        if not isinstance(result, BaseException):
            pool.take(ref)
            yield _global(batch, result)
            continue
        # Every batch queued on the dead actor fails with it: the oldest unfinished one was
        # running, the others had not started.
        culprit = True
        for queued in pool.replace(slot):
            _, batch = pool.batches.pop(queued)
            result = _result(ray, queued)
            if not isinstance(result, BaseException):
                yield _global(batch, result)
                continue
            if culprit:
                batch.deaths += 1
                culprit = False
            if batch.deaths <= options.retries:
                again.append(batch)
                continue
            reason = _died_reason(result, options.retries)
            if lost is None:
                raise ActvizError(f"the Ray job failed: {reason}") from result
            yield [([i], lost(reason)) for i in batch.indices]


def _give_up_late(ray: Any, pool: Pool, again: deque[Batch]) -> None:
    """The actors the cluster did not start in time are given up; their batches go first to
    the actors that run, without counting against them.

    Raises:
        ActvizError: When no actor is left: why Ray could not start one, and the fix.
    """
    late = pool.overdue()
    for slot, _ in late:
        again.extendleft(reversed(pool.take_back(slot)))
    if late and not pool.live():
        what = "a replacement worker" if any(replaced for _, replaced in late) else "a worker"
        raise ActvizError(
            f"Ray could not start {what} within {pool.start_timeout:g} s: "
            f"{unschedulable(ray, pool.need)}; lower --workers or add resources to the "
            "cluster (--resume continues this run)"
        )


def _result(ray: Any, ref: Any) -> Any:
    """A call's pairs, or the error that says its actor died.

    Raises:
        ActvizError: When the work raised, or the actor could not build the model (either
            would fail on any actor).
    """
    errors = ray.exceptions
    died = (
        errors.RayActorError,
        errors.WorkerCrashedError,
        errors.NodeDiedError,
        errors.OutOfMemoryError,
        errors.ObjectLostError,
    )
    try:
        return ray.get(ref)
    except died as exc:
        if getattr(exc, "actor_init_failed", False):
            # Ray's text ends with the constructor's exception, after its traceback.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise ActvizError(
                "the Ray job failed: an actor could not build the model: "
                + (lines[-1] if lines else _ray_reason(exc))
            ) from exc
        return exc
    except errors.RayError as exc:
        if isinstance(getattr(exc, "cause", None), _BuildFailed):
            raise ActvizError(
                f"the Ray job failed: an actor could not build the model: {exc.cause}"
            ) from exc
        raise ActvizError(f"the Ray job failed: {_ray_reason(exc)}") from exc


def _global(batch: Batch, pairs: list[tuple[list[int], Any]]) -> list[tuple[list[int], Any]]:
    """An actor's pairs with indices into the batch, as indices into the run's paths."""
    return [([batch.indices[i] for i in rows], payload) for rows, payload in pairs]


def _died_reason(exc: BaseException, retries: int) -> str:
    """One line: what happened to the batch, and Ray's word on why the worker exited."""
    detail = re.search(r"[Ww]orker exit detail: ([^\n]*)", str(exc))
    # Its first sentence ("Worker unexpectedly exits with a connection error code 2"); the
    # rest is Ray's list of common causes.
    why = detail.group(1).split(". ")[0].strip().rstrip(".")[:160] if detail else ""
    why = f": {why}" if why else ""
    return (
        f"the Ray worker died while processing this batch (retried {retries} time"
        f"{'' if retries == 1 else 's'}){why}"
    )


class _BuildFailed(Exception):
    """The model could not be built on an actor: it would fail on any."""


class _Summarizer:
    """The actor: builds the model on its first call, then summarizes one batch of paths per
    call. Its start is cheap, so the driver sees when the cluster has scheduled it."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.loaded: Any = None

    def ready(self) -> bool:
        """Answers once the actor runs: its first call."""
        return True

    def summarize(self, paths: list[str]) -> list[tuple[list[int], Any]]:
        if self.loaded is None:
            self.loaded = _build(self.spec)
        pairs: list[tuple[list[int], Any]] = self.spec.summarize(
            self.loaded, [Path(p) for p in paths], list(self.spec.layers)
        )
        return pairs


def _build(spec: WorkerSpec) -> Any:
    """The model as the driver's command opens it: built by its source, with the run's own
    preprocessing when it gave one (the API's ``preprocess=``).

    Raises:
        _BuildFailed: Whatever went wrong, in one line.
    """

    try:
        loaded = load_with(spec.model, spec.load)
    except Exception as exc:
        why = first_line(exc)
        # The message alone: it travels back pickled, whatever the exception held.
        raise _BuildFailed(
            why if isinstance(exc, ActvizError) else f"{type(exc).__name__}: {why}"
        ) from None
    if spec.load.preprocess is not None:
        loaded.preprocess = spec.load.preprocess
        loaded.input_size = spec.load.preprocess.crop_size
    return loaded


@contextlib.contextmanager
def _quiet_ray_logs() -> Iterator[None]:
    """Ray's own log lines stay out of actviz's stderr (they are in Ray's log files); errors
    still come through. The levels are restored for whoever else uses Ray in this process."""
    import ray  # noqa: F401  # importing it configures its logger, so first

    logger = logging.getLogger("ray")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
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


def _resources(ray: Any, options: RayOptions) -> dict[str, float]:
    """What each actor asks the cluster for. A pool wider than the cluster's cores still
    starts: actors share the cores."""
    total = float(ray.cluster_resources().get("CPU", 1.0))
    return {"CPU": max(0.1, min(1.0, total / options.workers))}


def _ray_reason(exc: BaseException) -> str:

    cause = getattr(exc, "cause", None)
    return first_line(cause if isinstance(cause, BaseException) else exc)
