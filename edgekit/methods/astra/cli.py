"""``edgekit astra``: the ASTRA runtime over torch.distributed (arXiv 2505.19342).

    run      run modes on N local processes (gloo), with emulated links; --json report
    bench    latency of every mode at several bandwidths vs the single device, the analytic
             model's check and its 4- and 8-device projections
    model    the analytic latency model alone: predictions for any world size and bandwidth
"""
from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import (
    COUNT,
    JSON_FILE,
    SECONDS,
    THREADS,
    FiniteFloatRange,
    console,
    err_console,
    write_json,
)
from edgekit.errors import UsageError
from edgekit.methods.astra.runtime.all_modes import MODE_CLASSES, MULTI_MODES
from edgekit.methods.astra.runtime.bench import run_bench
from edgekit.methods.astra.runtime.latency_model import (
    Workload,
    calibrate_rate,
    compute_at,
    flops_per_rank,
    predict,
)
from edgekit.methods.astra.runtime.launch import launch
from edgekit.methods.astra.runtime.link import LinkSpec, parse_bandwidth
from edgekit.methods.astra.runtime.models import MODEL_CONFIGS, model_config
from edgekit.methods.astra.runtime.report import run_report, summarise
from edgekit.methods.astra.runtime.spec import (
    LATENCY_MS,
    LOSS,
    TOKENS,
    WORLD_SIZE,
    RunSpec,
    spec_from_options,
    spec_options,
)
from edgekit.provenance import report_document

# Ranks of the analytic model (nothing is spawned): 4096 devices is beyond any edge cluster.
MODEL_WORLD_SIZE = click.IntRange(1, 4096)
# Compute rate in GFLOP/s: 10^9 GFLOP/s (an exaflop) is beyond any single device.
GFLOPS = FiniteFloatRange(min=0, max=1e9, min_open=True)


@click.group("astra")
def astra() -> None:
    """ASTRA: multi-device inference with VQ-compressed token exchange."""


def _progress(line: str) -> None:
    err_console.print(f"[dim]{escape(line)}[/dim]")


def validate(spec: RunSpec, world_size: int) -> None:
    """Reject what the workers would reject, before any process starts (exit 2)."""
    from edgekit.methods.astra.runtime.group import check_device, parse_fault

    check_device(spec.device)
    dim = model_config(spec.model, spec.tokens, spec.groups)["dim"]
    for groups in (spec.groups, *spec.astra_groups):
        if groups is not None and (groups < 1 or dim % groups):
            raise UsageError(f"VQ groups {groups} must be a positive divisor of dim {dim}")
    if spec.astra_groups and world_size == 1:
        raise UsageError("--astra-groups needs more than one rank")
    for name in spec.modes:
        if MODE_CLASSES[name].multi_rank != (world_size > 1):
            need = "more than one rank" if MODE_CLASSES[name].multi_rank else "--world-size 1"
            raise UsageError(f"mode '{name}' needs {need}")
    parse_fault(spec.fault, world_size)


def render_run(result: dict[str, Any]) -> Table:
    table = Table(title=f"ASTRA runtime · {result['model']} · {result['tokens']} tokens · "
                        f"{result['world_size']} rank(s) × {result['threads']} thread(s) · "
                        f"{result['backend']} on {result.get('device', 'cpu')}"
                        f"{' via host memory' if result.get('exchange_via_host') else ''}")
    for col in ("mode", "link", "reps", "latency (s)", "compute (s)", "comm measured (s)",
                "wire emulated (s)", "wire waited (s)", "bytes sent", "bytes/token/block"):
        table.add_column(col, justify="left" if col in ("mode", "link") else "right")
    for mode, cases in summarise(result).items():
        for c in cases:
            table.add_row(mode, c["bandwidth"], str(c["reps"]), f"{c['latency_s']:.4f}",
                          f"{c['compute_s']:.4f}", f"{c['comm_measured_s']:.4f}",
                          f"{c['comm_emulated_s']:.4f}", f"{c['comm_slept_s']:.4f}",
                          f"{c['bytes_sent_all_ranks']:,}",
                          f"{c['bytes_per_token_per_block']:.1f}")
    return table


@astra.command("run")
@click.option("--world-size", type=WORLD_SIZE, default=2, show_default=True,
              help="Local processes to spawn (ranks).")
