"""``edgekit validate``: run an artifact on its saved reference input and compare, per output."""
from __future__ import annotations

import click
from rich.table import Table

from edgekit.cli.common import (
    JSON_FILE,
    NON_NEGATIVE,
    console,
    err_console,
    input_option,
    write_json,
)
from edgekit.exporters import ValidationFailed, ValidationReport
from edgekit.exporters.artifact_validation import AGAINST
from edgekit.exporters.run import validate as run_validate
from edgekit.exporters.validate import SCALE_SHARE
from edgekit.inputs import parse_inputs
from edgekit.provenance import report_document


def render_statistics(report: ValidationReport) -> Table:
    table = Table(title=f"error against {report.against}", title_style="bold")
    for column in ("output", "shape", "max abs", "median", "p90", "p95", "p99", "max rel",
                   "median rel", "p90 rel", "p95 rel", "p99 rel", "outside"):
        table.add_column(column, justify="left" if column in ("output", "shape") else "right")
    for o in report.outputs:
        if o.shape != o.reference_shape:
            table.add_row(o.name, f"{o.shape} != {o.reference_shape}", *["-"] * 10, "all")
            continue
        table.add_row(o.name, "x".join(map(str, o.shape)),
                      *(f"{v:.3g}" for v in (o.max_abs, o.median_abs, o.p90_abs, o.p95_abs,
                                             o.p99_abs, o.max_rel, o.median_rel, o.p90_rel,
                                             o.p95_rel, o.p99_rel)),
                      f"{o.mismatched}/{o.elements}")
    return table


@click.command("validate")
@click.argument("target")
@click.option("--against", type=click.Choice(AGAINST), default="reference", show_default=True,
              help="reference: the saved PyTorch FP32 outputs; torch: PyTorch run now on the "
                   "source checkpoint; onnxruntime: an engine's own ONNX model.")
@click.option("--atol", type=NON_NEGATIVE,
              help="Absolute tolerance (default: the export's; at least 1e-2 for fp16 and 1e-1 "
                   "for int8 engines; for an fp16/int8 ONNX artifact, per output, 16 grid "
                   "units of the reference's largest magnitude).")
@click.option("--rtol", type=NON_NEGATIVE, help="Relative tolerance (default: as --atol).")
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the report as JSON.")
@input_option
def validate(target: str, against: str, atol: float | None, rtol: float | None,
             json_path: str | None, inputs: tuple[str, ...]) -> None:
    """Check an export against PyTorch, output by output.

    \b
    TARGET is an artifact folder (ONNX artifact, TensorRT engine or Jetson bundle), run on its
    saved reference input and compared output by output, Polygraphy-style. A model (registry
    name, checkpoint, .pt2 file, file.py:callable, package.module:callable) is first exported
    to ONNX in a temporary folder; an .onnx file, which has no PyTorch source, is checked
    against ONNX Runtime running the graph as written (FP32, CPU, graph optimisations off).
    Exits 1 beyond tolerance.
    """
    checked = run_validate(target, against, atol, rtol, inputs=tuple(parse_inputs(inputs)))
    art, report, why = checked.artifact, checked.report, checked.tolerance_basis
    precision = ((art.manifest.get("tensorrt") or {}).get("precision")
                 or art.manifest.get("precision", "fp32"))
    first = report.outputs[0] if report.outputs else None
    console.print(f"validating {art.folder} ({art.format}, {precision}) against {report.against} "
                  f"on {report.inputs}")
    ok = report.passed
    for line in report.lines():
        (console if ok else err_console).print(line, markup=False, highlight=False)
    console.print(render_statistics(report))
    if first is not None:
        scaled = [o.name for o in report.outputs if o.scaled_atol is not None]
        held = (f", atol held to {SCALE_SHARE:.0%} of the peak of small outputs "
                f"({', '.join(scaled)})" if scaled else "")
        console.print(f"tolerance: atol {first.atol:g}, rtol {first.rtol:g} ({why}{held}); an "
                      f"element passes when |actual - expected| <= atol + rtol * |expected|")
    write_json(json_path, report_document("validate", {
        "artifact": str(art.folder), "format": art.format, "precision": precision,
        "source": art.manifest["source"], "tolerance_basis": why, **report.to_dict()}))
    if not ok:
        raise ValidationFailed(report, f"{art.folder}")
