"""Atomic file and folder writes: a failed write leaves nothing half-made behind."""
from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from edgekit.errors import Terminated, UsageError
from edgekit.extensions import Registry


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _parent_writable(path: Path) -> Path:
    parent = path.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create folder {parent}: {exc.strerror}") from exc
    if not os.access(parent, os.W_OK):
        raise UsageError(f"output folder {parent} is not writable", hint="choose another path")
    return parent


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename over ``path``."""
    target = Path(path)
    parent = _parent_writable(target)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file ordinary modes
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


# What edgekit wrote. Each writer of a folder registers how to recognise its own folders and name
# the files it wrote in them (an artifact's manifest.json lists them, a ZipMoE store's manifest
# names its data file); each writer of a single file, how to recognise the files it wrote (the
# metadata of a checkpoint, the generator tag of a report page). An existing output is replaced
# without --force only when one of them claims it, and a folder only when it holds nothing else:
# a note a user kept in an artifact folder survives a re-export.
FolderKind = Callable[[Path], Iterable[str] | None]
FileKind = Callable[[Path], bool]


# Folders: artifacts and Jetson bundles; the methods' (ZipMoE stores, tiny checkpoints).
_OUTPUT_KINDS: Registry[FolderKind] = Registry(
    "output folder kind", builtins=("edgekit.exporters.artifact", "edgekit.methods"))
# Files: train's checkpoints, report's pages.
_FILE_KINDS: Registry[FileKind] = Registry(
    "output file kind", builtins=("edgekit.checkpoint", "edgekit.report.page"))


def register_output_kind(name: str, files: FolderKind) -> FolderKind:
    """``files(folder)``: the paths (relative to ``folder``) of the files edgekit wrote in it,
    or None when the folder is not of this kind (an error is a no)."""
    return _OUTPUT_KINDS.add(name, files)


def register_file_kind(name: str, recognise: FileKind) -> FileKind:
    """``recognise(file)`` says whether ``file`` is one edgekit wrote (an error is a no)."""
    return _FILE_KINDS.add(name, recognise)


def _written_files(folder: Path) -> set[str] | None:
    """The files edgekit wrote in ``folder``, as the first kind that recognises it names them."""
    for name in _OUTPUT_KINDS.names():
        try:
            files = _OUTPUT_KINDS.get(name)(folder)
        except Exception:  # noqa: BLE001  a file a recogniser cannot read is not ours
            continue
        if files is not None:
            return {Path(f).as_posix() for f in files}
    return None


def _written_file(path: Path) -> bool:
    for name in _FILE_KINDS.names():
        try:
            if _FILE_KINDS.get(name)(path):
                return True
        except Exception:  # noqa: BLE001  a file a recogniser cannot read is not ours
            continue
    return False


def _foreign(folder: Path, written: set[str]) -> list[str]:
    """What ``folder`` holds besides ``written`` (and the folders holding it): every other file,
    link or empty folder, as relative paths, sorted. Links are not followed."""
    keep = written | {p.as_posix() for f in written for p in Path(f).parents} - {"."}
    found = []
    for root, dirs, files in os.walk(folder):
        here = Path(root).relative_to(folder)
        for name in files + [d for d in dirs if (Path(root) / d).is_symlink()]:
            if (here / name).as_posix() not in written:
                found.append((here / name).as_posix())
        for name in [d for d in dirs if not (Path(root) / d).is_symlink()]:
            if (here / name).as_posix() not in keep:
                found.append((here / name).as_posix() + "/")
        dirs[:] = [d for d in dirs if (here / d).as_posix() in keep
                   and not (Path(root) / d).is_symlink()]
    return sorted(found)


# What edgekit's staging names add around an output's own name: ``.NAME.PID-XXXXXXXX.partial``
# (atomic_directory) and ``.NAME.XXXXXXXX.tmp`` (atomic writes of one file).
_STAGING_CHARS = 32


def _check_name_length(target: Path) -> None:
    """Refuse, before any work, an output name that its staging name would take past the file
    system's limit (NAME_MAX, usually 255 bytes), which would fail only at the end."""
    folder = target.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    name = len(os.fsencode(target.name))
    folders = max((len(os.fsencode(part)) for part in target.parent.parts), default=0)
    if name + _STAGING_CHARS > limit or folders > limit:
        longest = max(name, folders)
        raise UsageError(f"output {str(target)[:60]}...: a name of {longest} bytes is too long "
                         f"(at most {limit - _STAGING_CHARS} here)", hint="choose a shorter -o")


def check_output(path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (),
                 force: bool = False) -> None:
    """Refuse an output that would destroy data: one that overlaps an input (the same path,
    inside it or holding it, symlinks resolved; never allowed), an existing file edgekit did not
    write, or an existing non-empty folder that edgekit did not write or that holds anything
    besides what edgekit wrote there (both allowed with ``force``)."""
    target = Path(path)
    _check_name_length(target)
    resolved = target.resolve()
    for item in inputs:
        source = Path(item).resolve()
        if source == resolved or source in resolved.parents or resolved in source.parents:
            raise UsageError(f"output {target} overlaps the input {item}",
                             hint="choose another -o; replacing it would delete the input")
    if force or not os.path.lexists(target):
        return
    if not target.is_dir():
        if not target.is_file() or not _written_file(target):
            raise UsageError(f"{target} exists and is not a file edgekit wrote; replacing it "
                             f"would delete it",
                             hint="choose another -o, or pass --force to replace it")
        return
    if not any(target.iterdir()):
        return
    written = _written_files(target)
    if written is None:
        raise UsageError(f"{target} is a folder that edgekit did not write (no edgekit manifest "
                         f"in it); replacing it would delete its contents",
                         hint="choose another -o, or pass --force to replace it")
    foreign = _foreign(target, written)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise UsageError(f"{target} holds {foreign[0]}{more}, which edgekit did not write; "
                         f"replacing the folder would delete it",
                         hint="move it out, choose another -o, or pass --force to replace it")