@spec_options
@click.option("--json", "json_path", type=JSON_FILE, help="Write the report.")
def run(world_size: int, json_path: str | None, **options: Any) -> None:
    """Run modes on local processes with emulated links.

    Spawns WORLD_SIZE ranks (gloo on CPU; with --device cuda, NCCL when each rank has a GPU of
    its own, else gloo with ranks sharing the GPU); without --mode it runs ASTRA itself.
    """
    spec = spec_from_options(options)
    validate(spec, world_size)
    result = launch(spec, world_size, echo=_progress)
    console.print(render_run(result))
    write_json(json_path, run_report(spec, result))


def render_bench(body: dict[str, Any]) -> Table:
    w = body["workload"]
    table = Table(title=f"ASTRA bench · {w['tokens']} tokens, D={w['dim']}, depth {w['depth']} · "
                        f"{body['settings']['world_size']} ranks × "
                        f"{body['settings']['threads']} thread · median latency (s)")
    bandwidths = body["settings"]["bandwidths"]
    for col in ("mode", "bytes/token/block", *bandwidths, *(f"speed-up @{b}" for b in bandwidths)):
        table.add_column(col, justify="left" if col == "mode" else "right")
    single = body["measured"]["single"]["unshaped"]["latency_s"]
    for name, cases in body["measured"].items():
        first = next(iter(cases.values()))
        cells = [f"{cases[b]['latency_s']:.3f}" if b in cases else f"{single:.3f}"
                 for b in bandwidths]
        ups = [f"{single / cases[b]['latency_s']:.2f}x" if b in cases else "1.00x"
               for b in bandwidths]
        table.add_row(name, f"{first['bytes_per_token_per_block']:.1f}", *cells, *ups)
    return table


@astra.command("bench")
@click.option("--model", type=click.Choice(MODEL_CONFIGS), default="vit-s", show_default=True)
@click.option("--tokens", type=TOKENS, default=1024, show_default=True)
@click.option("--bandwidth", "bandwidths", multiple=True,
              default=("10Mbps", "100Mbps", "1Gbps"), show_default=True)
@click.option("--world-size", type=click.IntRange(2, WORLD_SIZE.max), default=2,
              show_default=True)
@click.option("--threads", type=THREADS, default=1, show_default=True)
@click.option("--reps", type=COUNT, default=3, show_default=True)
@click.option("--budget-s", type=SECONDS, default=12.0, show_default=True,
              help="Timing per case stops after this long (at least one rep).")
@click.option("--latency-ms", type=LATENCY_MS, default=0.0, show_default=True)
@click.option("--loss", type=LOSS, default=0.0, show_default=True)
@click.option("--extra-groups", type=COUNT, multiple=True, default=(1,), show_default=True,
              help="Also run ASTRA at these VQ group counts.")
@click.option("--json", "json_path", type=JSON_FILE, help="Write the report.")
def bench(json_path: str | None, **options: Any) -> None:
    """Latency per mode and bandwidth against one device.

    Checks the analytic latency model against the measurements.
    """
    options["bandwidths"] = tuple(options["bandwidths"])
    options["extra_groups"] = tuple(options["extra_groups"])
    for b in options["bandwidths"]:
        parse_bandwidth(b)
    validate(RunSpec(modes=MULTI_MODES, model=options["model"], tokens=options["tokens"],
                     threads=options["threads"], reps=options["reps"],
                     astra_groups=options["extra_groups"]), options["world_size"])
    body = run_bench(**options, echo=_progress)
    console.print(render_bench(body))
    write_json(json_path, report_document("astra/bench", body))


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
@astra.command("model")
@click.option("--model", type=click.Choice(MODEL_CONFIGS), default="vit-s", show_default=True)
@click.option("--tokens", type=TOKENS, default=1024, show_default=True)
@click.option("--groups", type=COUNT, help="VQ groups G (default: the config's).")
@click.option("--bandwidth", "bandwidths", multiple=True,
              default=("10Mbps", "100Mbps", "1Gbps"), show_default=True)
@click.option("--world-size", "world_sizes", type=MODEL_WORLD_SIZE, multiple=True,
              default=(2, 4, 8), show_default=True)
