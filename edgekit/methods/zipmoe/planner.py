"""ZipMoE's cache-pool planner: how much of a layer's budget goes to full vs SM-only experts.

Follows the authors' ``runtime/cache_planning.py`` (arXiv 2601.21198):

1. From a routing trace, each MoE layer's token counts are sorted by rank and summed over layers:
   the popularity of the i-th most used expert. Scaled so the probabilities sum to k (capped at 1,
   ``scale_to_k``) they are inclusion probabilities of a size-k sample.
2. Conditional Poisson sampling reproduces them: Bernoulli trials with odds w_i, conditioned on
   exactly k successes, include expert i with probability pi_i when the w_i solve Chen, Dempster
   and Liu's fixed point (Biometrika 1994): w <- w * pi / pi(w) (``coverage_to_weight``); the
   trials' probabilities are p_i = c w_i / (1 + c w_i). [ours] The authors' code normalises the
   odds to mean 1 and then conditions on int(sum p_i), which depends on that arbitrary scale
   (about n/2 rather than k); edgekit conditions on k, as the paper states, and picks c so the
   p_i sum to k (the conditional distribution does not depend on c).
3. For each full-pool share r in (0, 1) the top ``n_full`` experts sit in the full pool and the
   next ``n_sm`` in the SM pool. [ours] The authors floor r * budget and (1 - r) * budget to
   whole slots separately, which can leave up to one full slot of the budget unused (on the
   benchmark: 2 full + 11 SM slots use 94 % of it); edgekit floors the full share and gives what
   is left to SM-only slots (``pool_slots``: 2 full + 12 SM), capped at the expert count.
   The numbers of full hits f and SM hits s of one token are sums of Bernoulli trials
   (Poisson-binomial, ``poisson_binomial``), conditioned on f + s + rest = k.
4. The delay of a layer with f full and s SM hits is max(C, IO):
       C  = ceil(K (k - f) T / L) * d_dec / K                       the decode workers
       IO = T * d_sm * (k - f - s) + (k - f) * T * d_sm * CR         the storage device
   with T tensors per expert, K chunks, L workers, d_dec the decode time and d_sm the
   sign-mantissa read time of one tensor, CR = compressed exponent bytes / sign-mantissa bytes.
   [ours] The authors' IO term, T d_sm (k - f - s) + s T d_sm CR, counts the exponent reads of
   SM hits but not those of misses, as if the workers' reads of a miss's exponents used a second
   device. The I/O thread and the workers read from one device, so edgekit's IO is every byte the
   layer reads: sign-mantissa bytes of the misses and exponents of every expert not in the full
   pool. On the benchmark (benchmarks/README.md, zipmoe.py) the authors' term planned 4 full + 7
   SM slots per layer, and this one plans fewer full slots, which read fewer bytes and served
   more tokens per second. [ours] The authors' C also holds each chunk's read
   (+ d_sm CR / K per operation), since their workers read the chunks they decode; edgekit's
   I/O thread makes those reads (providers/threads.py), so they are in IO alone.
   [ours] The compute thread is a third side: it runs the layer (``layer_compute_s``) and
   rebuilds every loaded tensor from its planes (``rebuild_s``), and when it also decodes
   (``decode_on_compute``: no decode worker and ``decode_on="compute"``) it does so in series:
       CT = layer_compute + (k - f) T (rebuild [+ d_dec])
   and the delay is max(C, IO, CT). The authors' model counts decoding as if it overlapped
   the layer's compute on the GPU; where the same CPU thread does both, leaving CT out made
   the plan all SM-only slots (1 full + 14 SM per layer on the trained benchmark model,
   2,775 tensors decoded for 48 tokens, where 5 + 6 decode 1,989 for 0.7 % more bytes read
   and 7 + 2 decode 1,755 for 7 %). With the I/O thread decoding (L = 0, ``decode_on="io"``)
   it is the one worker of C.
   The expected delay over r is smoothed (centred window of 5) and its argmin is the plan.

edgekit measures d_dec and d_sm on the device at hand instead of using the paper's constants,
and the serving engine calibrates d_dec, the rebuild and the layer's compute on a few tokens of
its own (``ZipMoEExperts.calibrate``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


def poisson_binomial(probs: Sequence[float]) -> np.ndarray:
    """P(number of successes = j), j = 0..n, of independent Bernoulli(p_i) trials."""
    dist = np.zeros(len(probs) + 1)
    dist[0] = 1.0
    for i, p in enumerate(probs):
        dist[1:i + 2] = dist[1:i + 2] * (1.0 - p) + dist[:i + 1] * p
        dist[0] *= 1.0 - p
    return dist


def popularity_by_rank(counts: Mapping[object, Sequence[float]] | Sequence[Sequence[float]],
                       num_experts: int) -> np.ndarray:
    """Normalised popularity of the i-th most used expert, layers summed rank by rank.

    With no usable trace the experts are taken as equally popular."""
    layers = counts.values() if isinstance(counts, Mapping) else counts
    total = np.zeros(num_experts)
    for row in layers:
        total += np.sort(np.asarray(row, dtype=np.float64))[::-1][:num_experts]
    if total.sum() <= 0:
        return np.full(num_experts, 1.0 / num_experts)
    return total / total.sum()


def scale_to_k(probs: Sequence[float], k: int, tol: float = 1e-9) -> np.ndarray:
    """Scale probabilities to sum to k, capping each at (just under) 1 and rescaling the rest."""
    pi = np.asarray(probs, dtype=np.float64).copy()
    if pi.sum() == 0:
        return pi
    pi *= k / pi.sum()
    free = np.ones(len(pi), dtype=bool)
    remaining = float(k)
    while free.any():
        current = pi[free].sum()
        if current < tol:
            break
        scaled = pi[free] * (remaining / current)
        over = scaled >= 1.0 - tol
        if not over.any():
            pi[free] = scaled
            break
        idx = np.flatnonzero(free)[over]
        pi[idx] = 1.0 - tol
        free[idx] = False
        remaining -= len(idx)
        if remaining <= 0:
            pi[free] = 0.0
            break
    return pi


def _elementary(w: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward elementary symmetric sums of w up to order k.

    fwd[j, m] = e_m(w_0..w_{j-1}),  bwd[j, m] = e_m(w_j..w_{n-1})."""
    n = len(w)
    fwd = np.zeros((n + 1, k + 1))
    fwd[:, 0] = 1.0
    for j in range(1, n + 1):
        fwd[j, 1:] = fwd[j - 1, 1:] + w[j - 1] * fwd[j - 1, :-1]
    bwd = np.zeros((n + 2, k + 1))
    bwd[:, 0] = 1.0
    for j in range(n - 1, -1, -1):
        bwd[j, 1:] = bwd[j + 1, 1:] + w[j] * bwd[j + 1, :-1]
    return fwd, bwd


