"""ZipMoE's provider: the full and SM-only pools per layer (cache.py), planned by the delay model
(planner.py), jobs in the Type-I/Type-II order (scheduler.py) handed to a decoder (decoder.py)
that overlaps reads and decoding with the layer's compute on the experts already there, and the
next layer's predicted experts prefetched behind the current layer's reads, as the authors'
engine does (``prefetch``; the model predicts, model.py).
"""
from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator

from edgekit.methods.zipmoe.cache import FULL, SM, ZipMoECache
from edgekit.methods.zipmoe.guesses import GuessRecord
from edgekit.methods.zipmoe.model import ExpertWeights
from edgekit.methods.zipmoe.planner import (
    DelayModel,
    Plan,
    plan_pools,
    pool_slots,
    popularity_by_rank,
)
from edgekit.methods.zipmoe.providers.compute_thread import ComputeThreadDecoder
from edgekit.methods.zipmoe.providers.decoder import ExpertDecoder
from edgekit.methods.zipmoe.providers.io_thread import IoThreadDecoder
from edgekit.methods.zipmoe.providers.jobs import ExpertJob
from edgekit.methods.zipmoe.providers.process import ProcessDecoder
from edgekit.methods.zipmoe.providers.reads import decompress, exponent_span, read_raw, rebuild
from edgekit.methods.zipmoe.providers.stats import ExpertStats, Key
from edgekit.methods.zipmoe.providers.workers import WorkerDecoder
from edgekit.methods.zipmoe.scheduler import Job, SchedulerCore, schedule
from edgekit.methods.zipmoe.store import Store
from edgekit.storage import StorageReader

# Tokens that ``ZipMoEExperts.calibrate`` runs (each reads, decodes and rebuilds top-k experts
# in every MoE layer).
CALIBRATION_TOKENS = 4


def make_decoder(decode_on: str, workers: int, store: Store, reader: StorageReader,
                 stats: ExpertStats) -> ExpertDecoder:
    """The decoder ``decode_on`` and ``workers`` name: "process" a decode process whatever the
    workers; otherwise decode workers when ``workers`` > 0 (``decode_on`` then says nothing),
    with none the I/O thread for "io" and the compute thread for anything else ("compute";
    ``EngineSettings.check`` refuses other names before this is reached)."""
    if decode_on == "process":
        return ProcessDecoder(store, reader, stats, workers)
    if workers:
        return WorkerDecoder(store, reader, stats, workers)
    if decode_on == "io":
        return IoThreadDecoder(store, reader, stats)
    return ComputeThreadDecoder(store, reader, stats)