@click.option("--latency-ms", type=LATENCY_MS, default=0.0, show_default=True)
@click.option("--loss", type=LOSS, default=0.0, show_default=True)
@click.option("--gflops", type=GFLOPS, help="Compute rate per device (default: a device "
              "profile's fp32 peak with --profile, else 50 GFLOP/s).")
@click.option("--profile", "profile_name", help="Device profile whose fp32 peak is the rate.")
@click.option("--single-s", type=SECONDS, help="Calibrate the rate from a measured single-device "
              "latency instead (seconds per forward).")
@click.option("--measure", is_flag=True, help="Measure each mode's rank compute here (one "
              "thread, no network) instead of FLOPs / rate.")
@click.option("--json", "json_path", type=JSON_FILE, help="Write the report.")
def model(model: str, tokens: int, groups: int | None, bandwidths: tuple[str, ...],
          world_sizes: tuple[int, ...], latency_ms: float, loss: float, gflops: float | None,
          profile_name: str | None, single_s: float | None, measure: bool,
          json_path: str | None) -> None:
    """Predict the latency of every mode (analytic model).

    Rank compute (FLOPs / rate, or measured) plus the wire time of its exchange pattern.
    """
    cfg = model_config(model, tokens, groups)
    if groups is not None and cfg["dim"] % groups:
        raise UsageError(f"VQ groups {groups} must be a positive divisor of dim {cfg['dim']}")
    w = Workload(tokens=(cfg["image_size"] // cfg["patch_size"]) ** 2, dim=cfg["dim"],
                 depth=cfg["depth"], heads=cfg["heads"], mlp_ratio=cfg["mlp_ratio"],
                 groups=cfg["groups"], codes=cfg["codes"])
    rate, source = _rate(w, gflops, profile_name, single_s)
    measured = None
    if measure:
        from edgekit.methods.astra.runtime.calibrate import measure_compute

        measured = measure_compute(model, tokens, {m: groups for m in ("single", *MULTI_MODES)},
                                   world_sizes, echo=_progress)
        source = "compute measured here, 1 thread"

    def compute(mode: str, n: int) -> float:
        if measured is None:
            return flops_per_rank(mode, w, n) / rate
        return compute_at(mode, w, n, measured[mode])[0]

    rows = []
    rate_text = source if measured else f"{rate / 1e9:.1f} GFLOP/s ({source})"
    table = Table(title=f"ASTRA latency model · {model}, {w.tokens} tokens, G={w.groups} · "
                        f"{rate_text} · predicted seconds")
    for col in ("mode", "bandwidth", *(f"N={n}" for n in world_sizes)):
        table.add_column(col, justify="left" if col in ("mode", "bandwidth") else "right")
    for mode in MULTI_MODES:
        for b in bandwidths:
            link = LinkSpec(parse_bandwidth(b), latency_ms / 1e3, loss)
            preds = {n: predict(mode, w, n, link, compute(mode, n)) for n in world_sizes}
            rows.append({"mode": mode, "bandwidth": b, **{f"n{n}": p for n, p in preds.items()}})
            table.add_row(mode, b, *(f"{p['latency_s']:.3f}" for p in preds.values()))
    single = compute("single", 1)
    table.add_row("single", "-", *(f"{single:.3f}" for _ in world_sizes))
    console.print(table)
    write_json(json_path, report_document("astra/model", {
        "workload": vars(w), "rate_gflops": None if measured else rate / 1e9,
        "compute_source": source,
        "single_s": single, "predictions": rows}))


def _rate(w: Workload, gflops: float | None, profile_name: str | None,
          single_s: float | None) -> tuple[float, str]:
    if single_s is not None:
        return calibrate_rate(w, single_s), f"calibrated from --single-s {single_s:g}"
    if profile_name is not None:
        from edgekit.profiles import load_profile

        peak = load_profile(profile_name).peak_for("fp32")
        if peak is None:
            raise UsageError(f"profile '{profile_name}' has no fp32 peak",
                             hint="pass --gflops or --single-s")
        return peak, f"profile {profile_name} fp32 peak"
    return (gflops or 50.0) * 1e9, "--gflops" if gflops else "assumed 50 GFLOP/s"


COMMANDS = [astra]
