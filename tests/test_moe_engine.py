"""ZipMoE serving: the model, planner, cache, scheduler, engine modes and the CLI."""
from __future__ import annotations

import itertools
import json
import math
import time

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgekit.cli import cli
from edgekit.errors import UsageError
from edgekit.methods.zipmoe import planner
from edgekit.methods.zipmoe.cache import EVICT, FULL, SM, Policy, Pool, ZipMoECache
from edgekit.methods.zipmoe.compress import compress_checkpoint
from edgekit.methods.zipmoe.engine import Engine, EngineSettings, bench, default_workers, parse_size
from edgekit.methods.zipmoe.hf_checkpoint import Checkpoint
from edgekit.methods.zipmoe.model import ExpertWeights, KVCache, MoEModel, Speculation
from edgekit.methods.zipmoe.scheduler import Job, SchedulerCore, schedule
from edgekit.methods.zipmoe.store import Store, StoreError
from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint
from edgekit.storage import BandwidthCap, StorageReader, wait_until

pytestmark = pytest.mark.usefixtures("one_compute_thread")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    out = {}
    for family in ("qwen", "deepseek"):
        ckpt = make_tiny_checkpoint(root / f"{family}-ckpt", family, seed=2)
        compress_checkpoint(ckpt, root / f"{family}-store")
        out[family] = (ckpt, root / f"{family}-store")
    return out


class _CheckpointExperts:
    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt

    def fetch(self, layer, tokens):
        cfg = self.ckpt.config
        for e in sorted(tokens):
            yield e, ExpertWeights(*(self.ckpt.get(cfg.expert_tensor_name(layer, e, p))
                                     for p in ("gate", "up", "down")))


def _model(ckpt_dir):
    ckpt = Checkpoint(ckpt_dir)
    dense = {n: ckpt.get(n) for n in ckpt.names() if ".experts." not in n}
    return MoEModel(ckpt.config, dense, _CheckpointExperts(ckpt))


@pytest.mark.parametrize("family", ["mixtral", "qwen", "olmoe", "deepseek"])
def test_model_matches_hugging_face(tmp_path, family):
    transformers = pytest.importorskip("transformers")
    ckpt = make_tiny_checkpoint(tmp_path / family, family, seed=1)
    ids = list(b"Mixture of experts!")
    ours = _model(ckpt).forward(ids, KVCache())
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert torch.allclose(ours, ref, atol=2e-5, rtol=1e-4)


def test_kv_cache_matches_full_forward(tmp_path):
    model = _model(make_tiny_checkpoint(tmp_path / "m", "deepseek"))
    ids = list(b"incremental decoding")
    full = model.forward(ids, KVCache())
    cache = KVCache()
    parts = [model.forward(ids[:7], cache)] + [model.forward([t], cache) for t in ids[7:]]
    assert torch.allclose(torch.cat(parts), full, atol=1e-5)


# -- planner --------------------------------------------------------------------------------

def _subsets(n):
    return itertools.product((0, 1), repeat=n)


def test_poisson_binomial_against_enumeration():
    probs = [0.1, 0.7, 0.35, 0.9, 0.5]
    brute = np.zeros(len(probs) + 1)
    for s in _subsets(len(probs)):
        brute[sum(s)] += math.prod(p if x else 1 - p for p, x in zip(probs, s, strict=False))
    assert np.allclose(planner.poisson_binomial(probs), brute)


def test_hit_distribution_against_enumeration():
    probs = [0.8, 0.6, 0.5, 0.3, 0.25, 0.2, 0.1]
    n_full, n_sm, k = 2, 3, 3
    brute = np.zeros((n_full + 1, n_sm + 1))
    for s in _subsets(len(probs)):
        if sum(s) != k:
            continue
        weight = math.prod(p if x else 1 - p for p, x in zip(probs, s, strict=False))
        brute[sum(s[:n_full]), sum(s[n_full:n_full + n_sm])] += weight
    brute /= brute.sum()
    assert np.allclose(planner.hit_distribution(probs, n_full, n_sm, k), brute)


