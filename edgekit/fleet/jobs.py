"""Run profiling jobs on the fleet and collect what comes back, whatever the devices do.

Dask already re-runs a job whose worker left mid-job on another worker with the same resource
(up to ``distributed.scheduler.allowed-failures`` times). What it does not do is give up: a job
whose device kind has no worker left waits forever, and a job that hangs on a device runs
forever. So this loop never blocks on Dask: it polls the futures, times each job from its start
on a device (jobs announce it, ``job.TOPIC``), fails the jobs of a kind that has had no usable
worker for a while, and keeps every result it already has.
"""
from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgekit.fleet.child import settings_doc
from edgekit.fleet.engine import resource_for
from edgekit.fleet.job import TOPIC, profile_job
from edgekit.fleet.payload import Payload
from edgekit.fleet.status import WAIT_S, workers_by_kind
from edgekit.profiler.run import ProfileSettings
from edgekit.progress import Progress, ProgressUpdate

LABEL = "fleet jobs"


@dataclass(frozen=True)
class Limits:
    job_timeout_s: float = 600.0  # the device kills a job's process running longer than this
    grace_s: float = 30.0  # past the timeout, the client gives up on a device that never answers
    no_worker_s: float = 30.0  # jobs of a kind with no usable worker for this long fail
    poll_s: float = 0.1  # how often the futures and events are looked at
    check_workers_s: float = 1.0  # how often the connected workers are listed


@dataclass(frozen=True)
class Job:
    name: str  # the payload's name (a model)
    device: str  # the device kind: a profile name


@dataclass(frozen=True)
class Outcome:
    job: Job
    report: dict[str, Any] | None  # the profile report; None when it failed
    error: str | None = None  # one line naming the device when it failed
    worker: str | None = None  # the worker's name that measured it

    def to_failure(self) -> dict[str, Any]:
        """The failure record; its error on one line (a device's TensorRT log spans several)."""
        return {"name": self.job.name, "device": self.job.device,
                "error": " ".join(str(self.error).split()), "worker": self.worker}


@dataclass
class _Running:
    """The client's view of one submitted job."""

    job: Job
    future: Any
    started: float | None = None  # when it started on a device (client clock)
    worker: str | None = None  # address of the worker running it
    worker_name: str | None = None
    left: list[str] = field(default_factory=list)  # names of workers that left while running it


def _finished(run: _Running) -> Outcome:
    """The outcome of a future Dask says is done."""
    from distributed.scheduler import KilledWorker

    job, future = run.job, run.future
    if future.status == "finished":
        result = future.result(timeout=WAIT_S)
        if "error" in result:
            return Outcome(job, None, f"{job.device} ({result['worker']}): {result['error']}",
                           result["worker"])
        return Outcome(job, result["report"], worker=result["worker"])
    if future.status == "error":
        exc = future.exception(timeout=WAIT_S)
        if isinstance(exc, KilledWorker):
            lost = ", ".join(run.left) or run.worker_name or "its worker"
            return Outcome(job, None, f"{job.device}: the job was lost with {lost} and Dask's "
                                      "retries (allowed-failures) are used up", run.worker_name)
        message = " ".join(str(exc).split())[:300]
        return Outcome(job, None, f"{job.device} ({run.worker_name or 'worker'}): "
                                  f"{type(exc).__name__}: {message}", run.worker_name)
    return Outcome(job, None, f"{job.device}: the job was {future.status}", run.worker_name)


def run_jobs(client: Any, jobs: Sequence[Job], payloads: Mapping[str, Payload],
             settings: ProfileSettings, *, limits: Limits = Limits(),  # noqa: B008 (frozen)
             progress: Progress | None = None) -> list[Outcome]:
    """Every job's outcome, in the order of ``jobs``: a report, or a failure naming its device.

    Each job is restricted to one worker of its device kind (resource ``device:<kind>``); the
    payload travels with each job, so every selected kind receives each model once.
    """
    events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    client.subscribe_topic(TOPIC, lambda event: events.put(event[1]))
    running: dict[str, _Running] = {}
    outcomes: dict[Job, Outcome] = {}
    doc = settings_doc(settings)
    try:
        for job in jobs:
            key = f"edgekit-{job.name}-{job.device}-{uuid.uuid4().hex[:8]}"
            future = client.submit(profile_job, payloads[job.name], doc, job.device,
                                   limits.job_timeout_s, key=key,
                                   resources={resource_for(job.device): 1}, pure=False)
            running[key] = _Running(job, future)
        _loop(client, running, outcomes, events, limits, progress, total=len(jobs))
    finally:
        for run in running.values():
            run.future.cancel()
        client.unsubscribe_topic(TOPIC)
    return [outcomes[job] for job in jobs]