def cps_inclusion(w: Sequence[float], k: int) -> np.ndarray:
    """Inclusion probabilities of conditional Poisson sampling of size k with odds w."""
    w = np.asarray(w, dtype=np.float64)
    fwd, bwd = _elementary(w, k)
    total = fwd[len(w), k]
    # e_{k-1} of all weights but i: choose m from those before i and k-1-m from those after.
    without = np.array([np.dot(fwd[i, :k], bwd[i + 1, k - 1::-1]) for i in range(len(w))])
    return w * without / total


def coverage_to_weight(pi: Sequence[float], k: int, max_iter: int = 200,
                       tol: float = 1e-10) -> np.ndarray:
    """Odds w whose conditional Poisson sample of size k has inclusion probabilities ``pi``."""
    pi = np.asarray(pi, dtype=np.float64)
    if not math.isclose(pi.sum(), k, rel_tol=1e-6):
        raise ValueError(f"inclusion probabilities sum to {pi.sum():.6g}, not k = {k}")
    w = pi / (1.0 - pi + 1e-12)
    for _ in range(max_iter):
        current = cps_inclusion(w, k)
        if np.linalg.norm(current - pi) < tol:
            break
        w = w * (pi / (current + 1e-12))
        w /= w.mean()
    return w


def cps_probabilities(pi: Sequence[float], k: int) -> np.ndarray:
    """Bernoulli probabilities whose trials, conditioned on k successes, include expert i with
    probability pi_i. Odds are defined up to a common factor; it is chosen so the probabilities
    sum to k, which keeps P(k successes) large and the conditioning well-conditioned."""
    odds = coverage_to_weight(pi, k)
    lo, hi = 1e-12, 1e12
    for _ in range(200):  # bisection on log scale for sum(c w / (1 + c w)) = k
        c = math.sqrt(lo * hi)
        total = float(np.sum(c * odds / (1.0 + c * odds)))
        lo, hi = (c, hi) if total < k else (lo, c)
    c = math.sqrt(lo * hi)
    return c * odds / (1.0 + c * odds)


@dataclass(frozen=True)
class DelayModel:
    """Costs of one expert tensor on this device (seconds) and the engine's shape."""

    k: int                     # experts per token
    tensors_per_expert: int    # T
    chunks: int                # K
    workers: int               # L
    decode_s: float            # d_dec: decode one tensor on one worker
    sm_read_s: float           # d_sm: read one tensor's sign-mantissa bytes
    compression_ratio: float   # CR: compressed exponent bytes / sign-mantissa bytes
    layer_compute_s: float = 0.0  # the compute thread's own work on one layer and token
    rebuild_s: float = 0.0     # merging one tensor's planes, on the compute thread
    decode_on_compute: bool = False  # no decode worker: the compute thread decodes too

    def delay(self, full_hits: int, sm_hits: int) -> float:
        t, kc = self.tensors_per_expert, self.chunks
        loaded = (self.k - full_hits) * t
        io = t * self.sm_read_s * (self.k - full_hits - sm_hits) \
            + loaded * self.sm_read_s * self.compression_ratio
        if self.decode_on_compute:
            return max(io, self.layer_compute_s + loaded * (self.decode_s + self.rebuild_s))
        compute = math.ceil(kc * loaded / self.workers) * self.decode_s / kc
        return max(compute, io, self.layer_compute_s + loaded * self.rebuild_s)