def test_conditional_poisson_weights_reach_the_target_inclusion():
    pi = planner.scale_to_k([0.3, 0.25, 0.15, 0.12, 0.1, 0.08], 2)
    assert pi.sum() == pytest.approx(2) and pi.max() < 1
    probs = planner.cps_probabilities(pi, 2)
    assert probs.sum() == pytest.approx(2)
    inclusion = np.zeros(len(pi))
    for s in _subsets(len(pi)):
        if sum(s) == 2:
            w = math.prod(p if x else 1 - p for p, x in zip(probs, s, strict=False))
            inclusion += w * np.array(s)
    assert np.allclose(inclusion / inclusion.sum() * 2, pi, atol=1e-8)


def test_scale_to_k_caps_at_one():
    pi = planner.scale_to_k([0.9, 0.05, 0.03, 0.02], 2)
    assert pi.sum() == pytest.approx(2) and pi[0] == pytest.approx(1, abs=1e-8)


def test_plan_respects_the_budget_and_prefers_full_when_decoding_is_slow():
    pop = planner.popularity_by_rank([[50, 30, 10, 5, 3, 1, 1, 0]], 8)
    fast = planner.DelayModel(2, 3, 4, 2, decode_s=1e-6, sm_read_s=1e-3, compression_ratio=0.3)
    slow = planner.DelayModel(2, 3, 4, 2, decode_s=1e-1, sm_read_s=1e-3, compression_ratio=0.3)
    for model in (fast, slow):
        plan = planner.plan_pools(pop, model, 8, 4 * 100, 100, 50)
        assert plan.full_slots * 100 + plan.sm_slots * 50 <= 400
        assert plan.full_slots + plan.sm_slots <= 8
    assert planner.plan_pools(pop, slow, 8, 400, 100, 50).full_slots >= \
        planner.plan_pools(pop, fast, 8, 400, 100, 50).full_slots
    assert planner.plan_pools(pop, fast, 8, 900, 100, 50).full_slots == 8


def test_pool_slots_give_the_full_share_remainder_to_sm_slots():
    # the benchmark's layer: 6 MiB budget, 768 KiB experts, 384 KiB SM-only; r = 0.27 floors to
    # 2 full slots, and the remaining 4.5 MiB hold 12 SM slots (flooring 0.73 of it: only 11)
    assert planner.pool_slots(0.27, 6 * 2**20, 786432, 393216, 32) == (2, 12)
    assert planner.pool_slots(0.27, 6 * 2**20, 786432, 393216, 10) == (2, 8)   # expert count
    assert planner.pool_slots(1.0, 650, 100, 50, 8) == (6, 1)
    pop = planner.popularity_by_rank([[50, 30, 10, 5, 3, 1, 1, 0]], 8)
    model = planner.DelayModel(2, 3, 4, 2, decode_s=1e-3, sm_read_s=1e-3, compression_ratio=0.3)
    for budget in (250, 430, 560):
        plan = planner.plan_pools(pop, model, 8, budget, 100, 50)
        used = plan.full_slots * 100 + plan.sm_slots * 50
        assert used <= budget and (budget - used < 50 or plan.full_slots + plan.sm_slots == 8)


def test_delay_model_reads_every_byte_from_one_device():
    """k=4, T=3, K=4, L=2, d_dec=0.4 ms, d_sm=1 ms, CR=0.25."""
    model = planner.DelayModel(4, 3, 4, 2, decode_s=4e-4, sm_read_s=1e-3, compression_ratio=0.25)
    # 1 full hit, 1 SM hit, 2 misses: the workers decode 3 experts x 3 tensors x 4 chunks = 36
    # chunks, 18 each at 0.4/4 ms (1.8 ms); the device reads 2 x 3 sign-mantissa tensors
    # (6 ms) and the exponents of all 3 experts not in the full pool (3 x 3 x 0.25 ms), where the
    # authors' term would count only the SM hit's (6.75 ms).
    assert model.delay(1, 1) == pytest.approx(6e-3 + 2.25e-3)
    assert model.delay(4, 0) == 0.0
    # decoding at 4 ms per tensor is the longer side: 18 chunks at 1 ms each; the exponent reads
    # are the I/O thread's, not the workers' (the authors' C would add 18 x 0.0625 ms)
    slow = planner.DelayModel(4, 3, 4, 2, decode_s=4e-3, sm_read_s=1e-3, compression_ratio=0.25)
    assert slow.delay(1, 1) == pytest.approx(18e-3)