# Staging folders beside OUT: ``.OUT.PID-XXXXXXXX.partial`` (being written) and
# ``.OUT.PID-XXXXXXXX.old`` (a former OUT on its way out, only where renameat2 is unavailable).
# The PID says whether the run that made one is still alive.
def _staging_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(name)}\.(\d+)-[a-z0-9_]{{8}}\.(partial|old)")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, it is someone else's
        return True
    return True


def _stale_staging(target: Path, started: float) -> list[tuple[Path, str]]:
    """This OUT's staging folders left by runs that died before ``started`` (newest first)."""
    pattern = _staging_pattern(target.name)
    found = []
    for child in target.parent.iterdir():
        match = pattern.fullmatch(child.name)
        if match is None or child.is_symlink() or not child.is_dir():
            continue
        with contextlib.suppress(OSError):
            when = child.lstat().st_ctime
            if when < started and not _alive(int(match.group(1))):
                found.append((when, child, match.group(2)))
    return [(child, kind) for _, child, kind in sorted(found, reverse=True)]


def _recover(target: Path, started: float) -> None:
    """Finish what a killed run left: where OUT is missing, its newest ``.old`` copy becomes OUT
    again; then remove the dead runs' staging folders of this OUT (nothing else)."""
    stale = _stale_staging(target, started)
    if not os.path.lexists(target):
        for child, kind in stale:
            if kind == "old":
                os.replace(child, target)
                break
    for child, _ in stale:
        if child.exists():
            shutil.rmtree(child, ignore_errors=True)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one atomic step (Linux renameat2 with RENAME_EXCHANGE, glibc
    2.28+); False where the system or the file system cannot, so the caller falls back."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _replace_folder(staging: Path, target: Path, parent: Path) -> None:
    """Put ``staging`` at ``target``: OUT is always either the old or the new complete folder
    (exchanged atomically), or, without renameat2, a kill between the two renames leaves the old
    one as ``.OUT.PID-*.old``, which the next run on OUT puts back."""
    if _exchange(staging, target):
        # ``staging`` now holds the old copy (a kill here leaves a .partial the next run removes)
        if staging.is_symlink():
            staging.unlink()
        else:
            shutil.rmtree(staging, ignore_errors=True)
        return
    backup = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.{os.getpid()}-",
                                   suffix=".old"))
    backup.rmdir()
    os.replace(target, backup)
    os.replace(staging, target)
    shutil.rmtree(backup, ignore_errors=True)


@contextlib.contextmanager
def _sigterm_cleans_up() -> Iterator[None]:
    """While a staging folder exists, SIGTERM raises ``Terminated`` (exit 143 from the CLI), so
    the folder is removed as on Ctrl-C; the default action would leave it, gigabytes for a real
    checkpoint, until the next run on the same OUT. Only where SIGTERM has its default action
    and only in the main thread (where handlers can be installed); the handler is restored on
    exit, and a handler someone else installed, or an ignored SIGTERM, is left alone."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str], overwrite: bool = True, *,
                     inputs: Iterable[str | os.PathLike[str]] = (),
                     force: bool = False) -> Iterator[Path]:
    """Yield a temporary folder; on success it replaces ``path``, on any error it is removed.

    Replacing keeps the old folder until the new one is complete, so an interrupted export never
    destroys a good artifact, and swaps them in one atomic step where Linux allows. ``inputs``
    (the paths the output is made from) and ``force`` go to ``check_output``: an output never
    overlaps an input, and a folder edgekit did not write is replaced only with ``force``.
    """
    started = time.time()
    target = Path(path)
    parent = _parent_writable(target)
    _recover(target, started)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} exists and is not a folder")
    if target.exists() and not overwrite:
        raise UsageError(f"{target} already exists", hint="remove it or choose another -o")
    check_output(target, inputs=inputs, force=force)
    with _sigterm_cleans_up():
        # named before it exists (not mkdtemp's returned name), so a signal at any moment finds
        # the folder to remove; mkdir's mode is the umask's, as for any ordinary folder
        staging = parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.partial"
        try:
            while True:
                try:
                    staging.mkdir()
                    break
                except FileExistsError:
                    staging = staging.with_name(
                        f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
            yield staging
            if os.path.lexists(target):
                _replace_folder(staging, target, parent)
            else:
                os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON object from ``path``; anything else is a one-line UsageError naming the file."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError as exc:
        raise UsageError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{path}: a folder, not a JSON file") from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except ValueError as exc:  # bytes that are not UTF-8
        raise UsageError(f"{path}: not valid JSON ({exc})") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError as exc:  # arrays or objects nested thousands deep
        raise UsageError(f"{path}: not valid JSON (nested too deeply)") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data
