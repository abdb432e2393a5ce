"""``edgekit export``: a model or checkpoint to a validated artifact folder."""
from __future__ import annotations

import click

from edgekit.cli.common import console, err_console
from edgekit.errors import UsageError
from edgekit.exporters import EXPORT_FORMATS, ValidationFailed, export_onnx
from edgekit.profiles import load_profile
from edgekit.targets import load_model_source


@click.command("export")
@click.argument("target")
@click.option("--to", "fmt", type=click.Choice(EXPORT_FORMATS), default="onnx", show_default=True)
@click.option("--device", help="Target device profile (recorded in the manifest).")
@click.option("--opset", type=int, help="ONNX opset (default: the entry's).")
@click.option("--batch", type=int, default=1, show_default=True, help="Fixed batch size.")
@click.option("--dynamic-batch", is_flag=True, help="Export with a symbolic batch dimension.")
@click.option("--atol", type=float, help="Absolute tolerance (default: the entry's).")
@click.option("--rtol", type=float, help="Relative tolerance (default: the entry's).")
@click.option("-o", "--output", type=click.Path(file_okay=False),
              help="Artifact folder (default ./MODEL-onnx).")
def export(target: str, fmt: str, device: str | None, opset: int | None, batch: int,
           dynamic_batch: bool, atol: float | None, rtol: float | None, output: str | None) -> None:
    """Export TARGET (registry name or checkpoint) and validate it against PyTorch."""
    if dynamic_batch and batch != 1:
        raise UsageError("--batch and --dynamic-batch exclude each other")
    profile = load_profile(device).name if device else None
    source = load_model_source(target)
    out = output or f"{source.name.replace(':', '-')}-{fmt}"
    console.print(f"exporting [bold]{source.name}[/bold] to {fmt} -> {out}")
    try:
        result = export_onnx(source, out, opset=opset, batch=batch, dynamic_batch=dynamic_batch,
                             device=profile, atol=atol, rtol=rtol)
    except ValidationFailed as exc:
        for line in exc.report.lines():
            err_console.print(line, markup=False, highlight=False)
        raise
    m = result.manifest
    for line in result.validation.lines():
        console.print(line, markup=False, highlight=False)
    console.print(f"validated against PyTorch on {result.validation.inputs}")
    console.print(f"opset {m['opset']}, batch {m['batch']}, {m['simplifier']}, "
                  f"{m['files'][m['model_file']]['bytes'] / 1024:.1f} KiB, "
                  f"{result.seconds:.1f} s")
    console.print(f"artifact: {result.folder}/ (model.onnx, manifest.json)")
