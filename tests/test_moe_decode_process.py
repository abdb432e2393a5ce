"""ZipMoE's decode process: the slot layout, the process itself (no torch in it), exact experts
through a small arena, dropped prefetches, and a process that dies."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from edgekit.methods.zipmoe.decode_process import expert_layout
from edgekit.methods.zipmoe.engine import Engine, EngineSettings, parse_size
from edgekit.methods.zipmoe.providers import process as decode_strategy
from edgekit.methods.zipmoe.store import Store, StoreError

pytestmark = pytest.mark.usefixtures("one_compute_thread")


@pytest.fixture(scope="module")
def store(tiny_qwen):
    return Store(tiny_qwen[1])


def _reference(store, layer, tokens):
    with Engine(store, EngineSettings(mode="memory")) as engine:
        return dict(engine.experts.fetch(layer, tokens))


def _copies(deliveries):
    """The delivered experts, copied: the decode process lends its slots until the next one."""
    return {e: tuple(t.clone() for t in w) for e, w in deliveries}


def _same(got, expected):
    return sorted(got) == sorted(expected) and all(
        torch.equal(a, b) for e in got for a, b in zip(got[e], expected[e], strict=True))


def test_layout_mirrors_the_store_so_a_miss_is_one_read_per_tensor(store):
    layer = store.config.moe_layers[-1]
    entries = store.expert_entries(layer, 2)
    miss = expert_layout(entries, type_i=True)
    first = min(x.offset for e in entries for x in (*e.chunks, e.raw))
    assert [r[0] for r in miss.reads] == [e.chunks[0].offset for e in entries]
    assert [r[2] for r in miss.reads] == [e.chunks[0].offset - first for e in entries]
    assert [r[1] for r in miss.reads] == [e.raw.end - e.chunks[0].offset for e in entries]
    assert [t["after"] for t in miss.tensors] == list(range(len(entries)))
    end = max(r[2] + r[1] for r in miss.reads)
    for spec, entry in zip(miss.tensors, entries, strict=True):
        # every stream where its read puts it, its CRC checked there
        assert spec["raw"] == [entry.raw.offset - first, entry.raw.size, entry.raw.crc32]
        assert [c[0] for c in spec["chunks"]] == [c.offset - first for c in entry.chunks]
        assert spec["out"] >= end and spec["out"] % 4096 == 0
    # an SM-only hit reads each tensor's exponents only; its raw bytes come from the pool
    hit = expert_layout(entries, type_i=False)
    assert len(hit.reads) == len(entries)
    assert all(spec["raw"][2] == -1 for spec in hit.tensors)
    assert [r[0] for r in hit.reads] == [e.chunks[0].offset for e in entries]
    assert [t["after"] for t in hit.tensors] == list(range(len(entries)))


def test_the_decode_process_imports_neither_torch_nor_the_engine():
    code = ("import sys, edgekit.kernels.zipmoe_decoder; "
            "print(sorted(m for m in sys.modules if m.startswith(('torch', 'edgekit.methods'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_small_arena_streams_a_prefill_through_its_slots_exactly(store, monkeypatch):
    """Two slots for a layer that routes to every expert: the rest wait for a slot, and so does
    the next layer's prefetch, behind them; every expert still matches the in-memory one."""
    monkeypatch.setattr(decode_strategy, "ARENA_SLOTS_PER_TOP_K", 0)  # the floor: 2 slots
    layer, n = store.config.moe_layers[0], store.config.num_experts
    tokens = {e: 1 for e in range(n)}
    with Engine(store, EngineSettings(memory_budget=0)) as engine:
        experts = engine.experts
        assert experts.decoder.process.slots == 2
        assert experts.describe()["decode_arena_bytes"] == 2 * experts.decoder.process.slot_bytes
        got = {}
        for i, (expert, weights) in enumerate(experts.fetch(layer, tokens)):
            if i == 0:
                # the first expert is lent in its slot, the second is being read into the
                # other: the rest wait for a slot
                assert len(experts.decoder._backlog) == n - 2
                experts.prefetch(layer + 1, {0: 1})   # queued behind them
                assert experts.decoder._backlog[-1] is experts.prefetched[layer + 1, 0]
            got[expert] = tuple(t.clone() for t in weights)
        assert not experts.decoder._backlog and list(experts.prefetched) == [(layer + 1, 0)]
        next_layer = _copies(experts.fetch(layer + 1, {0: 1}))  # adopts it
        assert experts.stats.prefetched == 1
        assert len(experts.decoder._free_slots) == 2 and not experts.decoder._sent
        assert experts.stats.misses == n + 1
        assert experts.reader.stats.reads == (n + 1) * experts.tensors_per_expert
    assert _same(got, _reference(store, layer, tokens))
    assert _same(next_layer, _reference(store, layer + 1, {0: 1}))


