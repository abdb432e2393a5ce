"""The fleet's scheduler: Dask's, on localhost unless told otherwise, TLS one option away.

Dask starts an HTTP server beside every scheduler and worker whatever ``dashboard=`` says (its
``/info/logs``, ``/info/call-stacks``, ``/eventstream`` and ``/metrics`` routes; the scheduler's
on port 8787 of the interface it listens on), with no authentication. A fleet serves none unless
asked: ``without_http`` stops it, and ``--dashboard`` opens one on localhost unless given a
host.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.fleet.engine import DEFAULT_PORT, distributed, security

DASHBOARD_HOST = "127.0.0.1"
CLOSED_HTTP = f"{DASHBOARD_HOST}:0"  # where Dask's server binds until it is stopped


def without_http(server: Any) -> None:
    """Stop the HTTP server Dask started for ``server`` (a Scheduler or Worker)."""
    server.http_server.stop()
    server.services.pop("dashboard", None)  # nor advertised in its logs and identity


def dashboard_address(value: str) -> str:
    """``--dashboard [HOST:]PORT`` as ``host:port``: localhost unless a host is given."""
    host, colon, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--dashboard {value!r}: the port must be a number from 0 to 65535")
    return f"{host if colon and host else DASHBOARD_HOST}:{port}"


async def _serve(host: str, port: int, sec: Any, ready: Any, dashboard: str | None) -> None:
    scheme = "tls" if sec is not None else "tcp"
    scheduler = distributed().Scheduler(host=host, port=port, protocol=scheme, security=sec,
                                        dashboard=dashboard is not None,
                                        dashboard_address=dashboard or CLOSED_HTTP)
    if dashboard is None:
        without_http(scheduler)
    async with scheduler:
        if ready is not None:
            http = scheduler.services.get("dashboard")
            ready(scheduler.address, None if http is None else
                  f"http://{dashboard.rpartition(':')[0]}:{http.port}/")
        await scheduler.finished()


def run_scheduler(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                  tls_dir: str | Path | None = None, ready: Any = None,
                  dashboard: str | None = None) -> None:
    """Serve until interrupted; ``ready(address, dashboard URL or None)`` is called once it
    listens. ``dashboard``: ``host:port`` of Dask's HTTP dashboard; None: no HTTP server."""
    asyncio.run(_serve(host, port, security(tls_dir), ready, dashboard))
