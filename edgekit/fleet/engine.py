"""The fleet's engine is Dask distributed: addresses, TLS and a client that never waits forever.

edgekit adds no protocol of its own. A scheduler listens (on localhost unless told otherwise),
each device runs one Dask worker with the resource ``device:<profile>=1``, and the client
submits jobs restricted to that resource, so Dask routes a job to a device of the right kind and
re-runs it on another one when its worker leaves mid-job.
"""
from __future__ import annotations

import socket
from pathlib import Path
from types import ModuleType
from typing import Any

from edgekit.errors import UsageError
from edgekit.optional import FLEET, require

DEFAULT_PORT = 8786  # Dask's own default
RESOURCE_PREFIX = "device:"
TLS_FILES = ("ca.pem", "cert.pem", "key.pem")


def distributed() -> ModuleType:
    """The ``distributed`` package, or one line naming the ``fleet`` extra."""
    return require("distributed", FLEET, "the device fleet")


def resource_for(device: str) -> str:
    """The worker resource that marks a device of profile ``device``."""
    return RESOURCE_PREFIX + device


def device_of(resources: dict[str, Any]) -> str | None:
    """The profile a worker serves, read back from its resources (None: not an edgekit worker)."""
    names = [key[len(RESOURCE_PREFIX):] for key in resources if key.startswith(RESOURCE_PREFIX)]
    return names[0] if len(names) == 1 else None


def address(scheduler: str, tls: bool) -> str:
    """``host[:port]`` or a full Dask address; the scheme is ``tls://`` when TLS is on."""
    scheme, sep, rest = scheduler.partition("://")
    if not sep:
        scheme, rest = ("tls" if tls else "tcp"), scheduler
    if scheme not in ("tcp", "tls"):
        raise UsageError(f"scheduler address {scheduler!r} has scheme {scheme}://",
                         hint="use host:port, tcp://host:port or tls://host:port")
    if tls and scheme != "tls":
        raise UsageError(f"--tls was given but the scheduler address is {scheduler}",
                         hint="drop the tcp:// or write tls://")
    if not rest or rest.startswith(":"):
        raise UsageError(f"scheduler address {scheduler!r} has no host")
    host, colon, port = rest.rpartition(":")
    if not colon:
        host, port = rest, str(DEFAULT_PORT)
    if not port.isdigit():
        raise UsageError(f"scheduler address {scheduler!r}: port {port!r} is not a number")
    return f"{scheme}://{host}:{port}"


def security(tls_dir: str | Path | None) -> Any:
    """Dask's ``Security`` for mutual TLS from a folder holding ca.pem, cert.pem and key.pem (one
    certificate for every role, signed by the CA); None: plain TCP."""
    if tls_dir is None:
        return None
    folder = Path(tls_dir)
    missing = [name for name in TLS_FILES if not (folder / name).is_file()]
    if missing:
        raise UsageError(f"--tls {folder}: missing {', '.join(missing)}",
                         hint="the folder holds ca.pem, cert.pem and key.pem (docs/fleet.md)")
    ca, cert, key = (str(folder / name) for name in TLS_FILES)
    return distributed().Security(
        tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key,
        tls_scheduler_cert=cert, tls_scheduler_key=key,
        tls_worker_cert=cert, tls_worker_key=key, require_encryption=True)


def check_listening(where: str, timeout_s: float) -> None:
    """One line at once when nothing listens there (Dask would retry until its timeout)."""
    host, _, port = where.partition("://")[2].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(f"no fleet scheduler at {where}: {exc.strerror or exc}",
                         hint="start one with 'edgekit fleet scheduler' and check the "
                              "address") from None


def connect(scheduler: str, *, tls_dir: str | Path | None = None,
            timeout_s: float = 10.0) -> Any:
    """A ``distributed.Client`` of the scheduler, or one line when none answers in time."""
    dd = distributed()
    where = address(scheduler, tls_dir is not None)
    sec = security(tls_dir)
    check_listening(where, timeout_s)
    try:
        return dd.Client(where, security=sec, timeout=timeout_s,
                         set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"no fleet scheduler answered at {where} within {timeout_s:g} s "
                         f"({type(exc).__name__})",
                         hint="start one with 'edgekit fleet scheduler' and check the "
                              "address") from None