class ZipMoEExperts:
    """ZipMoE's cache, scheduler and decode engine over a store; ``decoder`` reads and decodes
    (``make_decoder``; the choices measured: docs/methods/zipmoe.md)."""

    mode = "zipmoe"

    def __init__(self, store: Store, budget_bytes: int, reader: StorageReader, workers: int = 2,
                 policy: str = "zipmoe", full_ratio: float | None = None,
                 prefetch: bool = True, decode_on: str = "process") -> None:
        """Plans the pools from the start-up profile of one tensor (``full_ratio`` None);
        ``calibrate`` then plans them again from the engine's own costs."""
        cfg = store.config
        self.store, self.reader, self.workers = store, reader, max(0, workers)
        self.stats = ExpertStats()
        self.full_bytes = store.expert_bytes
        first = store.expert_entries(cfg.moe_layers[0], 0)
        self.sm_bytes = sum(e.raw.size for e in first)
        self.tensors_per_expert = len(first)
        self.chunks = max(len(e.chunks) for e in first)
        self.budget_bytes = budget_bytes
        self.policy = policy
        self.full_ratio = full_ratio
        self.calibration: dict[str, float] | None = None
        self.prefetch_enabled = prefetch
        self.prefetched: dict[Key, ExpertJob] = {}  # reads started for the next layer
        # the predictor's last guess per (layer, late), and how often each rank proved right
        self.predictions: dict[tuple[int, bool], list[int]] = {}
        self.guesses = self._fresh_guesses()
        try:
            self.decoder = make_decoder(decode_on, self.workers, store, reader, self.stats)
        except BaseException:
            reader.close()  # the reader it was handed
            raise
        try:
            self.profile = self._profile()
            self._plan(self.profile["decode_s"], self.profile["rebuild_s"], 0.0)
        except BaseException:
            self.close()  # the reader, the threads and the decode process
            raise

    def _plan(self, decode_s: float, rebuild_s: float, layer_compute_s: float) -> None:
        """The delay model from these costs, the plan (or the fixed share) and empty pools."""
        cfg = self.store.config
        self.delay_model = DelayModel(
            k=cfg.top_k, tensors_per_expert=self.tensors_per_expert, chunks=self.chunks,
            workers=self.decoder.delay_workers, decode_s=decode_s,
            sm_read_s=self.profile["sm_read_s"], compression_ratio=self.profile["cr"],
            layer_compute_s=layer_compute_s, rebuild_s=rebuild_s,
            decode_on_compute=self.decoder.decode_on_compute)
        layer_budget = self.budget_bytes / len(cfg.moe_layers)
        if self.full_ratio is None:
            trace = self.store.manifest.get("trace") or {}
            counts = trace.get("counts") or {}
            popularity = popularity_by_rank(counts, cfg.num_experts)
            self.plan = plan_pools(popularity, self.delay_model, cfg.num_experts, layer_budget,
                                   self.full_bytes, self.sm_bytes)
            self.plan.reason += "; popularity from " + (
                f"the store's routing trace ({trace.get('tokens')} tokens)" if counts else
                "a uniform prior (the store has no routing trace)")
        else:
            n_full, n_sm = pool_slots(self.full_ratio, layer_budget, self.full_bytes,
                                      self.sm_bytes, cfg.num_experts)
            self.plan = Plan(self.full_ratio, n_full, n_sm, float("nan"),
                             reason="fixed full ratio")
        self.cache = ZipMoECache(list(cfg.moe_layers), cfg.num_experts, self.plan.full_slots,
                                 self.plan.sm_slots, self.full_bytes, self.sm_bytes, self.policy)

    def calibrate(self, step: Callable[[], object], tokens: int = CALIBRATION_TOKENS) -> None:
        """Plan again from what the engine itself costs [ours]: ``step`` (one token through the
        model) runs once to warm up, then ``tokens`` times with empty pools and no prefetch, so
        every routed expert is read, decoded and rebuilt as in serving; the compute thread's
        time per layer (bookkeeping included, waits excluded) and the decode and rebuild time
        per tensor then replace the start-up profile's, which times one tensor alone on warm
        caches (how far apart they were: docs/methods/zipmoe.md, "Calibration"). Nothing of
        the calibration stays: pools, statistics and read counts start empty."""
        if self.full_ratio is not None:
            return
        cfg = self.store.config
        keep_prefetch, self.prefetch_enabled = self.prefetch_enabled, False
        self.cache = ZipMoECache(list(cfg.moe_layers), cfg.num_experts, 0, 0, self.full_bytes,
                                 self.sm_bytes, self.policy)
        try:
            step()  # the model's first call pays one-off costs (allocations, lazy set-up)
            self.stats.reset()
            t0 = time.perf_counter()
            for _ in range(tokens):
                step()
            total = time.perf_counter() - t0
        finally:
            self.prefetch_enabled = keep_prefetch
        stats, steps = self.stats, tokens * len(cfg.moe_layers)
        decoded = max(1, (stats.sm_hits + stats.misses) * self.tensors_per_expert)
        layer_s = (total - stats.wait_s - stats.decode_compute_s - stats.rebuild_s) / steps
        # With a decode process its worker's cost per tensor is decoding and rebuilding there,
        # and the compute thread's is the copy out of the arena (``rebuild_s``).
        worker_s = (stats.decode_s + stats.worker_rebuild_s) / decoded
        self.calibration = {"tokens": tokens, "layer_compute_s": layer_s, "decode_s": worker_s,
                            "rebuild_s": stats.rebuild_s / decoded}
        self._plan(worker_s, stats.rebuild_s / decoded, layer_s)
        self.plan.reason += f"; costs calibrated on {tokens} tokens"
        self.decoder.restart_counts()
        self.stats.reset()
        self.predictions.clear()
        self.guesses = self._fresh_guesses()
        self.reader.stats.reset()

    def _profile(self, repeats: int = 5) -> dict[str, float]:
        """d_sm, d_dec and the rebuild of one tensor on this device: the fastest of ``repeats``
        tries, since a shared machine's other work only ever adds time, and the plan must not
        change with one engine's start-up timing (docs/methods/zipmoe.md, "Calibration")."""
        cfg = self.store.config
        entries = self.store.expert_entries(cfg.moe_layers[0], 0)
        sm_times, dec_times, rebuild_times, copy_times = [], [], [], []
        for _ in range(repeats):
            for entry in entries:
                t0 = time.perf_counter()
                raw = read_raw(self.reader, entry)
                sm_times.append(time.perf_counter() - t0)
                blob = self.reader.read(*exponent_span(entry))
                t0 = time.perf_counter()
                exp = decompress(entry, blob, self.store.codec)
                t1 = time.perf_counter()
                tensor = rebuild(entry, exp, raw)
                t2 = time.perf_counter()
                tensor.clone()
                dec_times.append(t1 - t0)
                rebuild_times.append(t2 - t1)
                copy_times.append(time.perf_counter() - t2)
        self.reader.stats.reset()  # profiling reads are not the workload's
        exp_bytes = sum(c.size for e in entries for c in e.chunks)
        decode_s, rebuild_s = min(dec_times), min(rebuild_times)
        if self.decoder.rebuilds_off_compute:  # the decoder rebuilds; this thread copies
            decode_s, rebuild_s = decode_s + rebuild_s, min(copy_times)
        return {"decode_s": decode_s, "rebuild_s": rebuild_s,
                "sm_read_s": min(sm_times),
                "cr": exp_bytes / max(1, sum(e.raw.size for e in entries))}

    # -- the provider ------------------------------------------------------------------------
    def _submit(self, jobs: list[Job[ExpertJob]]) -> None:
        """Hand the jobs to the decoder in the Type-I/Type-II order (scheduler.py)."""
        dm, t = self.delay_model, self.tensors_per_expert
        core = SchedulerCore(dm.workers, t, dm.decode_s, t * dm.sm_read_s,
                             exp_read_s=t * dm.sm_read_s * dm.compression_ratio)
        order = [scheduled.item for scheduled in schedule(jobs, core)]
        if order:
            self.decoder.submit(order)

    def _fresh_guesses(self) -> dict[bool, GuessRecord]:
        """Empty records of the early (False) and the late (True) guesses."""
        cfg = self.store.config
        return {late: GuessRecord(cfg.moe_layers, cfg.top_k) for late in (False, True)}

    def _rank_pays(self, layer: int, rank: int, late: bool) -> bool:
        """Whether one token's guesses of this rank for this layer (early or late ones) are
        right often enough to prefetch them."""
        return self.guesses[late].pays(layer, rank, self.decoder.prefetch_gate)

    def _drop_prefetches(self, keep_layer: int | None = None) -> None:
        for key in [k for k in self.prefetched if k[0] != keep_layer]:
            self.decoder.cancel(self.prefetched.pop(key))
            self.stats.prefetch_wasted += 1

    def prefetch(self, layer: int, tokens: dict[int, int], late: bool = False) -> None:
        """Start reading and decoding the experts ``layer`` is predicted to use (``tokens``: the
        predicted token counts), queued behind the reads already submitted. ``fetch`` adopts
        the ones the layer really routes to and cancels the rest; nothing enters a pool before
        its use, so the admission and eviction decisions stay those of on-demand serving.
        A ``late`` guess, made once the layer before has finished, replaces the early one: its
        prefetches still unfinished that the late guess leaves out are cancelled. Each kind
        is gated by its own record. The guess is recorded even with prefetching off, to
        measure the predictor."""
        self.predictions[layer, late] = list(tokens)
        if not self.prefetch_enabled:
            return
        self._drop_prefetches(keep_layer=layer)
        if late:
            for key in [k for k, job in self.prefetched.items()
                        if k[0] == layer and k[1] not in tokens and not job.over]:
                self.decoder.cancel(self.prefetched.pop(key))
                self.stats.prefetch_wasted += 1
        full, sm = self.cache.full[layer], self.cache.sm[layer]
        one_token = sum(tokens.values()) == self.store.config.top_k  # else a prompt: all of it
        jobs = []
        for rank, (expert, n) in enumerate(tokens.items()):
            key = (layer, expert)
            if (expert in full or key in self.prefetched
                    or (one_token and not self._rank_pays(layer, rank, late))):
                continue
            raws = sm.peek(expert)  # the hit is counted when the layer uses it
            job = ExpertJob(layer, expert, n, self.store.expert_entries(layer, expert), raws,
                            decision="")
            self.prefetched[key] = job
            jobs.append(Job(n, job.type_i, job))
        self._submit(jobs)

    def fetch(self, layer: int, tokens: dict[int, int]) -> Iterator[tuple[int, ExpertWeights]]:
        """Submit the layer's reads now (before any prefetch for the next layer is queued) and
        return the experts as they become ready."""
        cache = self.cache
        full, sm = cache.full[layer], cache.sm[layer]
        cache.record(layer, tokens)
        one_token = sum(tokens.values()) == self.store.config.top_k
        for late, record in self.guesses.items():
            guess = self.predictions.pop((layer, late), None)
            if guess is None or not one_token:
                continue
            record.record(layer, guess, tokens)
            if not late:  # the predictor's figures are the early guess's (the lookahead)
                self.stats.predicted += len(guess)
                self.stats.predicted_right += len(set(guess) & set(tokens))
                self.stats.routed_after_prediction += len(tokens)
        ready = [e for e in sorted(tokens) if e in full]
        full.locked.update(ready)
        done: queue.SimpleQueue = queue.SimpleQueue()
        jobs, adopted = [], []
        for expert in sorted(tokens):
            if expert in full:
                continue
            decision = cache.decide(layer, expert)
            raws = None
            if expert in sm:
                raws = sm.hit(expert, tokens[expert])
                sm.locked.add(expert)
            job = self.prefetched.pop((layer, expert), None)
            if job is not None:
                job.tokens, job.decision = tokens[expert], decision
                job.deliver_to(done)
                adopted.append(job)
                continue
            job = ExpertJob(layer, expert, tokens[expert],
                            self.store.expert_entries(layer, expert), raws, decision, done)
            jobs.append(Job(tokens[expert], job.type_i, job))
        self._drop_prefetches()  # mispredicted: whatever has not started is cancelled
        self._submit(jobs)
        self.stats.prefetched += len(adopted)
        return self._deliver(layer, tokens, ready, [j.item for j in jobs] + adopted, done)

    def _deliver(self, layer: int, tokens: dict[int, int], ready: list[int],
                 jobs: list[ExpertJob], done: queue.SimpleQueue
                 ) -> Iterator[tuple[int, ExpertWeights]]:
        full, sm = self.cache.full[layer], self.cache.sm[layer]
        delivered = False
        lent: ExpertJob | None = None
        arrived: list[tuple[ExpertJob, ExpertWeights | None]] = []
        try:
            for expert in ready:
                self.stats.activations += 1
                self.stats.full_hits += 1
                yield expert, full.hit(expert, tokens[expert])
            for _ in jobs:
                t0 = time.perf_counter()
                job = self.decoder.next_done(done)
                self.stats.wait_s += time.perf_counter() - t0
                if job.error is not None:
                    raise job.error
                weights = self.decoder.finish(job)
                self.stats.activations += 1
                if job.type_i:
                    self.stats.misses += 1
                else:
                    self.stats.sm_hits += 1
                if job.decision in (FULL, SM):  # the rest is dropped after its use
                    arrived.append((job, weights if job.decision == FULL else None))
                lent = job
                yield job.expert, weights
                del weights
                self.decoder.release(lent)  # used: a slot lent in place may be reused now
                lent = None
            # Admitted in expert order once the step is done, not in the order the reads
            # happened to finish: the pools, and so the hits, then do not depend on timing
            # (nor on what a prefetch started early), and every round serves the same way.
            # Until then the step holds only what its pools will keep.
            for job, weights in sorted(arrived, key=lambda pair: pair[0].expert):
                self._admit(layer, job, weights)
            delivered = True
        finally:
            if not delivered:  # an error: let the rest finish before the pools unlock
                if lent is not None:
                    self.decoder.release(lent)
                self.decoder.abandon(jobs)
            full.locked.clear()
            sm.locked.clear()

    def _admit(self, layer: int, job: ExpertJob, weights: ExpertWeights | None) -> None:
        full, sm = self.cache.full[layer], self.cache.sm[layer]
        if job.decision == FULL and full.admit(job.expert, weights, job.tokens):
            sm.remove(job.expert)  # exclusive pools
        elif job.decision == SM and job.expert not in sm:
            sm.admit(job.expert, list(job.raws), job.tokens)

    def describe(self) -> dict[str, object]:
        return {"policy": self.policy, "workers": self.workers,
                "decode": self.decoder.description,
                "decode_arena_bytes": self.decoder.arena_bytes,
                "chunks": self.chunks,
                "prefetch": "lookahead routing" if self.prefetch_enabled else "off",
                "predictor_precision_by_rank": self.guesses[False].by_rank(),
                "predictor_precision_by_layer_and_rank": {
                    "early" if not late else "late": record.by_layer()
                    for late, record in self.guesses.items()},
                "plan": self.plan.to_json(),
                "calibration": None if self.calibration is None else {
                    "tokens": self.calibration["tokens"],
                    "layer_compute_ms": self.calibration["layer_compute_s"] * 1e3,
                    "decode_ms_per_tensor": self.calibration["decode_s"] * 1e3,
                    "rebuild_ms_per_tensor": self.calibration["rebuild_s"] * 1e3},
                "profile": {"decode_ms_per_tensor": self.profile["decode_s"] * 1e3,
                            "rebuild_ms_per_tensor": self.profile["rebuild_s"] * 1e3,
                            "sm_read_ms_per_tensor": self.profile["sm_read_s"] * 1e3,
                            "compression_ratio": self.profile["cr"]},
                "full_slot_bytes": self.full_bytes, "sm_slot_bytes": self.sm_bytes,
                "pool_capacity_bytes": self.cache.capacity_bytes,
                "pool_used_bytes": self.cache.used_bytes,
                "bytes_read": self.reader.stats.bytes, "reads": self.reader.stats.reads}

    def close(self) -> None:
        self._drop_prefetches()
        self.decoder.close()
        self.reader.close()
