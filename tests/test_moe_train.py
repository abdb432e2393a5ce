"""The trained MoE for ZipMoE (train.py) and the engine's time breakdown, on tiny configs."""
from __future__ import annotations

import json
import math

import pytest
import torch

from edgekit.methods.zipmoe import train
from edgekit.methods.zipmoe.compress import compress_checkpoint
from edgekit.methods.zipmoe.config import parse_config
from edgekit.methods.zipmoe.engine import Engine, EngineSettings
from edgekit.methods.zipmoe.hf_checkpoint import Checkpoint
from edgekit.methods.zipmoe.model import KVCache, MoEModel
from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint, tiny_weights

pytestmark = pytest.mark.usefixtures("one_compute_thread")

TEXT = "The array is sorted along the last axis. Returns the indices.\n" * 80
TINY = train.TrainSettings(size="tiny", steps=4, batch=2, seq_len=32, lr=1e-2, warmup=1,
                           eval_windows=1)


def test_training_forward_matches_the_serving_model():
    config = train.trained_config("tiny")
    cfg = parse_config(config)
    weights = {n: t.float() for n, t in tiny_weights(config, seed=3).items()}
    ids = torch.tensor([list(b"np.sort(a, axis=-1) returns a sorted copy")])
    logits, aux, routed = train._forward(weights, cfg, ids)
    held = train._Held(cfg, weights)
    served = MoEModel(cfg, weights, held).forward(ids[0].tolist(), KVCache())
    assert torch.allclose(logits[0], served, atol=1e-4, rtol=1e-4)
    assert len(routed) == cfg.num_layers and routed[0].shape == (ids.shape[1], cfg.top_k)
    assert aux.item() >= 1.0 - 1e-6  # E * sum(share * mean prob) is 1 only when uniform


def test_trained_checkpoint_trains_once_and_is_keyed_by_settings_and_text(tmp_path):
    calls = []
    folder, record = train.trained_checkpoint(TINY, home=tmp_path, text=TEXT,
                                              progress=calls.append)
    assert len(calls) == TINY.steps
    assert {p.name for p in folder.iterdir()} == {"config.json", "model.safetensors",
                                                  "training.json"}
    with Checkpoint(folder) as ckpt:  # an ordinary Hugging Face checkpoint folder
        ckpt.check_complete()
        assert ckpt.get("model.norm.weight").dtype == torch.bfloat16
    assert record["loss_last"] < record["loss_first"] < record["uniform_loss"] + 1.0
    assert math.isfinite(record["held_out_loss"])
    assert sum(sum(row) for row in record["expert_load"].values()) > 0

    again, cached = train.trained_checkpoint(TINY, home=tmp_path, text=TEXT,
                                             progress=calls.append)
    assert again == folder and cached == record and len(calls) == TINY.steps  # no training

    config = train.trained_config("tiny")
    reseeded = train.TrainSettings(**{**TINY.__dict__, "seed": 1})
    keys = {train.cache_key(config, TINY, TEXT), train.cache_key(config, reseeded, TEXT),
            train.cache_key(config, TINY, TEXT + "more"),
            train.cache_key({**config, "hidden_size": 32}, TINY, TEXT)}
    assert len(keys) == 4 and folder.name.endswith(train.cache_key(config, TINY, TEXT))

    (folder / "training.json").write_text("{ damaged")
    repaired, record2 = train.trained_checkpoint(TINY, home=tmp_path, text=TEXT)
    assert repaired == folder and json.loads((folder / "training.json").read_text())["key"]
    assert record2["curve"] == record["curve"]  # deterministic: the same seed, the same run
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_training_settings_are_checked():
    with pytest.raises(Exception, match="steps must be at least 1"):
        train.train(train.trained_config("tiny"), TEXT, train.TrainSettings(size="tiny", steps=0))


@pytest.mark.parametrize("mode,decode_on", [("zipmoe", "io"), ("zipmoe", "compute"),
                                            ("naive", "io")])
def test_breakdown_accounts_for_the_compute_threads_time(tmp_path, mode, decode_on):
    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", "qwen", seed=2)
    store = tmp_path / "store"
    compress_checkpoint(ckpt, store)
    bandwidth = 2e8
    settings = EngineSettings(mode=mode, memory_budget=0, bandwidth_bytes_s=bandwidth,
                              direct=False, workers=0, decode_on=decode_on)
    with Engine(store, settings) as engine:
        engine.generate("np.sort", 4)
        m = engine.metrics()
    b, x = m["breakdown"], m["experts"]
    total = sum(g.total_s for g in engine.generations)
    assert b["total_s"] == pytest.approx(total)
    parts = b["wait_s"] + b["decode_on_compute_s"] + b["rebuild_s"] + b["compute_s"]
    assert parts == pytest.approx(total)
    assert b["reads_at_cap_s"] == pytest.approx(m["bytes_read"] / bandwidth)
    assert 0 <= b["reads_hidden_s"] <= b["reads_at_cap_s"]
    assert 0 < b["cpu_compute_thread_s"] <= total * 1.05 + 0.01
    if mode == "naive":  # reads on the compute thread: nothing hidden, nothing decoded
        assert b["wait_s"] >= 0.9 * b["reads_at_cap_s"] and b["decode_all_threads_s"] == 0
        assert b["cpu_io_thread_s"] == 0
        return
    assert m["provider"]["decode"] == {"io": "on the I/O thread",
                                       "compute": "on the compute thread"}[decode_on]
    if decode_on == "io":  # decoded between the I/O thread's reads, off the compute thread
        assert b["decode_on_compute_s"] == 0 < b["decode_all_threads_s"]
        assert b["cpu_io_thread_s"] >= b["decode_all_threads_s"] * 0.5
    else:
        assert b["decode_on_compute_s"] == b["decode_all_threads_s"] > 0
    assert b["cpu_io_thread_s"] > 0
    assert b["rebuild_s"] > 0
    assert 0 <= x["predictor_precision"] <= 1 and 0 < x["predictor_recall"] <= 1


