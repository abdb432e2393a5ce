"""One error tree for edgekit.

The CLI turns any ``EdgekitError`` into one line on stderr and the error's exit code
(0 success, 1 a check failed, 2 bad usage or input), and any ``EdgekitWarning`` (something
edgekit went on without) into one ``edgekit: warning:`` line. Library callers catch the class
they care about; nothing here prints.
"""
from __future__ import annotations

from collections.abc import Iterable


class EdgekitError(Exception):
    """Base class. ``hint`` says what to do about it; it is appended to the one-line message."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(EdgekitError):
    """Bad usage or input: unknown names, wrong shapes, unwritable paths, corrupt files."""

    exit_code = 2


class UnknownNameError(UsageError):
    """A name that is not in a known set; the message lists the valid names."""

    def __init__(self, what: str, name: str, valid: Iterable[str]) -> None:
        names = ", ".join(sorted(valid)) or "(none)"
        super().__init__(f"unknown {what} '{name}'", hint=f"valid: {names}")
        self.name = name


class ProfileError(UsageError):
    """A device profile file that does not load or validate; names the file and the field."""


class SensorError(UsageError):
    """A power sensor that was asked for but cannot be read."""


class MissingDependencyError(UsageError):
    """An optional library (tensorrt, pynvml, ...) that a requested feature needs is absent."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt by a command that must clean up (stop its child
    processes, remove its temporary folders); the CLI exits 143 (128 + SIGTERM)."""

    exit_code = 143


class CheckFailed(EdgekitError):
    """A check ran and failed: export validation beyond tolerance, accuracy mismatch."""

    exit_code = 1


class EdgekitWarning(UserWarning):
    """Something edgekit left out and went on without; the message names it and why."""


class ProfileWarning(EdgekitWarning):
    """A user's device profile file left out of the listing (it does not load, or takes a
    packaged profile's name); the message names the file."""
