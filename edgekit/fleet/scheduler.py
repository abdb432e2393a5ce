"""The fleet's scheduler: Dask's, on localhost unless told otherwise, TLS one option away."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from edgekit.fleet.engine import DEFAULT_PORT, distributed, security


async def _serve(host: str, port: int, sec: Any, ready: Any) -> None:
    scheme = "tls" if sec is not None else "tcp"
    scheduler = distributed().Scheduler(host=host, port=port, protocol=scheme, security=sec,
                                        dashboard=False)
    async with scheduler:
        if ready is not None:
            ready(scheduler.address)
        await scheduler.finished()


def run_scheduler(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                  tls_dir: str | Path | None = None, ready: Any = None) -> None:
    """Serve until interrupted; ``ready(address)`` is called once it listens."""
    asyncio.run(_serve(host, port, security(tls_dir), ready))
