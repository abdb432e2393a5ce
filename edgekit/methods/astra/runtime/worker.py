"""One rank of a distributed run: ``python -m edgekit.methods.astra.runtime.worker [options]``.

Started by ``edgekit astra run`` (which passes ``--workdir`` and ``--result``) or by torchrun::

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
        -m edgekit.methods.astra.runtime.worker --mode astra --model vit-s --tokens 1024 \
        --bandwidth 10Mbps --json astra.json

Every rank builds the same seeded model, joins the group from the environment, warms up, then
times each (mode, emulated link) case in rotating rounds. Rank 0 writes the result. Any failure
becomes one line (``WORKDIR/rankN.error`` for the launcher, stderr under torchrun) and exit
status 1.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click
import torch
import torch.distributed as dist

from edgekit.fileio import atomic_write_json
from edgekit.methods.astra.runtime.all_modes import make_mode
from edgekit.methods.astra.runtime.collectives import Comm
from edgekit.methods.astra.runtime.group import backend, join, leave, parse_fault, staged
from edgekit.methods.astra.runtime.lifeline import bind_to_launcher
from edgekit.methods.astra.runtime.link import LinkSpec
from edgekit.methods.astra.runtime.models import build_model, example_images
from edgekit.methods.astra.runtime.spec import RunSpec, spec_from_options, spec_options


def _gather(record: dict[str, Any], world: int) -> list[dict[str, Any]]:
    """Every rank's record of one forward (an uncounted, unshaped exchange of a few bytes)."""
    if world == 1:
        return [record]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, record)
    return out


def _sync(world: int) -> None:
    if world > 1:
        dist.barrier()


def _timed_forward(mode: Any, comm: Comm, tokens: torch.Tensor, world: int
                   ) -> tuple[list[dict[str, Any]], torch.Tensor | None]:
    _sync(world)
    comm.reset()
    start = time.perf_counter()
    logits = mode.forward(tokens)
    if tokens.is_cuda:  # kernels run asynchronously: the pass ends when the GPU is done
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    stats = comm.reset()
    record = {"rank": comm.rank, "latency_s": elapsed, "compute_s": elapsed - stats.waited_s,
              "comm_measured_s": stats.measured_s, "comm_emulated_s": stats.emulated_s,
              "comm_slept_s": stats.slept_s,
              "bytes_sent": stats.bytes_sent, "messages": stats.messages,
              "collectives": stats.calls, "bytes_by_op": stats.by_op}
    return _gather(record, world), logits


def _time_cases(spec: RunSpec, modes: list[tuple[Any, torch.Tensor]], comm: Comm,
                world: int) -> dict[str, dict[str, Any]]:
    """Time every (mode, link) case once per round, rotating the order between rounds, so a
    burst of load from other processes spoils one round of every case rather than every round
    of one case. A case whose timed forwards passed ``budget_s`` sits out later rounds.
    The decisions use the gathered records, so every rank takes the same ones."""
    for mode, tokens in modes:
        comm.set_link(LinkSpec(None))
        for _ in range(spec.warmup):
            _timed_forward(mode, comm, tokens, world)
    cases = [(mode, tokens, link) for mode, tokens in modes for link in spec.links]
    reps: list[list[list[dict[str, Any]]]] = [[] for _ in cases]
    spent = [0.0] * len(cases)
    logits: dict[str, Any] = {}
    for round_ in range(spec.reps):
        shift = round_ * len(cases) // spec.reps
        for i in [*range(shift, len(cases)), *range(shift)]:
            if round_ and spent[i] >= spec.budget_s:
                continue
            mode, tokens, link = cases[i]
            comm.set_link(link)
            records, logits[mode.name] = _timed_forward(mode, comm, tokens, world)
            reps[i].append(records)
            latency = max(r["latency_s"] for r in records)
            spent[i] += latency
            if comm.rank == 0:
                print(f"round {round_ + 1}/{spec.reps} {mode.name} "
                      f"{link.describe()['bandwidth']}: {latency:.3f} s", flush=True)
    runs: dict[str, dict[str, Any]] = {mode.name: {"cases": []} for mode, _ in modes}
    for (mode, _, link), case_reps in zip(cases, reps, strict=False):
        runs[mode.name]["cases"].append({
            "link": link.describe(),
            "latency_s": [max(r["latency_s"] for r in records) for records in case_reps],
            "ranks": case_reps})
    if spec.keep_logits:
        for name, value in logits.items():
            if value is not None:
                runs[name]["logits"] = value.tolist()
    return runs


