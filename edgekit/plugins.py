"""Plugins: other packages and the user's scripts add models, datasets, backends, meters,
precisions and exporters through the same ``register_*`` calls the built-ins use.

Three sources, loaded once per process the first time any registry is read (every
``edgekit.extensions.Registry`` calls ``load_plugins`` after loading its built-ins), so importing
edgekit costs nothing more and a command sees every plugin before it lists or looks up a name:

1. installed packages, through the entry-point groups in ``GROUPS`` (pytest's ``pytest11``, Dask's
   backends): each entry point's object is loaded and, when it can be called with no arguments,
   called, so ``my_pkg.edgekit:register`` and a plain module that registers on import both work;
2. the scripts named in ``EDGEKIT_PLUGINS`` (file paths separated by ``os.pathsep``);
3. the scripts given to ``use_scripts`` (the CLI's ``edgekit --import FILE.py``), which load
   at once if the plugins have loaded already.

A plugin that fails to load is one ``PluginError`` naming it and its error (exit 2); the
original exception is its ``__cause__``, which ``--debug`` shows.
"""
from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.scripts import NotImportable, import_script

GROUPS = ("edgekit.models", "edgekit.datasets", "edgekit.backends", "edgekit.meters",
          "edgekit.precisions", "edgekit.exporters")
ENV_VAR = "EDGEKIT_PLUGINS"


class PluginError(UsageError):
    """A plugin (entry point or script) that raised while loading."""


_started = False  # entry points and EDGEKIT_PLUGINS: once per process
_scripts: list[Path] = []  # asked for, in order
_loaded_scripts: set[Path] = set()


def use_scripts(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Load these plugin scripts with the others (``edgekit --import``); at once if the plugins
    have loaded already, so a script given late is never silently skipped."""
    _scripts.extend(Path(p) for p in paths)
    if _started:
        _load_pending_scripts()


def load_plugins() -> None:
    """Load every plugin not loaded yet: entry points and ``EDGEKIT_PLUGINS`` the first time,
    then any script given since. Re-entrant: a plugin that reads a registry while it loads
    sees the entries registered so far rather than loading itself again."""
    global _started
    if not _started:
        if _importing_edgekit():
            return  # a default validated while edgekit imports: the built-ins answer it
        _started = True
        for group in GROUPS:
            for point in entry_points(group=group):
                _load_entry_point(point)
        env = os.environ.get(ENV_VAR, "")
        _scripts[:0] = [Path(p) for p in env.split(os.pathsep) if p.strip()]
    _load_pending_scripts()


def _importing_edgekit() -> bool:
    """Whether a module of edgekit is executing its top level below this call (a default
    argument such as ``ProfileSettings()`` checked against a registry at definition time).
    Plugins import edgekit themselves, so loading them then would hand them half-imported
    modules and put their entries before the built-ins'."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name == "<module>" and (name == "edgekit"
                                                   or name.startswith("edgekit.")):
            return True
        frame = frame.f_back
    return False


def _load_pending_scripts() -> None:
    for path in list(_scripts):
        key = path.resolve()
        if key not in _loaded_scripts:
            _loaded_scripts.add(key)
            _load_script(path)


def _load_entry_point(point: EntryPoint) -> None:
    where = f"{point.group} entry point '{point.name}' ({point.value}"
    if point.dist is not None:
        where += f", from {point.dist.name} {point.dist.version}"
    where += ")"
    try:
        _call_if_registrar(point.load())
    except Exception as exc:
        raise _failed(where, exc) from exc


def _load_script(path: Path) -> None:
    """Import a script as a module of its own (its folder on ``sys.path`` while it imports, so
    its neighbours import too); the name is derived from its path, so loading it is idempotent
    for ``sys.modules`` and pickling."""
    if not path.is_file():
        raise PluginError(f"plugin script {path} does not exist",
                          hint=f"check --import and {ENV_VAR}")
    try:
        import_script(path, "edgekit_plugin")
    except NotImportable as exc:
        raise PluginError(str(exc)) from exc
    except Exception as exc:
        raise _failed(f"plugin script {path}", exc) from exc


def _call_if_registrar(obj: Any) -> None:
    """Call ``obj`` when it is a function that takes no arguments (a ``register()`` hook); a
    module, a class or a function that needs arguments was registered by importing it."""
    if not callable(obj) or inspect.isclass(obj) or inspect.ismodule(obj):
        return
    try:
        inspect.signature(obj).bind()
    except (TypeError, ValueError):  # needs arguments, or no signature to read
        return
    call: Callable[[], Any] = obj
    call()


def _failed(where: str, exc: Exception) -> PluginError:
    message = " ".join(str(exc).split())
    return PluginError(f"{where} failed to load: {type(exc).__name__}"
                       + (f": {message}" if message else ""),
                       hint="run with --debug for the traceback")
