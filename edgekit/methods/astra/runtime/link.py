"""Emulated network links: what a bandwidth-capped, lossy link would cost for the bytes sent.

Every rank counts the bytes it really puts on the wire in each collective (``collectives.py``)
and then waits the time a link with this bandwidth, one-way latency and packet-loss rate would
take to carry them. The wait is computed, not measured on a shaped interface (no root, no tc), so
it is the same on any machine and the report states its parameters.

Wire time of one message of ``n`` bytes (one step of a ring collective):

* the message is cut into ``ceil(n / MTU_PAYLOAD)`` packets (MTU 1500 bytes, 40 bytes of
  IP + TCP header each, so 1460 payload bytes per packet);
* every packet is lost independently with probability ``loss``; a lost packet is sent again
  (and may be lost again), the number of tries drawn from a seeded RNG;
* serialisation: every try of every packet, headers included, at ``bandwidth_bps``;
* latency: one one-way latency for the message, plus one round trip (2 x latency, the time to
  notice and ask again) for every retransmission round, i.e. for the largest number of extra
  tries any packet needed.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edgekit.errors import UsageError

MTU_BYTES = 1500
HEADER_BYTES = 40  # IPv4 (20) + TCP (20)
PAYLOAD_BYTES = MTU_BYTES - HEADER_BYTES
MIN_BANDWIDTH_BPS = 1e6  # 1 Mbps: below it the bench would take hours
MAX_BANDWIDTH_BPS = 1e11  # 100 Gbps
_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
_BANDWIDTH = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmg]?)(?:bps|bit/s|b/s)\s*$",
                        re.IGNORECASE)


def parse_bandwidth(text: str) -> float:
    """Bits per second from ``10Mbps``, ``100 Mbps``, ``1Gbps``, ``500kbps`` (decimal units)."""
    match = _BANDWIDTH.match(text)
    if match is None:
        raise UsageError(f"bad bandwidth '{text}'", hint="write it like 10Mbps, 100Mbps or 1Gbps")
    bps = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not MIN_BANDWIDTH_BPS <= bps <= MAX_BANDWIDTH_BPS:
        raise UsageError(f"bandwidth {text} is outside 1Mbps..100Gbps")
    return bps


def format_bandwidth(bps: float) -> str:
    """``1e7`` -> ``10Mbps``: the inverse of ``parse_bandwidth`` for the round figures used."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}bps"
    return f"{bps:g}bps"


@dataclass(frozen=True)
class LinkSpec:
    """One rank's outgoing link. ``bandwidth_bps=None`` is an unshaped link (no waiting)."""

    bandwidth_bps: float | None = None
    latency_s: float = 0.0
    loss: float = 0.0  # probability that one packet is lost
    seed: int = 0

    def __post_init__(self) -> None:
        if self.latency_s < 0 or not math.isfinite(self.latency_s):
            raise UsageError(f"latency must be a finite number >= 0 ms, got {self.latency_s * 1e3}")
        if not 0.0 <= self.loss < 0.5:
            raise UsageError(f"packet loss must be in [0, 0.5), got {self.loss}")

    @property
    def shaped(self) -> bool:
        return self.bandwidth_bps is not None

    def describe(self) -> dict[str, Any]:
        """The emulation parameters, for the report."""
        doc = asdict(self)
        doc.update(bandwidth=format_bandwidth(self.bandwidth_bps) if self.shaped else "unshaped",
                   mtu_bytes=MTU_BYTES, header_bytes=HEADER_BYTES,
                   model="serialisation of every packet try + one-way latency per message "
                         "+ one round trip per retransmission round (seeded RNG)")
        return doc


def packets(nbytes: int) -> int:
    """Packets needed for a message of ``nbytes`` (an empty message still sends one)."""
    return max(1, math.ceil(nbytes / PAYLOAD_BYTES))


def wire_bytes(nbytes: int) -> int:
    """Bytes on the wire for one loss-free message: payload plus a header per packet."""
    return nbytes + packets(nbytes) * HEADER_BYTES


def message_time(spec: LinkSpec, nbytes: int, rng: np.random.Generator | None = None) -> float:
    """Seconds to carry one message of ``nbytes`` over ``spec``; lost packets drawn from ``rng``.

    With ``rng=None`` the loss is taken at its expectation (for the analytic model): each packet
    is tried ``1 / (1 - loss)`` times and the retransmission rounds are not counted.
    """
    if not spec.shaped:
        return 0.0
    n_packets = packets(nbytes)
    if spec.loss == 0.0:
        extra_tries, rounds = 0.0, 0
    elif rng is None:
        extra_tries, rounds = n_packets * spec.loss / (1.0 - spec.loss), 0
    else:
        # tries per packet ~ Geometric(1 - loss); extra tries = tries - 1
        tries = rng.geometric(1.0 - spec.loss, size=n_packets)
        extra_tries, rounds = float(tries.sum() - n_packets), int(tries.max() - 1)
    full = wire_bytes(nbytes) + extra_tries * MTU_BYTES
    return full * 8.0 / spec.bandwidth_bps + spec.latency_s * (1 + 2 * rounds)