def test_prefetches_in_the_process_are_adopted_or_dropped(store):
    layer = store.config.moe_layers[-1]
    settings = EngineSettings(memory_budget=0, bandwidth_bytes_s=2e6, bandwidth_source="test")
    with Engine(store, settings) as engine:
        experts = engine.experts
        experts.prefetch(layer, {0: 1, 1: 1, 2: 1})  # reads of about 12 ms each at 2 MB/s
        got = _copies(experts.fetch(layer, {0: 1, 3: 1}))  # adopts 0, drops 1 and 2
        assert experts.stats.prefetched == 1 and experts.stats.prefetch_wasted == 2
        deadline = time.monotonic() + 5
        decoder = experts.decoder
        while decoder._sent and time.monotonic() < deadline:  # their slots come back
            decoder._pump(block=False)
            time.sleep(0.01)
        assert not decoder._sent and len(decoder._free_slots) == decoder.process.slots
        # experts 0 and 3 were read whole, one read per tensor; the dropped ones stopped
        # reading: at most one tensor's read was booked before the cancel
        t = experts.tensors_per_expert
        assert 2 * t <= experts.reader.stats.reads <= 2 * t + 1
    assert _same(got, _reference(store, layer, {0: 1, 3: 1}))


def test_a_decode_process_that_dies_is_one_clear_error(store):
    layer = store.config.moe_layers[0]
    with Engine(store, EngineSettings(memory_budget=0)) as engine:
        process = engine.experts.decoder.process._proc
        process.kill()
        process.wait()
        with pytest.raises(StoreError, match=r"the ZipMoE decode process exited \(code -9\)"):
            list(engine.experts.fetch(layer, {0: 1}))


def test_closing_the_engine_ends_the_process_and_frees_the_arena(store):
    with Engine(store, EngineSettings(memory_budget=parse_size("25%",
                                                               store.total_expert_bytes))) as e:
        e.generate("hi", 3)
        decoder = e.experts.decoder.process
        process, arena_fd = decoder._proc, decoder._fd
    assert process.poll() is not None
    with pytest.raises(OSError):
        os.fstat(arena_fd)


def test_a_decode_process_that_cannot_start_is_one_clear_error_and_leaks_nothing(
        store, tmp_path, monkeypatch):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'no codec here' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))  # edgekit.interpreter reads it per call
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(StoreError, match=r"decode process exited \(code 3\): no codec here"):
        Engine(store, EngineSettings(memory_budget=0))
    assert set(os.listdir("/proc/self/fd")) <= before  # arena, pipes and log all closed


def test_closing_with_reads_in_flight_stops_the_process_at_once(store):
    layer = store.config.moe_layers[-1]
    stored = sum(e.stored_bytes for x in range(6) for e in store.expert_entries(layer, x))
    settings = EngineSettings(memory_budget=0, bandwidth_bytes_s=stored / 1.5,
                              bandwidth_source="test", full_ratio=0.5)  # no calibration
    engine = Engine(store, settings)
    experts = engine.experts
    experts.fetch(layer, {e: 1 for e in range(6)})  # submitted: 1.5 s of reads, none awaited
    process = experts.decoder.process._proc
    t0 = time.monotonic()
    engine.close()
    assert process.poll() is not None and time.monotonic() - t0 < 0.4


