"""``edgekit datasets``: the built-in datasets, the task each defines, and its variants."""
from __future__ import annotations

import click
from rich.table import Table

from edgekit.cli.common import JSON_FILE, console, write_json
from edgekit.data import list_datasets
from edgekit.provenance import report_document


@click.command("datasets")
@click.option("--json", "json_path", type=JSON_FILE, help="Write the list as JSON.")
def datasets(json_path: str | None) -> None:
    """List built-in datasets and their variants.

    A variant is chosen as --data DATASET:VARIANT wherever a command takes --data."""
    table = Table(title="edgekit datasets", header_style="bold")
    for col in ("name", "metric", "input shape", "description"):
        table.add_column(col)
    rows = []
    for entry in list_datasets():
        task = entry.task
        shape = "x".join(map(str, task.input_shape))
        table.add_row(entry.name, task.metric, shape, entry.description)
        for variant, spec in entry.variants.items():
            table.add_row(f"{entry.name}:{variant}", task.metric, shape,
                          f"  variant: {spec.description}")
        rows.append({"name": entry.name, "metric": task.metric,
                     "input_shape": list(task.input_shape), "description": entry.description,
                     "variants": {v: spec.description for v, spec in entry.variants.items()}})
    console.print(table)
    write_json(json_path, report_document("datasets", {"datasets": rows}))
