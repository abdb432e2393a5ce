"""What one distributed run does: the mode, the model, the links to emulate, how often to time.

A ``RunSpec`` travels from the launcher to every worker as command-line options (``argv``), the
same options a user passes to ``python -m edgekit.methods.astra.runtime.worker`` under torchrun.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import click

from edgekit.bounds import BATCH, COUNT, SECONDS, SEED, THREADS, FiniteFloatRange
from edgekit.errors import UsageError
from edgekit.methods.astra.runtime.link import LinkSpec, parse_bandwidth

# Bounds of the options below (and of ``edgekit astra``'s), so a bad value is one usage line
# before any process starts.
# Packet-loss probability, the range LinkSpec accepts.
LOSS = FiniteFloatRange(0, 0.5, max_open=True)
# One-way link latency: an hour per message is beyond any real link.
LATENCY_MS = FiniteFloatRange(min=0, max=3.6e6)
# Patch tokens: 2^20 tokens' attention matrices do not fit in any edge device's memory.
TOKENS = click.IntRange(1, 2**20)
# Local processes to spawn: each rank is a full Python + torch process (~300 MB); 256 of them
# already exceed a workstation's memory.
WORLD_SIZE = click.IntRange(1, 256)


@dataclass(frozen=True)
class RunSpec:
    modes: tuple[str, ...]  # run one after the other in the same process group
    model: str = "digits"
    tokens: int | None = None  # patch tokens (a square number); None: the config's own
    groups: int | None = None  # VQ groups G override; None: the config's own
    batch: int = 1
    bandwidths: tuple[str, ...] = ()  # one timed case per bandwidth; () = one unshaped case
    latency_ms: float = 0.0
    loss: float = 0.0
    link_seed: int = 0
    reps: int = 3  # timed forwards per case (at most)
    warmup: int = 1  # untimed forwards on an unshaped link before the cases
    budget_s: float = 60.0  # a case stops after this much timing, with at least one rep
    timeout_s: float = 60.0  # rendezvous and every collective
    threads: int = 1
    fault: str | None = None  # "RANK:crash|kill|hang"
    seed: int = 0
    bp_blocks: int = 4
    astra_groups: tuple[int, ...] = ()  # also run ASTRA at these VQ group counts (astra-gG)
    keep_logits: bool = False
    device: str = "cpu"  # where each rank computes: cpu, or cuda (ranks share GPUs if too few)
    links: tuple[LinkSpec, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.modes:
            raise UsageError("give at least one --mode")
        if self.device not in ("cpu", "cuda"):
            raise UsageError(f"unknown device '{self.device}': cpu or cuda")
        for name in ("batch", "reps", "threads", "bp_blocks"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        # "not x > 0" also refuses nan; an infinite budget or timeout never ends.
        if not (self.warmup >= 0 and 0 < self.budget_s < math.inf
                and 0 < self.timeout_s < math.inf):
            raise UsageError("--warmup must be >= 0, --budget-s and --timeout positive")
        links = tuple(LinkSpec(parse_bandwidth(b), self.latency_ms / 1e3, self.loss,
                               self.link_seed) for b in self.bandwidths)
        if not links:
            links = (LinkSpec(None, self.latency_ms / 1e3, self.loss, self.link_seed),)
        object.__setattr__(self, "links", links)

    def argv(self) -> list[str]:
        """The worker command-line options that rebuild this spec."""
        args = ["--model", self.model, "--batch", str(self.batch),
                "--latency-ms", repr(self.latency_ms), "--loss", repr(self.loss),
                "--link-seed", str(self.link_seed), "--reps", str(self.reps),
                "--warmup", str(self.warmup), "--budget-s", repr(self.budget_s),
                "--timeout", repr(self.timeout_s), "--threads", str(self.threads),
                "--seed", str(self.seed), "--bp-blocks", str(self.bp_blocks)]
        for mode in self.modes:
            args += ["--mode", mode]
        for bandwidth in self.bandwidths:
            args += ["--bandwidth", bandwidth]
        for groups in self.astra_groups:
            args += ["--astra-groups", str(groups)]
        for name, value in (("--tokens", self.tokens), ("--groups", self.groups),
                            ("--fault", self.fault)):
            if value is not None:
                args += [name, str(value)]
        if self.keep_logits:
            args.append("--keep-logits")
        args += ["--device", self.device]
        return args


def spec_options(f):  # noqa: ANN001, ANN201 - click decorator stack
    """The options of ``edgekit astra run`` and of the worker, which rebuild a RunSpec."""
    import click

    from edgekit.methods.astra.runtime.all_modes import MODE_NAMES
    from edgekit.methods.astra.runtime.group import DEVICES
    from edgekit.methods.astra.runtime.models import MODEL_CONFIGS

    options = [
        click.option("--mode", "modes", type=click.Choice(MODE_NAMES), default=("astra",),
                     multiple=True, show_default=True,
                     help="Repeat to run several modes in one process group."),
        click.option("--model", type=click.Choice(MODEL_CONFIGS), default="digits",
                     show_default=True, help="digits (tiny, 16 tokens), vit-s or vit-b."),
        click.option("--tokens", type=TOKENS, help="Patch tokens (a square number, e.g. 1024)."),
        click.option("--groups", type=COUNT, help="VQ groups G (default: the config's)."),
        click.option("--batch", type=BATCH, default=1, show_default=True),
        click.option("--bandwidth", "bandwidths", multiple=True,
                     help="Emulated link, e.g. 10Mbps, 1Gbps; repeat for several cases "
                          "(default: unshaped)."),
        click.option("--latency-ms", type=LATENCY_MS, default=0.0, show_default=True,
                     help="One-way link latency per message."),
        click.option("--loss", type=LOSS, default=0.0,
                     show_default=True,
                     help="Packet-loss probability (lost packets are resent)."),
        click.option("--link-seed", type=SEED, default=0, show_default=True,
                     help="Seed of the packet-loss draws."),
        click.option("--reps", type=COUNT, default=3, show_default=True,
                     help="Timed forwards per case (at most)."),
        click.option("--warmup", type=click.IntRange(0, 2**31 - 1), default=1, show_default=True),
        click.option("--budget-s", type=SECONDS, default=60.0, show_default=True,
                     help="Stop timing a case after this long (at least one rep)."),
        click.option("--timeout", "timeout_s", type=SECONDS, default=60.0, show_default=True,
                     help="Seconds a rank waits for the rendezvous or a collective."),
        click.option("--threads", type=THREADS, default=1, show_default=True,
                     help="torch threads per rank."),
        click.option("--device", type=click.Choice(DEVICES), default="cpu",
                     show_default=True,
                     help="Where each rank computes. cuda with fewer GPUs than ranks shares "
                          "them over gloo, exchanging through host memory."),
        click.option("--fault", help="Inject a fault: RANK:crash, RANK:kill or RANK:hang."),
        click.option("--seed", type=SEED, default=0, show_default=True,
                     help="Seed of the (untrained) weights and inputs."),
        click.option("--bp-blocks", type=COUNT, default=4, show_default=True,
                     help="Nb, BP blocks of the block-parallel modes."),
        click.option("--astra-groups", type=COUNT, multiple=True,
                     help="Also run ASTRA at these VQ group counts (modes astra-gG)."),
        click.option("--keep-logits", is_flag=True, help="Put rank 0's logits in the result."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def spec_from_options(options: dict) -> RunSpec:
    """A RunSpec from ``spec_options``' values (other keys are left to the caller)."""
    names = {f for f in RunSpec.__dataclass_fields__ if f != "links"}
    values = {k: v for k, v in options.items() if k in names}
    values["bandwidths"] = tuple(values.get("bandwidths", ()))
    values["modes"] = tuple(values.get("modes", ()))
    values["astra_groups"] = tuple(values.get("astra_groups", ()))
    return RunSpec(**values)
