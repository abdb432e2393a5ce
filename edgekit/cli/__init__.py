"""The ``edgekit`` command line: a thin layer over the Python API.

Every command lives in its own module, imported only when it runs or help lists it, so a
command does not pay for the imports of the others. Errors derived from ``EdgekitError`` and
click's usage errors become one line on stderr and the error's exit code; a traceback is shown
only with ``--debug``.
"""
from __future__ import annotations

import importlib
import sys
import traceback
from functools import cache

import click

from edgekit.errors import EdgekitError

_DEBUG = False
# edgekit.cli.<name> defines the command <name>.
_COMMANDS = ("devices", "models", "train", "export", "validate", "profile", "compare", "simulate")


@cache
def _method_commands() -> dict[str, click.Command]:
    from edgekit import methods

    return {command.name: command for command in methods.cli_commands() if command.name}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted((*_COMMANDS, *_method_commands()))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        if cmd_name in _COMMANDS:
            return getattr(importlib.import_module(f"{__name__}.{cmd_name}"), cmd_name)
        return _method_commands().get(cmd_name)

    def invoke(self, ctx: click.Context):  # noqa: ANN201 - click's own signature
        try:
            return super().invoke(ctx)
        except EdgekitError as exc:
            if _DEBUG:
                traceback.print_exc()
            click.echo(f"edgekit: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:  # a subcommand's bad option: one line too, exit 2
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
            click.echo(f"edgekit: error: {exc.format_message()}{where}", err=True)
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


def main() -> None:
    cli()
