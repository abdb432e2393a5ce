"""The ``edgekit`` command line: a thin layer over the Python API.

Every command lives in its own module and is added to the group here. Errors derived from
``EdgekitError`` become one line on stderr and the error's exit code; a traceback is shown only
with ``--debug``.
"""
from __future__ import annotations

import sys
import traceback

import click

from edgekit.errors import EdgekitError

_DEBUG = False


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # noqa: ANN201 - click's own signature
        try:
            return super().invoke(ctx)
        except EdgekitError as exc:
            if _DEBUG:
                traceback.print_exc()
            click.echo(f"edgekit: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("edgekit: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="edgekit")
def cli(debug: bool) -> None:
    """edgekit: export, profile and compare PyTorch models on edge devices."""
    global _DEBUG
    _DEBUG = debug


def _register() -> None:
    from edgekit import methods
    from edgekit.cli import compare, devices, export, models, profile, simulate, train, validate

    for command in (devices.devices, models.models, train.train, export.export,
                    validate.validate, profile.profile, compare.compare, simulate.simulate,
                    *methods.cli_commands()):
        cli.add_command(command)


_register()


def main() -> None:
    cli()