def test_delay_model_counts_the_compute_threads_own_work():
    """k=4, T=3: 1 full hit, so 9 tensors are loaded; d_dec 0.2 ms, rebuild 0.1 ms, layer
    compute 2 ms; IO = 6 + 2.25 ms as above."""
    costs = dict(decode_s=2e-4, sm_read_s=1e-3, compression_ratio=0.25, layer_compute_s=2e-3,
                 rebuild_s=1e-4)
    on_compute = planner.DelayModel(4, 3, 4, 1, decode_on_compute=True, **costs)
    worker = planner.DelayModel(4, 3, 4, 1, **costs)
    assert on_compute.delay(1, 1) == pytest.approx(max(8.25e-3, 2e-3 + 9 * 3e-4))
    assert worker.delay(1, 1) == pytest.approx(8.25e-3)      # IO is the longest side
    heavy = planner.DelayModel(4, 3, 4, 1, decode_on_compute=True,
                               **{**costs, "layer_compute_s": 20e-3})
    assert heavy.delay(1, 1) == pytest.approx(20e-3 + 9 * 3e-4)   # the compute thread is
    assert heavy.delay(3, 0) == pytest.approx(20e-3 + 3 * 3e-4)   # full hits spare it


def test_plan_keeps_more_experts_full_when_the_compute_thread_decodes():
    """The trained benchmark model's shape (32 experts, top-4, T=3, 6 MiB per layer) with a
    skewed popularity: decoding on a busy compute thread makes full slots pay."""
    pop = planner.popularity_by_rank([[100 // (i + 1) for i in range(32)]], 32)
    costs = dict(decode_s=1e-4, sm_read_s=4.3e-4, compression_ratio=0.32, rebuild_s=7e-5)
    shape = (4, 3, 2, 1)
    reads_only = planner.DelayModel(*shape, **costs)
    busy = planner.DelayModel(*shape, decode_on_compute=True, layer_compute_s=3e-3, **costs)
    plan = dict(num_experts=32, layer_budget_bytes=6 * 2**20, full_bytes=786432,
                sm_bytes=393216)
    lean, heavy = planner.plan_pools(pop, reads_only, **plan), \
        planner.plan_pools(pop, busy, **plan)
    assert heavy.full_slots > lean.full_slots
    assert heavy.full_slots * 786432 + heavy.sm_slots * 393216 <= 6 * 2**20


# -- cache and scheduler ---------------------------------------------------------------------

def test_token_weighted_lfu_evicts_the_coldest_unlocked_slot():
    pool = Pool("full", 2, 1, Policy("zipmoe"))
    pool.admit("a", 1, tokens=5)
    pool.admit("b", 2, tokens=1)
    pool.hit("a", 10)          # a: 11 tokens, b: 1
    pool.locked.add("b")
    assert pool.admit("c", 3, tokens=1)
    assert set(pool.items) == {"b", "c"}   # b was colder but locked
    pool.locked.clear()
    pool.hit("c", 4)
    pool.admit("d", 4, tokens=1)
    assert set(pool.items) == {"c", "d"}


@pytest.mark.parametrize("policy,kept", [("lru", {"a", "c"}), ("fifo", {"b", "c"}),
                                         ("lfu", {"a", "c"})])
def test_comparison_policies(policy, kept):
    pool = Pool("p", 2, 1, Policy(policy))
    pool.admit("a", 1, 1)
    pool.admit("b", 2, 1)
    pool.hit("a", 1)
    pool.admit("c", 3, 1)
    assert set(pool.items) == kept


def test_admission_by_rank():
    cache = ZipMoECache([0], 6, full_slots=1, sm_slots=2, full_bytes=2, sm_bytes=1)
    cache.record(0, {0: 9, 1: 7, 2: 5, 3: 3, 4: 1})
    assert cache.decide(0, 0) == FULL
    cache.full[0].admit(0, "w0", 9)
    assert cache.decide(0, 3) == SM          # rank 3 is past T_full and T_sm but SM is free
    cache.sm[0].admit(3, "s3", 3)
    cache.sm[0].admit(2, "s2", 5)
    assert cache.decide(0, 4) == EVICT       # rank 4 >= T_sm and no free slot
    assert cache.decide(0, 1) == SM          # T_full <= rank 1 < T_sm: SM by eviction
    cache.record(0, {5: 100})
    assert cache.decide(0, 5) == FULL        # rank 0: full pool by eviction
    cache.full[0].locked.add(0)
    assert cache.decide(0, 5) == EVICT       # ... unless its only slot is locked
    assert cache.capacity_bytes == 4


def test_scheduler_alternates_type_i_and_type_ii():
    jobs = [Job(t, True, f"I{t}") for t in (1, 5, 3)] + [Job(t, False, f"II{t}")
                                                          for t in (2, 8, 4, 6)]
    # one Type-I read covers two Type-II decodes
    core = SchedulerCore(workers=1, ops_per_job=1, op_s=1.0, sm_read_s=2.0)
    order = [j.item for j in schedule(jobs, core)]
    assert order == ["I5", "II8", "II6", "I3", "II4", "I1", "II2"]
    # exponent reads on the I/O side too (edgekit's engine): I/O stays the longer side
    core = SchedulerCore(workers=1, ops_per_job=1, op_s=1.0, sm_read_s=2.0, exp_read_s=1.0)
    order = [j.item for j in schedule(jobs, core)]
    assert order == ["I5", "II8", "II6", "II4", "II2", "I3", "I1"]


# -- storage reads ---------------------------------------------------------------------------

def test_reader_direct_or_buffered_and_bandwidth_cap(tmp_path):
    path = tmp_path / "blob"
    data = bytes(range(256)) * 40000
    path.write_bytes(data)
    for direct in (True, False):
        with StorageReader(path, direct=direct) as reader:
            assert reader.read(4096, 1000) == data[4096:5096]
            assert reader.read(5000, 333) == data[5000:5333]      # unaligned too
            assert reader.read(len(data) - 10, 100) == data[-10:]
    cap = BandwidthCap(100e6, "test")
    with StorageReader(path, direct=False, cap=cap) as reader:
        t0 = time.perf_counter()
        reader.read(0, 2_000_000)
        assert time.perf_counter() - t0 >= 0.019
        assert reader.describe()["bandwidth"] == "capped at 0.1 GB/s"


def test_read_ahead_books_the_channel_and_returns_at_once(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 1000)
    cap = BandwidthCap(10e6, "test")
    with StorageReader(path, direct=False, cap=cap) as reader:
        t0 = time.perf_counter()
        first, ready_1 = reader.read_ahead(0, 100_000)
        _, ready_2 = reader.read_ahead(100_000, 100_000)
        assert first == path.read_bytes()[:100_000]
        assert ready_1 >= t0 + 0.01 and ready_2 == pytest.approx(ready_1 + 0.01)
        cap.throttle(0.005)  # 20 ms booked: returns with at most 5 ms left
        assert ready_2 - time.perf_counter() <= 0.005 and time.perf_counter() - t0 >= 0.014
        wait_until(ready_2)
        assert time.perf_counter() >= ready_2
        assert (reader.stats.reads, reader.stats.bytes) == (2, 200_000)


def test_default_workers_leave_cores_to_compute_and_io(stores):
    assert default_workers(compute_threads=1, cores=2) == 0     # this VM: compute thread decodes
    assert default_workers(compute_threads=1, cores=4) == 2
    assert default_workers(compute_threads=1, cores=12) == 4    # capped
    assert default_workers(compute_threads=8, cores=8) == 0
    _, store_dir = stores["qwen"]
    with Engine(store_dir, EngineSettings(memory_budget=0)) as engine:
        assert engine.settings.workers == engine.experts.workers == default_workers()
    with pytest.raises(UsageError, match="workers cannot be negative"):
        EngineSettings(workers=-1).check()


def test_calibration_plans_from_the_engines_costs_and_leaves_nothing_behind(stores):
    _, store_dir = stores["qwen"]
    store = Store(store_dir)
    budget = parse_size("25%", store.total_expert_bytes)
    with Engine(store, EngineSettings(memory_budget=budget, workers=0)) as engine:
        experts = engine.experts
        cal = experts.describe()["calibration"]
        assert cal["tokens"] > 0 and cal["layer_compute_ms"] > 0
        assert cal["decode_ms_per_tensor"] > 0 and cal["rebuild_ms_per_tensor"] > 0
        assert "calibrated" in experts.plan.reason
        assert experts.delay_model.layer_compute_s == pytest.approx(
            cal["layer_compute_ms"] / 1e3)
        # what the calibration read and decoded is not the workload's
        assert experts.stats.activations == experts.reader.stats.bytes == 0
        assert not experts.cache.used_bytes and experts.prefetch_enabled
        assert experts.plan.full_slots * experts.full_bytes \
            + experts.plan.sm_slots * experts.sm_bytes <= budget
    fixed = EngineSettings(memory_budget=budget, workers=0, full_ratio=0.5)
    with Engine(store, fixed) as engine:
        assert engine.experts.describe()["calibration"] is None


def test_parse_size():
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("25%", 1000) == 250
    assert parse_size("4096") == 4096
    with pytest.raises(UsageError, match="cannot read the size"):
        parse_size("lots")
    with pytest.raises(UsageError, match="unknown size unit 'furlongs'"):
        parse_size("3furlongs")


# -- the engine ------------------------------------------------------------------------------

@pytest.mark.parametrize("family,workers,decode_on", [("qwen", 0, "compute"), ("qwen", 0, "io"),
                                                     ("qwen", 2, "compute"),
                                                     ("qwen", 0, "process"),
                                                     ("deepseek", None, "io"),
                                                     ("deepseek", None, "process")])
def test_all_modes_give_bit_identical_logits(stores, family, workers, decode_on):
    _, store_dir = stores[family]
    store = Store(store_dir)
    settings = EngineSettings(memory_budget=parse_size("25%", store.total_expert_bytes),
                              bandwidth_bytes_s=2e9, bandwidth_source="test", workers=workers,
                              decode_on=decode_on)
    report = bench(store, settings, ["Hello there", "MoE"], max_new_tokens=5)
    assert report["logits"]["identical"] and report["logits"]["steps_compared"] == 10
    z, naive, mem = (report["results"][m] for m in ("zipmoe", "naive", "memory"))
    for r in (z, naive, mem):
        x = r["experts"]
        assert x["activations"] == x["full_hits"] + x["sm_hits"] + x["misses"] > 0
        assert r["new_tokens"] == 10 and r["ttft_ms"] > 0
    assert mem["bytes_read"] == 0 and naive["bytes_read"] > 0 and z["bytes_read"] > 0
    assert z["provider"]["pool_capacity_bytes"] <= settings.memory_budget
    assert naive["provider"]["lru_slots"] * store.expert_bytes <= settings.memory_budget
    assert z["storage"]["bandwidth_source"] == "test"
    expected_workers = default_workers() if workers is None else workers
    assert report["settings"]["workers"] == z["provider"]["workers"] == expected_workers
    on_io = expected_workers == 0 and decode_on == "io"
    assert z["provider"]["decode"] == (
        "in a decode process" if decode_on == "process" else
        "decode workers" if expected_workers else
        f"on the {'I/O' if on_io else 'compute'} thread")
    off_compute = expected_workers > 0 or on_io or decode_on == "process"
    assert (z["breakdown"]["decode_on_compute_s"] == 0) == off_compute
    assert (z["experts"]["worker_rebuild_s"] > 0) == (decode_on == "process")


@pytest.mark.parametrize("family,mode,decode_on", [("qwen", "zipmoe", "compute"),
                                                   ("deepseek", "zipmoe", "process"),
                                                   ("qwen", "naive", "io"),
                                                   ("qwen", "memory", "io")])
def test_the_compute_path_makes_its_tensors_on_the_compute_device(stores, family, mode,
                                                                   decode_on):
    """On a GPU, a tensor made without ``device=`` lands on the CPU, away from the CUDA tensors
    it meets (issue 47: ``index_add_``'s index on cuda:0, the lookahead's sums on the CPU). A
    CPU machine has no second device to compute on, so the test turns it round: the model
    computes on the CPU while the default device is ``meta``, and any tensor the compute path
    makes without taking its device from its inputs lands there and fails the same way. The
    logits must not change by a bit."""
    _, store_dir = stores[family]
    settings = EngineSettings(mode=mode, memory_budget=0, workers=0, decode_on=decode_on)
    with Engine(store_dir, settings) as engine:
        expected = engine.generate("Hello there", 4)
        with torch.device("meta"):
            got = engine.generate("Hello there", 4)
    assert got.tokens == expected.tokens
    assert all(torch.equal(a, b) for a, b in zip(expected.logits, got.logits, strict=True))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("decode_on", ["process", "io"])
def test_modes_give_bit_identical_logits_on_a_gpu(stores, decode_on):
    """The GPU compute path (decoding on the CPU, as on the paper's Jetson): every mode's logits
    bit-identical to the others', and close to the CPU's (other kernels, other rounding)."""
    _, store_dir = stores["deepseek"]
    store = Store(store_dir)
    settings = EngineSettings(memory_budget=parse_size("25%", store.total_expert_bytes),
                              decode_on=decode_on, device="cuda")
    report = bench(store, settings, ["Hello there", "MoE"], max_new_tokens=5)
    assert report["logits"]["identical"] and report["logits"]["steps_compared"] == 10
    with Engine(store, EngineSettings(mode="memory")) as cpu, \
            Engine(store, EngineSettings(mode="zipmoe", decode_on=decode_on,
                                         device="cuda")) as gpu:
        a, b = cpu.generate("Hello there", 5), gpu.generate("Hello there", 5)
    assert all(torch.allclose(x, y, atol=1e-4, rtol=1e-4)
               for x, y in zip(a.logits, b.logits, strict=True))


def test_zero_budget_and_policies_still_exact(stores):
    _, store_dir = stores["qwen"]
    store = Store(store_dir)
    runs = []
    for policy, budget in (("zipmoe", 0), ("lru", 10**6), ("fifo", store.expert_bytes * 3)):
        with Engine(store, EngineSettings(memory_budget=budget, policy=policy)) as engine:
            runs.append(engine.generate("abc", 4).logits)
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other, strict=False))


def test_prefetch_serves_most_decode_experts_and_keeps_logits_exact(stores):
    """Lookahead prefetch on vs off: the same logits, the same cache decisions (nothing enters
    a pool before its use), and most of the experts that can be prefetched are."""
    _, store_dir = stores["qwen"]
    store = Store(store_dir)
    results = {}
    for prefetch in (True, False):
        settings = EngineSettings(memory_budget=parse_size("25%", store.total_expert_bytes),
                                  full_ratio=0.5, prefetch=prefetch)  # one plan for both: the
        with Engine(store, settings) as engine:                       # planner uses timings
            logits = [engine.generate(p, 6).logits for p in ("Hello there", "MoE")]
            results[prefetch] = (logits, engine.metrics()["experts"])
    (on_logits, on), (off_logits, off) = results[True], results[False]
    assert all(torch.equal(a, b) for run_on, run_off in zip(on_logits, off_logits, strict=False)
               for a, b in zip(run_on, run_off, strict=False))
    for key in ("full_hits", "sm_hits", "misses"):
        assert on[key] == off[key]
    assert off["prefetched"] == off["prefetch_wasted"] == 0
    assert off["prefetch_precision"] is None
    # 2 prompts x 5 decode steps x 2 MoE layers x top-2 = 40 decode activations, each predicted
    # from the layer before (the first layer from the previous step's last one)
    assert on["prefetched"] >= 30 and on["prefetch_precision"] > 0.8


@pytest.mark.parametrize("family", ["qwen", "deepseek"])
@pytest.mark.parametrize("wrong", [False, True])
def test_the_next_tokens_first_layers_are_computed_ahead_once(stores, monkeypatch, family,
                                                              wrong):
    """After its last MoE layer the model runs the next token's layers up to the first MoE
    layer's attention (deepseek: a dense layer before it) for the LM head's guess; the next
    step adopts them when the guess is right, so they run once per token, and recomputes them
    when it is wrong (forced here): the logits are exact either way."""
    _, store_dir = stores[family]
    store = Store(store_dir)
    first = store.config.moe_layers[0]
    with Engine(store, EngineSettings(mode="memory")) as engine:
        reference = engine.generate("Hello there", 6).logits
    adopted, attentions = [], []
    adopt = Speculation.adopt
    monkeypatch.setattr(Speculation, "adopt",
                        lambda self, cache: adopted.append(self.token) or adopt(self, cache))
    settings = EngineSettings(memory_budget=parse_size("25%", store.total_expert_bytes),
                              full_ratio=0.5)
    with Engine(store, settings) as engine:
        model = engine.model
        attention, speculate = model._attention, model._speculate

        def count(layer, *args):
            attentions.append(layer)
            return attention(layer, *args)

        def guess_wrong(residual):
            x = speculate(residual)
            model._speculation.token = (model._speculation.token + 1) % store.config.vocab_size
            return x

        model._attention = count
        if wrong:
            model._speculate = guess_wrong
        logits = engine.generate("Hello there", 6).logits
    assert all(torch.equal(a, b) for a, b in zip(logits, reference, strict=True))
    # 1 prefill + 5 decode steps; a guess after each of the 6 forwards
    assert attentions.count(first) == 1 + 6 + (5 - len(adopted))
    assert (len(adopted) == 0) if wrong else (len(adopted) >= 3)


def test_a_guess_ahead_keeps_no_finished_generation_alive(stores):
    """What the last step computed ahead for a token that never comes holds the generation's
    cache weakly and only the layers it computed: nothing of a long context stays alive."""
    _, store_dir = stores["deepseek"]
    store = Store(store_dir)
    with Engine(store, EngineSettings(memory_budget=0)) as engine:
        engine.generate("Hello there", 3)
        speculation = engine.model._speculation
        assert speculation is not None and speculation.cache() is None
        assert len(speculation.keys) == store.config.moe_layers[0] + 1 < store.config.num_layers


@pytest.mark.parametrize("workers,decode_on", [(0, "process"), (0, "io"), (2, "io")])
def test_a_wrong_prefetch_is_dropped_and_the_layer_still_gets_its_experts(stores, workers,
                                                                          decode_on):
    _, store_dir = stores["qwen"]
    store = Store(store_dir)
    settings = EngineSettings(memory_budget=0, workers=workers, decode_on=decode_on)
    with Engine(store, settings) as engine:
        experts = engine.experts
        experts.prefetch(1, {0: 1, 1: 1, 2: 1})
        time.sleep(0.2)  # let some prefetches finish before the layer asks (adopted when done)
        got = dict(experts.fetch(1, {1: 1, 5: 2}))
        assert sorted(got) == [1, 5]
        with Engine(store, EngineSettings(mode="memory")) as reference:
            expected = dict(reference.experts.fetch(1, {1: 1, 5: 2}))
        for e in got:
            assert all(torch.equal(a, b) for a, b in zip(got[e], expected[e], strict=False))
        stats = experts.stats
        assert (stats.prefetched, stats.prefetch_wasted) == (1, 2) and not experts.prefetched
        experts.prefetch(0, {3: 1})
        experts.prefetch(1, {4: 1})  # a prefetch for another layer drops the older one
        assert stats.prefetch_wasted == 3 and list(experts.prefetched) == [(1, 4)]


@pytest.mark.parametrize("workers", [0, 2])
def test_io_thread_reads_in_order_and_a_dropped_prefetch_stops_reading(stores, workers):
    _, store_dir = stores["qwen"]
    store = Store(store_dir)
    settings = EngineSettings(memory_budget=0, bandwidth_bytes_s=2e6, bandwidth_source="test",
                              workers=workers, decode_on="io")
    with Engine(store, settings) as engine:
        experts = engine.experts
        reads: list[int] = []
        real = experts.reader.read_ahead

        def logged(offset: int, size: int):
            reads.append(offset)
            return real(offset, size)

        experts.reader.read_ahead = logged
        got = dict(experts.fetch(1, {5: 1}))
        entries = store.expert_entries(1, 5)
        # a miss whose streams lie back to back is one read from its first stream
        assert reads == [min(x.offset for e in entries for x in (*e.chunks, e.raw))]
        assert sorted(got) == [5]
        reads.clear()
        experts.prefetch(1, {0: 1, 1: 1, 2: 1})  # 3 reads of about 12 ms each at 2 MB/s
        dict(experts.fetch(1, {3: 1}))              # drops them: at most a few were booked
        assert len(reads) <= 6 + 4
        assert experts.stats.prefetch_wasted == 3


@pytest.mark.parametrize("workers,decode_on", [(0, "process"), (0, "io"), (2, "io")])
def test_corrupt_expert_is_caught_while_serving(stores, tmp_path, workers, decode_on):
    _, store_dir = stores["qwen"]
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in store_dir.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    store = Store(bad)
    raw = store.tensors["model.layers.1.mlp.experts.5.up_proj.weight"].raw
    chunk = store.tensors["model.layers.1.mlp.experts.7.gate_proj.weight"].chunks[0]
    blob = bytearray(store.data_path.read_bytes())
    blob[raw.offset] ^= 0xFF
    blob[chunk.offset] ^= 0xFF
    store.data_path.write_bytes(bytes(blob))
    settings = EngineSettings(memory_budget=0, workers=workers, decode_on=decode_on)
    with Engine(store, settings) as engine:
        with pytest.raises(StoreError, match="experts.5.up_proj.weight': sign-mantissa bytes "
                                             "fails its CRC-32"):
            list(engine.experts.fetch(1, {e: 1 for e in range(8)}))
    with Engine(store, settings) as engine:  # decoded by a worker or by the compute thread
        with pytest.raises(StoreError, match="experts.7.gate_proj.weight': exponent chunk 1 of"):
            list(engine.experts.fetch(1, {7: 1}))
    with Engine(store, settings) as engine:
        experts = engine.experts
        experts.prefetch(1, {5: 1, 6: 1})  # a wrong guess that reads the bad tensor: no error
        assert sorted(dict(experts.fetch(1, {6: 1}))) == [6]
        experts.prefetch(1, {5: 1})  # a right one: the error reaches the layer that uses it
        with pytest.raises(StoreError, match="experts.5.up_proj.weight'"):
            list(experts.fetch(1, {5: 1}))


def test_rope_scaling_is_refused_when_serving(tmp_path):
    ckpt = make_tiny_checkpoint(tmp_path / "c", "deepseek")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["rope_scaling"] = {"type": "yarn", "factor": 40}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    manifest = compress_checkpoint(ckpt, tmp_path / "s")
    assert "rope_scaling 'yarn' is not implemented" in manifest["trace"]["skipped"]
    with pytest.raises(UsageError, match="rope_scaling 'yarn' is not implemented"):
        Engine(tmp_path / "s", EngineSettings(mode="memory"))


def test_cli_end_to_end(tmp_path):
    runner = CliRunner()
    ckpt, store, report = tmp_path / "ck", tmp_path / "st", tmp_path / "bench.json"
    result = runner.invoke(cli, ["moe", "make-tiny", str(ckpt), "--family", "mixtral"])
    assert result.exit_code == 0, result.output
    assert "mixtral, 2 layers (2 MoE), 8 experts top-2" in result.output
    result = runner.invoke(cli, ["moe", "compress", str(ckpt), "-o", str(store), "--codec", "lz4"])
    assert result.exit_code == 0, result.output
    assert "bits/param" in result.output and "routing trace: 515 tokens" in result.output
    result = runner.invoke(cli, ["moe", "serve", str(store), "--prompt", "Hi", "--memory-budget",
                                 "30%", "--max-new-tokens", "3", "--storage-profile",
                                 "jetson-agx-orin-64gb"])
    assert result.exit_code == 0, result.output
    assert "zipmoe: 3 tokens" in result.output and "capped at 0.4 GB/s" in result.output
    result = runner.invoke(cli, ["moe", "bench", str(store), "--max-new-tokens", "2", "--prompt",
                                 "x", "--json", str(report), "--decode-on", "io"])
    assert result.exit_code == 0, result.output
    doc = json.loads(report.read_text())
    assert doc["kind"] == "moe/bench" and doc["logits"]["identical"]
    assert doc["results"]["zipmoe"]["provider"]["decode"] == "on the I/O thread"
    assert set(doc["results"]) == {"zipmoe", "naive", "memory"}
    result = runner.invoke(cli, ["moe", "serve", str(tmp_path), "--prompt", "x"])
    assert result.exit_code == 2
    assert "not a ZipMoE store" in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["moe", "serve", str(store), "--prompt", "x", "--memory-budget",
                                 "half"])
    assert result.exit_code == 2 and "cannot read the size 'half'" in result.output
    result = runner.invoke(cli, ["moe", "serve", str(store), "--prompt", "x", "--decode-on",
                                 "gpu"])
    assert result.exit_code == 2 and "'gpu' is not one of 'process', 'io', 'compute'" in \
        result.output
    result = runner.invoke(cli, ["moe", "serve", str(store), "--prompt", "x", "--workers", "-1"])
    assert result.exit_code == 2
    assert "'--workers': -1 is not in the range 0<=x<=4096" in result.output
