"""``edgekit models``: the registry with parameters, FLOPs, task and variants."""
from __future__ import annotations

import click
from rich.table import Table

from edgekit.cli.common import JSON_FILE, console, write_json
from edgekit.errors import MissingDependencyError
from edgekit.flops import entry_costs
from edgekit.provenance import report_document
from edgekit.registry import list_models


def _si(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


@click.command("models")
@click.option("--family", help="Only entries of this method family.")
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the list as JSON.")
def models(family: str | None, json_path: str | None) -> None:
    """List registry entries and their variants."""
    table = Table(title="edgekit models", header_style="bold")
    for col in ("name", "family", "params", "FLOPs/sample", "task", "description"):
        table.add_column(col, justify="right" if col in ("params", "FLOPs/sample") else "left")
    rows = []
    pairs = [(entry, variant) for entry in list_models(family)
             for variant in (None, *entry.variants)]
    for (entry, variant), cost in zip(pairs, entry_costs(pairs), strict=True):
        name = entry.name + (f":{variant}" if variant else "")
        task = f"{entry.task.dataset} / {entry.task.metric}"
        desc = (entry.description if variant is None
                else f"  variant: {dict(entry.variants[variant])}")
        if isinstance(cost, MissingDependencyError):  # listed, not built: its library is absent
            desc, cost = f"{desc} (not built here: {cost.message})", None
        table.add_row(name, entry.family, _si(cost.params) if cost else "-",
                      _si(cost.flops_per_sample) if cost else "-", task, desc)
        rows.append({"name": name, "family": entry.family,
                     "params": cost.params if cost else None,
                     "flops_per_sample": cost.flops_per_sample if cost else None,
                     "dataset": entry.task.dataset,
                     "metric": entry.task.metric, "input_shape": list(entry.task.input_shape),
                     "description": entry.description, "paper": entry.paper})
    console.print(table)
    write_json(json_path, report_document("models", {"models": rows}))