def _in_arena(decoder, tensor) -> bool:
    base = decoder._bytes.data_ptr()
    return base <= tensor.data_ptr() < base + decoder.arena_bytes


def test_dropped_experts_are_lent_in_their_slot_and_kept_ones_are_copied(store):
    """An expert the pools drop after use is handed out in the arena (no copy) and its slot
    comes back when the next one is asked for; one the full pool keeps is a copy, so a reused
    slot cannot change it."""
    layer = store.config.moe_layers[0]
    tokens = {0: 1, 1: 1, 2: 1}
    with Engine(store, EngineSettings(memory_budget=0)) as engine:
        experts, decoder = engine.experts, engine.experts.decoder.process
        for _expert, weights in experts.fetch(layer, tokens):
            assert all(_in_arena(decoder, t) for t in weights)
            assert len(experts.decoder._free_slots) < decoder.slots
        assert len(experts.decoder._free_slots) == decoder.slots
    budget = parse_size("100%", store.total_expert_bytes)
    with Engine(store, EngineSettings(memory_budget=budget, full_ratio=1.0)) as engine:
        experts, decoder = engine.experts, engine.experts.decoder.process
        got = _copies(experts.fetch(layer, tokens))
        kept = experts.cache.full[layer]
        assert all(expert in kept for expert in tokens)
        for expert in tokens:
            pooled = kept.peek(expert)
            assert not any(_in_arena(decoder, t) for t in pooled)
        list(experts.fetch(layer + 1, {e: 1 for e in range(store.config.num_experts)}))
        assert _same({e: kept.peek(e) for e in tokens}, got)
    assert _same(got, _reference(store, layer, tokens))


def test_a_late_guess_replaces_the_early_one(store):
    """The late guess keeps what it shares with the early one, adds its own, and cancels the
    early prefetches it leaves out that are still being read."""
    layer = store.config.moe_layers[-1]
    settings = EngineSettings(memory_budget=0, bandwidth_bytes_s=2e6, bandwidth_source="test")
    with Engine(store, settings) as engine:
        experts = engine.experts
        experts.prefetch(layer, {0: 1, 1: 1})  # reads of about 12 ms each at 2 MB/s
        early = dict(experts.prefetched)
        experts.prefetch(layer, {0: 1, 2: 1}, late=True)
        assert set(experts.prefetched) == {(layer, 0), (layer, 2)}
        assert experts.prefetched[layer, 0] is early[layer, 0]  # kept, not read again
        assert early[layer, 1].cancelled and experts.stats.prefetch_wasted == 1
        got = _copies(experts.fetch(layer, {0: 1, 2: 1}))
        assert experts.stats.prefetched == 2
    assert _same(got, _reference(store, layer, {0: 1, 2: 1}))


def test_the_model_guesses_each_next_layer_early_and_late(store):
    """One decode step: an early guess for every MoE layer (the first from the LM head's
    guess of the next token), a late one for every layer but the first; a prompt's guesses
    name every expert its tokens are predicted to use, not only ``top_k``."""
    with Engine(store, EngineSettings(memory_budget=0)) as engine:
        calls = []
        real = engine.experts.prefetch

        def spy(layer, tokens, late=False):
            calls.append((layer, late, len(tokens)))
            real(layer, tokens, late)

        engine.experts.prefetch = spy
        engine.generate("The weather today is", 2)
    layers, k = store.config.moe_layers, store.config.top_k
    prefill = calls[:2 * len(layers) - 1]
    assert max(n for layer, _, n in prefill if layer != layers[0]) > k
    step = calls[-2 * len(layers) + 1:]  # the decode step's guesses
    assert [(layer, late) for layer, late, _ in step] == [
        *[x for nxt in layers[1:] for x in ((nxt, False), (nxt, True))], (layers[0], False)]
    assert all(n == k for _, _, n in step)
