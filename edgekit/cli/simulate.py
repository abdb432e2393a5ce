"""``edgekit simulate``: a spiking net on real inputs, priced under neuromorphic cost models."""
from __future__ import annotations

from typing import Any

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import (
    JSON_FILE,
    OUTPUT_FILE,
    SAMPLES,
    SECONDS,
    THREADS,
    TIMESTEPS,
    console,
    data_option,
    err_console,
    input_option,
    write_json,
)
from edgekit.errors import CheckFailed
from edgekit.inputs import parse_inputs
from edgekit.provenance import report_document
from edgekit.spiking.plot import plot_simulation
from edgekit.spiking.simulate import SimulateSettings, load_spiking_source
from edgekit.spiking.simulate import simulate as run_simulation


def _n(value: float) -> str:
    return "-" if not value else f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


def _joules(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:,.3f}"


def render_layers(report: dict[str, Any]) -> Table:
    table = Table(title=f"{escape(report['model'])}: per layer, per inference (T={report['T']}, "
                        f"mean of {report['samples']} samples of {report['inputs']})",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("layer", "type", "fire %", "spikes", "MACs", "ACs", "SOPs", "in rate %"):
        table.add_column(header, justify="left" if header in ("layer", "type") else "right")
    for r in report["layers"]:
        if not (r["macs"] or r["acs"] or r["sops"] or "firing_rate" in r):
            continue
        fire = f"{r['firing_rate'] * 100:.2f}" if "firing_rate" in r else ""
        rate = f"{r['input_rate'] * 100:.2f}" if "input_rate" in r else ""
        table.add_row(escape(r["name"]), r["type"], fire, _n(r.get("spikes", 0)), _n(r["macs"]),
                      _n(r["acs"]), _n(r["sops"]), rate)
    t = report["totals"]
    table.add_row("[bold]total[/bold]", "", f"{t['firing_rate'] * 100:.2f}", _n(t["spikes"]),
                  _n(t["macs"]), _n(t["acs"]), _n(t["sops"]), "")
    return table


def render_attention(report: dict[str, Any]) -> Table:
    table = Table(title="attention: inter-core communication per inference (one token per core, "
                        "the SSA paper's Def. 4.2)", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("block", "kind", "T", "N", "D", "values moved", "formula", "spikes sent"):
        left = header in ("block", "kind", "formula")
        table.add_column(header, justify="left" if left else "right")
    for a in report["attention"]:
        table.add_row(escape(a["name"]), a["kind"], str(a["T"]), str(a["N"]), str(a["D"]),
                      f"{a['values_moved']:,}", a["formula"], _n(a["spikes_moved"]))
    return table


def render_energy(report: dict[str, Any]) -> tuple[Table, list[str]]:
    table = Table(title="energy per inference", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("model", "µJ", "components (µJ)", "cost table"):
        table.add_column(header, justify="right" if header == "µJ" else "left",
                         overflow="fold", no_wrap=header in ("model", "µJ"))
    notes = []
    for e in report["energy"]:
        parts = ", ".join(f"{k} {v * 1e6:.3g}" for k, v in e["components_j"].items())
        table.add_row(e["model"], _joules(e["energy_j"]), parts, escape(e["cost_table"]))
        notes.append(f"{e['model']}: {e['formula']}" + (f"; {e['note']}" if e.get("note") else ""))
    device = report.get("device_energy")
    if device:
        table.add_row(device["model"], _joules(device["energy_j"]),
                      f"torch, batch 1, {device['threads']} thread(s), p50 "
                      f"{device['latency_p50_ms']:.3f} ms",
                      escape(device["source"]))
        if device.get("note"):
            notes.append(f"{device['model']}: {device['note']}")
    return table, notes


def render_target(report: dict[str, Any]) -> Table:
    target = report["target"]
    verdict = "fits" if target["fits"] else "does not fit"
    table = Table(title=f"{report['model']} on {target['display_name']}: {verdict}",
                  box=box.SIMPLE_HEAD)
    for column in ("check", "net needs", "chip offers", "", "what to change"):
        table.add_column(column)
    for check in target["checks"]:
        table.add_row(check["rule"], escape(check["need"]), escape(check["limit"]),
                      "ok" if check["ok"] else "[red]no[/red]",
                      "" if check["ok"] else escape(check["change"]))
    return table


def _target_lines(report: dict[str, Any]) -> list[str]:
    fixed, energy = report["fixed_point"], report["energy"]
    if fixed is None:
        return ["fixed point: not run (the net does not fit the chip)"]
    lines = [f"fixed point ({fixed['weight_bits']}-bit weights, {fixed['state_bits']}-bit "
             f"state, {report['samples']} samples, {report['inputs']}): spike agreement "
             f"{fixed['spike_agreement'] * 100:.2f} %, same predictions "
             f"{fixed['same_predictions']}/{fixed['samples']}"]
    if fixed["float_correct"] is not None:
        lines.append(f"accuracy: float {fixed['float_correct'] / fixed['samples'] * 100:.2f} %,"
                     f" fixed point {fixed['fixed_correct'] / fixed['samples'] * 100:.2f} %")
    joules = energy["energy_j"]
    lines.append("energy per inference (estimate): "
                 + (f"{_joules(joules)} µJ" if joules is not None else "not estimated")
                 + f"; {energy['synaptic_ops']:.4g} synaptic ops. {energy['note']}")
    return lines


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
@click.command("simulate")
@click.argument("model")
@click.option("--checkpoint", type=click.Path(dir_okay=False),
              help="Trained weights for MODEL (.safetensors from 'edgekit train').")
@click.option("--samples", type=SAMPLES, default=100, show_default=True,
              help="Test-split samples to run.")
@click.option("-T", "--timesteps", type=TIMESTEPS, help="Time steps (default: the model's own).")
@click.option("--device", help="Device profile the profiler runs on (default: the detected one).")
@click.option("--chip", default="loihi", show_default=True,
              help="Neuromorphic device profile whose cost table prices the events.")
@click.option("--target", help="A neuromorphic chip to fit the net to (loihi2, speck, "
              "xylo-audio2, xylo-imu): its limits, the net in the chip's fixed point, energy.")
@click.option("--duration", type=SECONDS, default=1.0, show_default=True,
              help="Timed seconds of the profiler run.")
@click.option("--threads", type=THREADS,
              help="Profiler intra-op threads (default: all usable cores).")
@click.option("--no-profile", is_flag=True, help="Skip the profiler's energy on --device.")
@data_option
@click.option("--plot", "plot_path", type=OUTPUT_FILE,
              help="Write a per-layer bar plot (PNG).")
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the report as JSON.")
@input_option
def simulate(model: str, checkpoint: str | None, samples: int, timesteps: int | None,
             device: str | None, chip: str, target: str | None, duration: float,
             threads: int | None, no_profile: bool, data: str | None,
             plot_path: str | None, json_path: str | None, inputs: tuple[str, ...]) -> None:
    """Simulate a spiking net: firing rates, operations, energy.

    \b
    Runs MODEL on real inputs: firing rates, MACs, ACs, SOPs, inter-core communication, and
    energy under the 45 nm and neuromorphic cost models beside the profiler's energy for the same
    inference on --device. MODEL is a built-in spiking net or its checkpoint, or your own
    spiking module (file.py:callable returning an edgekit MultiStepNet), run on --data FILE.npz
    (its input's array and labels) or else on random example inputs.

    \b
    With --target CHIP: whether the net fits the chip (each published limit, and what to change
    where it does not), its spikes and accuracy in the chip's integer widths, and an energy
    estimate; exits 1 when it does not fit.
    """
    settings = SimulateSettings(samples=samples, timesteps=timesteps, chip=chip, device=device,
                                profile_device=not no_profile, duration_s=duration,
                                threads=threads, data=data)
    source = load_spiking_source(model, checkpoint, timesteps, inputs=parse_inputs(inputs))
    if target is not None:
        _simulate_on_target(source, target, settings, json_path)
        return
    with console.status(f"simulating {source.name}..."):
        report = run_simulation(source, settings)
    console.print(render_layers(report))
    if report["attention"]:
        console.print(render_attention(report))
    table, notes = render_energy(report)
    console.print(table)
    for note in notes:
        console.print(f"  {escape(note)}", highlight=False)
    weights = (f"checkpoint {report['source']['checkpoint']}" if "checkpoint" in report["source"]
               else "your weights" if "origin" in report["source"] else "untrained weights")
    accuracy = (f"{report['accuracy'] * 100:.2f}%" if report["accuracy"] is not None
                else "not scored (no labels)")
    console.print(f"accuracy on these samples: {accuracy} ({weights}; {report['inputs']}); "
                  f"counts: {escape(report['counters'])}")
    if plot_path:
        plot_simulation(report, plot_path)
        err_console.print(f"[dim]wrote {plot_path}[/dim]")
    write_json(json_path, report_document("simulate", report))


def _simulate_on_target(source: Any, target: str, settings: SimulateSettings,
                        json_path: str | None) -> None:
    from edgekit.neuromorphic.target import simulate_on_target

    with console.status(f"fitting {source.name} to {target}..."):
        report = simulate_on_target(source, target, settings)
    console.print(render_target(report))
    for line in _target_lines(report):
        console.print(f"  {escape(line)}", highlight=False)
    write_json(json_path, report_document("simulate", report))
    if not report["target"]["fits"]:
        failed = [c["rule"] for c in report["target"]["checks"] if not c["ok"]]
        raise CheckFailed(f"{source.name} does not fit {target}: {', '.join(failed)}")