def _loop(client: Any, running: dict[str, _Running], outcomes: dict[Job, Outcome],
          events: queue.SimpleQueue[dict[str, Any]], limits: Limits,
          progress: Progress | None, total: int) -> None:
    stuck: dict[str, str] = {}  # worker address -> key of a timed-out job still running there
    kinds = {run.job.device for run in running.values()}
    usable_at = dict.fromkeys(kinds, time.monotonic())  # last time each kind had a free worker
    checked = 0.0
    shown = -1
    while running:
        now = time.monotonic()
        while not events.empty():
            _on_event(events.get(), running, stuck, now)
        for key, run in list(running.items()):
            if run.future.done():
                outcomes[run.job] = _finished(run)
                del running[key]
            elif (run.started is not None
                  and now - run.started > limits.job_timeout_s + limits.grace_s):
                run.future.cancel()
                outcomes[run.job] = Outcome(
                    run.job, None, f"{run.job.device} ({run.worker_name}): no answer "
                                   f"{limits.job_timeout_s + limits.grace_s:g} s after the job "
                                   "started", run.worker_name)
                stuck[run.worker or ""] = key
                del running[key]
        if now - checked >= limits.check_workers_s:
            checked = now
            _fail_orphans(client, running, outcomes, stuck, usable_at, limits, now)
        done = len(outcomes)
        if progress is not None and done != shown:
            shown = done
            failed = sum(o.error is not None for o in outcomes.values())
            progress(ProgressUpdate(LABEL, done, total, note=f"{failed} failed" if failed else ""))
        if running:
            time.sleep(limits.poll_s)


def _on_event(event: dict[str, Any], running: dict[str, _Running], stuck: dict[str, str],
              now: float) -> None:
    run = running.get(event.get("key", ""))
    if event.get("event") == "start" and run is not None:
        run.started, run.worker, run.worker_name = now, event["worker"], event["name"]
    elif event.get("event") == "end" and stuck.get(event.get("worker", "")) == event.get("key"):
        del stuck[event["worker"]]  # the timed-out job came back: the device is free again


def _fail_orphans(client: Any, running: dict[str, _Running], outcomes: dict[Job, Outcome],
                  stuck: dict[str, str], usable_at: dict[str, float], limits: Limits,
                  now: float) -> None:
    """Fail the jobs of a device kind that has had no usable worker for ``no_worker_s``: every
    worker left, or each is still busy with a job that timed out."""
    connected = workers_by_kind(client)
    alive = {addr for addrs in connected.values() for addr in addrs}
    for addr in [a for a in stuck if a not in alive]:
        del stuck[addr]
    for run in running.values():  # a job whose worker left will start again elsewhere
        if run.worker is not None and run.worker not in alive:
            run.left.append(run.worker_name or run.worker)
            run.started = run.worker = None
    for kind in {run.job.device for run in running.values()}:
        usable = [a for a in connected.get(kind, ()) if a not in stuck]
        if usable:
            usable_at[kind] = now
            continue
        if now - usable_at[kind] < limits.no_worker_s:
            continue
        why = ("every worker is still busy with a job that timed out" if connected.get(kind)
               else "no worker is connected")
        for key, run in list(running.items()):
            if run.job.device != kind:
                continue
            left = f"; {', '.join(run.left)} left mid-job" if run.left else ""
            run.future.cancel()
            outcomes[run.job] = Outcome(run.job, None, f"{kind}: {why} for "
                                                       f"{limits.no_worker_s:g} s{left}",
                                        run.left[-1] if run.left else None)
            del running[key]