def _extra_astra(spec: RunSpec, comm: Comm) -> list[tuple[Any, torch.Tensor]]:
    """ASTRA on the same model at other VQ group counts, named ``astra-gG``."""
    extra = []
    for groups in spec.astra_groups:
        model = build_model(spec.model, spec.seed, spec.tokens, groups).to(spec.device)
        mode = make_mode("astra", model, comm)
        mode.name = f"astra-g{groups}"
        images = example_images(model, spec.batch, spec.seed).to(spec.device)
        extra.append((mode, model.embed(images)))
    return extra


def run(spec: RunSpec) -> dict[str, Any] | None:
    """This rank's part of ``spec``; rank 0 returns the result, the others None."""
    torch.set_num_threads(spec.threads)
    rank, world = join(spec.timeout_s, spec.device)
    fault = parse_fault(spec.fault, world)
    with torch.inference_mode():
        model = build_model(spec.model, spec.seed, spec.tokens, spec.groups).to(spec.device)
        images = example_images(model, spec.batch, spec.seed).to(spec.device)
        tokens = model.embed(images)  # [B, T, D]
        device = tokens.device
        comm = Comm(LinkSpec(None), rank, world, device, staged(spec.device, world))
        modes = [(make_mode(name, model, comm, spec.bp_blocks, spec.seed), tokens)
                 for name in spec.modes]
        modes += _extra_astra(spec, comm)
        if fault is not None:
            _sync(world)
            fault.fire(rank)
        runs = _time_cases(spec, modes, comm, world)
    if rank != 0:
        return None
    cfg = model.config
    return {"model": spec.model, "world_size": world, "backend": backend(spec.device, world),
            "device": str(device), "exchange_via_host": comm.staged,
            "threads": spec.threads, "batch": spec.batch, "tokens": cfg.num_tokens,
            "dim": cfg.dim, "depth": cfg.depth, "heads": cfg.heads, "groups": cfg.groups,
            "codes": cfg.codes, "bp_blocks": spec.bp_blocks,
            "load_average": list(os.getloadavg()), "modes": runs}


_PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe",
              "connection refused", "socket closed")


def describe_error(exc: BaseException, timeout_s: float) -> tuple[str, bool]:
    """One line for ``exc``, and whether it is only a symptom of a peer's failure."""
    text = " ".join(str(exc).split())
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return f"timed out after {timeout_s:g} s waiting for a peer ({type(exc).__name__})", True
    lost = next((s for s in _PEER_LOST if s in lowered), None)
    if lost is not None:
        return f"lost connection to a peer ({type(exc).__name__}: {lost})", True
    return f"{type(exc).__name__}: {text[:240]}", False


def _fail(rank: str, workdir: str | None, exc: BaseException, timeout_s: float) -> None:
    """The launcher reads the line from WORKDIR; under torchrun it goes to stderr."""
    line, peer = describe_error(exc, timeout_s)
    if workdir is None:
        click.echo(f"edgekit astra worker: rank {rank}: {line}", err=True)
        return
    (Path(workdir) / f"rank{rank}.error").write_text(line + "\n")
    if peer:
        (Path(workdir) / f"rank{rank}.peer").write_text("")


@click.command()
@spec_options
@click.option("--workdir", type=click.Path(file_okay=False), help="The launcher's folder.")
@click.option("--result", type=click.Path(dir_okay=False), help="Raw result (rank 0).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Report with provenance (rank 0), for runs under torchrun.")
def main(workdir: str | None, result: str | None, json_path: str | None, **options: Any) -> None:
    """One rank of an ASTRA runtime run (see the module docstring)."""
    bind_to_launcher()  # a launcher killed with SIGKILL takes this rank with it
    rank = os.environ.get("RANK", "?")
    timeout_s = options.get("timeout_s", 60.0)
    try:
        spec = spec_from_options(options)
        out = run(spec)
        if out is not None:
            if result is not None:
                atomic_write_json(result, out)
            if json_path is not None:
                from edgekit.methods.astra.runtime.report import run_report

                atomic_write_json(json_path, run_report(spec, out))
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and status 1
        _fail(rank, workdir, exc, timeout_s)
        sys.exit(1)
    finally:
        leave()


if __name__ == "__main__":
    main()
