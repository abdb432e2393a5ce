"""``edgekit report``: one HTML page from the JSON reports of the other commands."""
from __future__ import annotations

import click

from edgekit.cli.common import OUTPUT_FILE, err_console


@click.command("report")
@click.argument("results", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=OUTPUT_FILE, default="report.html", show_default=True,
              help="The HTML file to write.")
@click.option("--force", is_flag=True,
              help="Replace an existing file that is not an edgekit report.")
def report(results: tuple[str, ...], output: str, force: bool) -> None:
    """Write one self-contained HTML page from RESULTS.

    RESULTS are the files written by --json of profile, compare, simulate, validate, devices,
    moe bench and astra run, by edgekit tour (tour.json), and the benchmarks' results. The page
    inlines its scripts and styles: it opens with no network. Hover a point of a plot for every
    figure and how it was obtained.
    """
    from edgekit.report import write_report

    with err_console.status(f"writing {output}..."):
        path = write_report(list(results), output, force=force)
    err_console.print(f"wrote {path} from {len(results)} result file(s)")
