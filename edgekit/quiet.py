"""Silence chatty third-party code for the duration of one call, and restore everything after.

A library call must not change its caller's global state (no hidden global state):
logger levels, warning filters and ``sys.stdout`` are put back on exit, even when the call fails.
"""
from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet(*loggers: str, level: int = logging.ERROR, stdout: bool = True,
          warn: bool = True) -> Iterator[None]:
    """Raise ``loggers`` to ``level``, swallow stdout (``stdout``) and warnings (``warn``)."""
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in loggers]
    with contextlib.ExitStack() as stack:
        for logger, old in saved:
            stack.callback(logger.setLevel, old)
            logger.setLevel(level)
        if warn:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
        if stdout:
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        yield