def hit_distribution(probs: Sequence[float], n_full: int, n_sm: int,
                     k: int) -> np.ndarray | None:
    """P(f full hits, s SM hits | exactly k experts chosen), as a (n_full+1, n_sm+1) array.

    ``probs`` are the Bernoulli probabilities sorted by rank; the first ``n_full`` experts are in
    the full pool, the next ``n_sm`` in the SM pool. None when k successes are impossible."""
    probs = list(probs)
    full = poisson_binomial(probs[:n_full])
    sm = poisson_binomial(probs[n_full:n_full + n_sm])
    rest = poisson_binomial(probs[n_full + n_sm:])
    total = np.convolve(np.convolve(full, sm), rest)
    if k >= len(total) or total[k] <= 0:
        return None
    out = np.zeros((len(full), len(sm)))
    for f in range(min(k, n_full) + 1):
        for s in range(min(k - f, n_sm) + 1):
            r = k - f - s
            if r < len(rest):
                out[f, s] = full[f] * sm[s] * rest[r] / total[k]
    return out


@dataclass
class Plan:
    full_ratio: float
    full_slots: int            # per layer
    sm_slots: int              # per layer
    expected_delay_s: float    # per layer and token, under the delay model
    curve: list[tuple[float, float, float]] = field(default_factory=list)  # (r, delay, smoothed)
    reason: str = "planned"

    def to_json(self) -> dict[str, object]:
        return {"full_ratio": round(self.full_ratio, 4), "full_slots_per_layer": self.full_slots,
                "sm_slots_per_layer": self.sm_slots,
                "expected_delay_ms": round(self.expected_delay_s * 1e3, 4), "reason": self.reason}


def pool_slots(full_ratio: float, layer_budget_bytes: float, full_bytes: int, sm_bytes: int,
               num_experts: int) -> tuple[int, int]:
    """(full, SM-only) slots of one layer for a full-pool share: whole full slots within the
    share, then as many SM-only slots as the rest of the budget holds."""
    n_full = min(int(full_ratio * layer_budget_bytes // full_bytes), num_experts)
    n_sm = int((layer_budget_bytes - n_full * full_bytes) // sm_bytes)
    return n_full, max(0, min(n_sm, num_experts - n_full))


def _smooth(values: Sequence[float], window: int = 5) -> list[float]:
    half = window // 2
    return [float(np.mean(values[max(0, i - half):i + half + 1])) for i in range(len(values))]


def plan_pools(popularity: Sequence[float], model: DelayModel, num_experts: int,
               layer_budget_bytes: float, full_bytes: int, sm_bytes: int,
               step: float = 0.01) -> Plan:
    """Sweep the full-pool share and return the smoothed argmin of the expected delay."""
    if layer_budget_bytes >= num_experts * full_bytes:
        return Plan(1.0, num_experts, 0, model.delay(model.k, 0), reason="budget holds every "
                    "expert in full")
    target = scale_to_k(popularity, model.k)
    probs = cps_probabilities(target, model.k) if 0 < model.k < num_experts else target
    k_avg = model.k
    rows: list[tuple[float, int, int, float]] = []
    for i in range(1, int(round(1 / step))):
        r = i * step
        n_full, n_sm = pool_slots(r, layer_budget_bytes, full_bytes, sm_bytes, num_experts)
        dist = hit_distribution(probs, n_full, n_sm, k_avg)
        if dist is None:
            continue
        expected = sum(dist[f, s] * model.delay(f, s)
                       for f in range(dist.shape[0]) for s in range(dist.shape[1]) if dist[f, s])
        rows.append((r, n_full, n_sm, expected))
    if not rows:  # k experts cannot be drawn (fewer than k with nonzero popularity)
        n_full, n_sm = pool_slots(1.0, layer_budget_bytes, full_bytes, sm_bytes, num_experts)
        return Plan(n_full * full_bytes / max(layer_budget_bytes, 1), n_full, n_sm,
                    float("nan"), reason="the routing trace cannot draw k experts: full pool "
                    "first, the rest SM-only")
    smooth = _smooth([row[3] for row in rows])
    best = int(np.argmin(smooth))
    r, n_full, n_sm, _ = rows[best]
    return Plan(r, n_full, n_sm, smooth[best],
                [(row[0], row[3], s) for row, s in zip(rows, smooth, strict=False)])