def test_a_rank_of_guesses_that_is_mostly_wrong_stops_being_prefetched(tmp_path):
    from edgekit.methods.zipmoe.guesses import RANK_WARMUP

    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", "qwen", seed=2)
    compress_checkpoint(ckpt, tmp_path / "store", trace=False)
    with Engine(tmp_path / "store", EngineSettings(memory_budget=0, workers=0)) as engine:
        experts = engine.experts
        for _ in range(RANK_WARMUP):  # rank 0 always right, rank 1 always wrong
            experts.prefetch(1, {0: 1, 1: 1})
            assert set(experts.prefetched) == {(1, 0), (1, 1)}  # still warming up
            dict(experts.fetch(1, {0: 1, 5: 1}))
        experts.prefetch(1, {0: 1, 1: 1})
        assert set(experts.prefetched) == {(1, 0)}
        assert experts.describe()["predictor_precision_by_rank"] == [1.0, 0.0]
        experts.prefetch(1, {0: 3, 1: 2})  # a prompt's guess: the gate is for one token's
        assert set(experts.prefetched) == {(1, 0), (1, 1)}
        x = experts.stats.to_json()
        assert x["predictor_precision"] == x["predictor_recall"] == 0.5


def test_cli_trains_once_then_loads(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from edgekit.cli import cli

    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path))
    runner = CliRunner()
    first = runner.invoke(cli, ["moe", "train", "--size", "tiny", "--steps", "2"])
    assert first.exit_code == 0, first.output
    folder = tmp_path / "zipmoe" / "trained"
    [made] = list(folder.iterdir())
    assert str(made) in first.output and "numpy" in first.output and "held-out" in first.output
    again = runner.invoke(cli, ["moe", "train", "--size", "tiny", "--steps", "2"])
    assert again.exit_code == 0 and again.output == first.output
    bad = runner.invoke(cli, ["moe", "train", "--steps", "0"])
    assert bad.exit_code == 2 and "--steps" in bad.output


def test_each_layer_has_its_own_gate(tmp_path):
    """The same rank proves right for one layer and wrong for another: it keeps being
    prefetched for the first only."""
    from edgekit.methods.zipmoe.guesses import RANK_WARMUP

    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", "qwen", seed=2)
    compress_checkpoint(ckpt, tmp_path / "store", trace=False)
    with Engine(tmp_path / "store", EngineSettings(memory_budget=0, workers=0)) as engine:
        experts = engine.experts
        good, bad = experts.store.config.moe_layers[:2]
        for _ in range(RANK_WARMUP):
            for layer, second in ((good, 1), (bad, 5)):
                experts.prefetch(layer, {0: 1, 1: 1})
                dict(experts.fetch(layer, {0: 1, second: 1}))
        experts.prefetch(good, {0: 1, 1: 1})
        assert set(experts.prefetched) == {(good, 0), (good, 1)}
        experts.prefetch(bad, {0: 1, 1: 1})
        assert set(experts.prefetched) == {(bad, 0)}
        by_layer = experts.describe()["predictor_precision_by_layer_and_rank"]["early"]
        assert by_layer[str(good)] == [1.0, 1.0] and by_layer[str(bad)] == [1.0, 0.0]
        assert experts.describe()["predictor_precision_by_rank"] == [1.0, 0.5]


@pytest.mark.parametrize("decode_on,kept", [("process", {(1, 0), (1, 1)}), ("io", {(1, 0)})])
def test_the_prefetch_gate_is_lower_where_a_wrong_guess_costs_only_reads(tmp_path, decode_on,
                                                                         kept):
    """A rank right 10 times in 16 (62.5 %) keeps being prefetched with the decode process
    (gate 0.5), not with threads (0.75), whose wrong guesses cost the compute thread's CPU."""
    from edgekit.methods.zipmoe.guesses import RANK_WARMUP

    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", "qwen", seed=2)
    compress_checkpoint(ckpt, tmp_path / "store", trace=False)
    settings = EngineSettings(memory_budget=0, workers=0, decode_on=decode_on)
    with Engine(tmp_path / "store", settings) as engine:
        experts = engine.experts
        for i in range(RANK_WARMUP):
            experts.prefetch(1, {0: 1, 1: 1})
            dict(experts.fetch(1, {0: 1, (1 if i % 8 < 5 else 5): 1}))
        experts.prefetch(1, {0: 1, 1: 1})
        assert set(experts.prefetched) == kept
