"""What one distributed run does: the mode, the model, the links to emulate, how often to time.

A ``RunSpec`` travels from the launcher to every worker as command-line options (``argv``), the
same options a user passes to ``python -m edgekit.methods.astra.runtime.worker`` under torchrun.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from edgekit.errors import UsageError
from edgekit.methods.astra.runtime.link import LinkSpec, parse_bandwidth


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
    links: tuple[LinkSpec, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.modes:
            raise UsageError("give at least one --mode")
        for name in ("batch", "reps", "threads", "bp_blocks"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.warmup < 0 or self.budget_s <= 0 or self.timeout_s <= 0:
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
        return args


def spec_options(f):  # noqa: ANN001, ANN201 - click decorator stack
    """The options of ``edgekit astra run`` and of the worker, which rebuild a RunSpec."""
    import click

    from edgekit.methods.astra.runtime.models import MODEL_CONFIGS
    from edgekit.methods.astra.runtime.modes import MODE_NAMES

    count = click.IntRange(min=1)
    positive = click.FloatRange(min=0, min_open=True)
    options = [
        click.option("--mode", "modes", type=click.Choice(MODE_NAMES), default=("astra",),
                     multiple=True, show_default=True,
                     help="Repeat to run several modes in one process group."),
        click.option("--model", type=click.Choice(MODEL_CONFIGS), default="digits",
                     show_default=True, help="digits (tiny, 16 tokens), vit-s or vit-b."),
        click.option("--tokens", type=count, help="Patch tokens (a square number, e.g. 1024)."),
        click.option("--groups", type=count, help="VQ groups G (default: the config's)."),
        click.option("--batch", type=count, default=1, show_default=True),
        click.option("--bandwidth", "bandwidths", multiple=True,
                     help="Emulated link, e.g. 10Mbps, 1Gbps; repeat for several cases "
                          "(default: unshaped)."),
        click.option("--latency-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
                     help="One-way link latency per message."),
        click.option("--loss", type=click.FloatRange(0, 0.5, max_open=True), default=0.0,
                     show_default=True,
                     help="Packet-loss probability (lost packets are resent)."),
        click.option("--link-seed", type=int, default=0, show_default=True,
                     help="Seed of the packet-loss draws."),
        click.option("--reps", type=count, default=3, show_default=True,
                     help="Timed forwards per case (at most)."),
        click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True),
        click.option("--budget-s", type=positive, default=60.0, show_default=True,
                     help="Stop timing a case after this long (at least one rep)."),
        click.option("--timeout", "timeout_s", type=positive, default=60.0, show_default=True,
                     help="Seconds a rank waits for the rendezvous or a collective."),
        click.option("--threads", type=count, default=1, show_default=True,
                     help="torch threads per rank."),
        click.option("--fault", help="Inject a fault: RANK:crash, RANK:kill or RANK:hang."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the (untrained) weights and inputs."),
        click.option("--bp-blocks", type=count, default=4, show_default=True,
                     help="Nb, BP blocks of the block-parallel modes."),
        click.option("--astra-groups", type=count, multiple=True,
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
