"""Joining the process group, and the faults a test or a user can inject into one rank.

Both ``edgekit astra run`` (which spawns local workers) and ``torchrun`` pass the rendezvous in
the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so a worker joins the same way in
both cases. The group's timeout bounds rendezvous and every collective: a peer that died or hangs
turns into an error on the others after at most that long, never a hang.
"""
from __future__ import annotations

import datetime as _dt
import os
import signal
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from edgekit.errors import UsageError

ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
FAULTS = ("crash", "kill", "hang")


@dataclass(frozen=True)
class Fault:
    """``rank`` raises (crash), SIGKILLs itself (kill) or sleeps forever (hang) at its first
    forward pass, while its peers wait for it in a collective."""

    rank: int
    kind: str

    def fire(self, rank: int) -> None:
        if rank != self.rank:
            return
        if self.kind == "crash":
            raise RuntimeError(f"injected fault: rank {rank} crashed")
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang: the peers' collective timeout must end the run
            time.sleep(3600)


def parse_fault(text: str | None, world_size: int) -> Fault | None:
    """``1:kill`` -> Fault(rank=1, kind="kill"); None passes through."""
    if text is None:
        return None
    rank_text, _, kind = text.partition(":")
    if not rank_text.isdigit() or kind not in FAULTS:
        raise UsageError(f"bad --fault '{text}'",
                         hint=f"RANK:KIND with KIND in {', '.join(FAULTS)}")
    if int(rank_text) >= world_size:
        raise UsageError(f"--fault rank {rank_text} is not below the world size {world_size}")
    return Fault(int(rank_text), kind)


def env_rendezvous() -> bool:
    """True when the environment names a process group to join (torchrun or the launcher)."""
    return all(name in os.environ for name in ENV_VARS)


DEVICES = ("cpu", "cuda")


def backend(device: str, world_size: int) -> str:
    """NCCL when every rank has a GPU of its own; else gloo, which exchanges CUDA tensors through
    host memory when several ranks share one GPU (``staged``)."""
    if device == "cuda" and torch.cuda.device_count() >= world_size > 1:
        return "nccl"
    return "gloo"


def staged(device: str, world_size: int) -> bool:
    """True when collectives must copy through host memory (gloo with CUDA tensors)."""
    return device == "cuda" and backend(device, world_size) == "gloo"


def check_device(device: str) -> None:
    """Refuse a device this machine does not have, before any rank starts (exit 2)."""
    if device not in DEVICES:
        raise UsageError(f"unknown device '{device}'", hint=f"one of {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device on this machine",
                         hint="use --device cpu, or a CUDA build of torch on a GPU machine")


def join(timeout_s: float, device: str = "cpu") -> tuple[int, int]:
    """Join the group named by the environment; returns (rank, world size)."""
    if not env_rendezvous():
        missing = ", ".join(v for v in ENV_VARS if v not in os.environ)
        raise UsageError(f"no process group to join: {missing} not set",
                         hint="start workers with `edgekit astra run` or torchrun")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device == "cuda":  # one GPU per rank where there are enough, else ranks share them
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local % torch.cuda.device_count())
    if world > 1:
        dist.init_process_group(backend(device, world), init_method="env://", rank=rank,
                                world_size=world, timeout=_dt.timedelta(seconds=timeout_s))
    return rank, world


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
