"""The ``edgekit`` command line: a thin layer over the Python API.

Every command lives in its own module, imported only when it runs or help lists it, so a
command does not pay for the imports of the others. Errors derived from ``EdgekitError`` and
click's usage errors become one line on stderr and the error's exit code; a traceback is shown
only with ``--debug``. Anything else is a bug in edgekit: it too becomes one line,
``edgekit: error: internal error: <type>: <message> (...)``, with exit code 1
(``INTERNAL_ERROR_EXIT``). Ctrl-C (or a SIGTERM the command turns into one), at any point from
start-up on, prints ``edgekit: interrupted`` and exits 130; a SIGTERM that a command turns into
``Terminated`` (``edgekit astra run``, which must stop its ranks) prints ``edgekit: terminated``
and exits 143. A path too long for the file system (``ENAMETOOLONG``, wherever it is first
opened) is the user's input, not a bug: one line naming it, exit code 2. An ``EdgekitWarning``
(a user's profile file left out) is one line too, ``edgekit: warning: <message>``, and the
command goes on.
"""
from __future__ import annotations

import contextlib
import errno
import importlib
import sys
import traceback
import warnings
from collections.abc import Iterator
from functools import cache
from typing import Any, NoReturn

import click

from edgekit.errors import EdgekitError, EdgekitWarning, Terminated

_DEBUG = False
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
INTERNAL_ERROR_EXIT = 1


def _debug_requested() -> bool:
    return _DEBUG or "--debug" in sys.argv[1:]


def _interrupted(exc: BaseException | None = None) -> NoReturn:
    """Ctrl-C: exit 130; a SIGTERM a command turned into ``Terminated``: exit 143."""
    if isinstance(exc, Terminated):
        click.echo("edgekit: terminated", err=True)
        sys.exit(Terminated.exit_code)
    click.echo("edgekit: interrupted", err=True)
    sys.exit(INTERRUPTED_EXIT)


def _internal_error(exc: BaseException) -> NoReturn:
    """An exception edgekit did not expect: one line, the traceback only with --debug."""
    if _debug_requested():
        traceback.print_exception(exc)
    message = " ".join(str(exc).split())
    if len(message) > 300:
        message = message[:297] + "..."
    what = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    click.echo(f"edgekit: error: internal error: {what} (please report it; run with --debug "
               "for the traceback)", err=True)
    sys.exit(INTERNAL_ERROR_EXIT)


def _unexpected(exc: Exception) -> NoReturn:
    """A name too long for the file system came from the user; anything else is a bug."""
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        name = str(exc.filename or "")
        shown = name if len(name) <= 80 else f"{name[:40]}...{name[-20:]} ({len(name)} characters)"
        click.echo(f"edgekit: error: {shown or 'a path'}: file name too long for the file system",
                   err=True)
        sys.exit(EdgekitError.exit_code)
    _internal_error(exc)


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """Show each ``EdgekitWarning`` once per command as one ``edgekit: warning:`` line on stderr
    (Python would print its source line too); other warnings as Python shows them. The
    warning filters and hook are restored on exit."""
    with warnings.catch_warnings():
        warnings.simplefilter("default", EdgekitWarning)
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: Any,
                 **kwargs: Any) -> None:
            if issubclass(category, EdgekitWarning):
                click.echo(f"edgekit: warning: {message}", err=True)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


# edgekit.cli.<name> defines the command <name>.
_COMMANDS = ("devices", "models", "datasets", "train", "export", "validate", "profile",
             "estimate", "compare", "simulate", "fleet", "report", "tour")


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
            with _warnings_as_lines():
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
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise  # click's own ways out: it prints them (if anything) and sets the code
        except Exception as exc:
            _unexpected(exc)

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        """click's main, with an interrupt or a bug outside ``invoke`` (while parsing, listing
        commands for --help, importing) handled the same way as inside it."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):
                _interrupted(exc.__cause__)
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except Exception as exc:
            _unexpected(exc)
        # non-standalone main returns the exit code of ctx.exit(), else the command's value
        sys.exit(code if isinstance(code, int) else 0)


def _use_plugin_scripts(ctx: click.Context, param: click.Parameter,
                        paths: tuple[str, ...]) -> None:
    """Record ``--import`` scripts while the group's options are parsed, before a command's
    options are converted against the registries (which load them)."""
    from edgekit.plugins import use_scripts

    use_scripts(paths)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--import", "imports", multiple=True, type=click.Path(dir_okay=False),
              expose_value=False, callback=_use_plugin_scripts, metavar="FILE.py",
              help="Load a plugin script that registers models, datasets, backends, meters, "
                   "precisions or exporters (repeatable; also $EDGEKIT_PLUGINS, and installed "
                   "packages' edgekit.* entry points).")
@click.version_option(package_name="edgekit")
def cli(debug: bool) -> None:
    """edgekit: export, profile and compare PyTorch models on edge devices."""
    global _DEBUG
    _DEBUG = debug


def main() -> None:
    try:
        cli()
    except KeyboardInterrupt as exc:  # between click's handlers, or while they print
        _interrupted(exc)
