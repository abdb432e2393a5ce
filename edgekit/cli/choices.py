"""Option values checked against a registry when the command runs, not when its module imports.

``click.Choice`` freezes its list when the decorator runs, before any plugin has loaded, so a
backend, precision, meter or exporter a plugin registers would be refused. ``RegistryChoice``
asks the registry at conversion time (which loads the plugins first) and, like ``Choice``,
lists the valid names in its error and in ``--help``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click


class RegistryChoice(click.ParamType):
    """One of the names ``names()`` returns at the moment the value is converted."""

    def __init__(self, names: Callable[[], Sequence[str]], what: str) -> None:
        self._names = names
        self.name = what  # click shows it in messages about the type

    @property
    def choices(self) -> tuple[str, ...]:
        """The valid names now (the registry's, plugins included)."""
        return tuple(self._names())

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "[" + "|".join(self.choices) + "]"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        choices = self.choices
        if value in choices:
            return value
        self.fail(f"{value!r} is not one of {', '.join(map(repr, choices))}", param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[click.shell_completion.CompletionItem]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(c) for c in self.choices if c.startswith(incomplete)]


class LazyHelpOption(click.Option):
    """An option whose help text is written when ``--help`` asks (``help_text()``), so it can
    name what the registries hold then, plugins included, without reading them at import."""

    def __init__(self, *args: Any, help_text: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._help_text = help_text

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self._help_text()
        return super().get_help_record(ctx)
