"""The ASTRA runtime: real worker processes over gloo, the link emulation, the latency model.

The distributed tests start real processes (two ranks, the digits-sized model, 16 tokens); each
launch costs a few seconds of interpreter start-up, so all modes share one launch.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgekit.cli import cli
from edgekit.errors import UsageError
from edgekit.methods.astra import GroupedVQ, partitioned_forward
from edgekit.methods.astra.runtime.bitpack import pack, packed_bytes, unpack
from edgekit.methods.astra.runtime.block_parallel import BlockParallelViT
from edgekit.methods.astra.runtime.calibrate import measure_compute
from edgekit.methods.astra.runtime.collectives import (
    all_gather_steps,
    all_reduce_steps,
    all_to_all_steps,
)
from edgekit.methods.astra.runtime.encode import CodeSearch
from edgekit.methods.astra.runtime.group import backend, join, staged
from edgekit.methods.astra.runtime.latency_model import (
    Workload,
    compute_at,
    flops_per_rank,
    messages,
    predict,
)
from edgekit.methods.astra.runtime.launch import RankFailed, free_port, launch
from edgekit.methods.astra.runtime.link import LinkSpec, message_time, parse_bandwidth, wire_bytes
from edgekit.methods.astra.runtime.models import build_model, example_images
from edgekit.methods.astra.runtime.spec import RunSpec

MULTI = ("sp", "tp", "bp-allgather", "bp-sp", "astra")


@pytest.mark.parametrize("text,bps", [("10Mbps", 1e7), ("100 Mbps", 1e8), ("1Gbps", 1e9),
                                      ("2.5gbps", 2.5e9), ("1500kbps", 1.5e6)])
def test_parse_bandwidth(text, bps):
    assert parse_bandwidth(text) == bps


@pytest.mark.parametrize("text", ["500kbps", "200Gbps"])
def test_bandwidth_out_of_range(text):
    with pytest.raises(UsageError, match="outside"):
        parse_bandwidth(text)


@pytest.mark.parametrize("text", ["10", "fast", "10MB", "-5Mbps", ""])
def test_bad_bandwidth_is_a_usage_error(text):
    with pytest.raises(UsageError, match="bad bandwidth"):
        parse_bandwidth(text)


def test_bad_link_values_exit_2_with_one_line():
    runner = CliRunner()
    for args in (["--bandwidth", "10MB"], ["--loss", "0.7"], ["--latency-ms", "-1"],
                 ["--tokens=0"], ["--tokens=-4"], ["--tokens=15"]):
        result = runner.invoke(cli, ["astra", "run", "--mode", "sp", *args])
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1
        assert result.output.startswith("edgekit: error:")


def test_message_time_arithmetic():
    link = LinkSpec(1e7, latency_s=0.002)
    # one full packet: 1460 payload + 40 header bytes = 1500 bytes = 12000 bits = 1.2 ms
    assert message_time(link, 1460) == pytest.approx(1.2e-3 + 2e-3)
    assert wire_bytes(1461) == 1461 + 2 * 40
    assert message_time(LinkSpec(None), 10**9) == 0.0
    lossy = LinkSpec(1e7, latency_s=0.001, loss=0.2, seed=3)
    n = 1460 * 1000
    draws = [message_time(lossy, n, np.random.default_rng([3, r])) for r in range(2)]
    again = [message_time(lossy, n, np.random.default_rng([3, r])) for r in range(2)]
    assert draws == again  # seeded
    clean = n + 1000 * 40
    expected = (clean + 1000 * 0.25 * 1500) * 8 / 1e7 + 0.001  # 1/(1-p) - 1 = 0.25 extra tries
    assert message_time(lossy, n) == pytest.approx(expected)
    for t in draws:  # every extra try costs a 1500-byte packet and rounds cost round trips
        assert t > clean * 8 / 1e7 + 0.001


def test_ring_step_sizes():
    assert all_gather_steps([10, 20, 30], rank=0) == [10, 30]  # forwards ranks 0 and 2's chunks
    assert all_reduce_steps(100, 4) == [25] * 6
    assert all_reduce_steps(100, 1) == []
    assert all_to_all_steps([5, 6, 7], rank=1) == [5, 7]


def test_bitpack_is_the_compressed_size_and_round_trips():
    idx = torch.randint(0, 1024, (3, 5, 16))
    data = pack(idx, 10)
    assert data.dtype == torch.uint8 and data.numel() == packed_bytes(idx.numel(), 10) == 300
    assert torch.equal(unpack(data, idx.numel(), 10).reshape(idx.shape), idx)


def test_code_search_matches_grouped_vq():
    torch.manual_seed(0)
    vq = GroupedVQ(96, 8, 64).eval()
    x = torch.randn(2, 300, 96)
    assert torch.equal(CodeSearch(vq).encode(x), vq.encode(x))


def test_join_without_rendezvous_is_a_usage_error(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UsageError, match="no process group"):
        join(5.0)


@pytest.fixture(scope="module")
def oracle(single_thread):
    model = build_model("digits")
    images = example_images(model, 2)
    with torch.inference_mode():
        single = partitioned_forward(model, images, 1, "single")
        bp = BlockParallelViT(model, 2).reference(model.embed(images))
        one_group = build_model("digits", groups=1)  # keys/values looked up per code
        return {"sp": partitioned_forward(model, images, 2, "sp"), "tp": single,
                "astra": partitioned_forward(model, images, 2, "astra"),
                "astra-g1": partitioned_forward(one_group, images, 2, "astra"),
                "bp-allgather": bp, "bp-sp": bp}, model.config


@pytest.fixture(scope="module")
def distributed(single_thread):
    spec = RunSpec(modes=MULTI, astra_groups=(1,), batch=2, reps=1, warmup=0, bandwidths=("1Gbps",),
                   latency_ms=0.5, loss=0.01, keep_logits=True, timeout_s=30)
    return launch(spec, 2)


@pytest.mark.parametrize("mode", [*MULTI, "astra-g1"])
def test_distributed_mode_equals_its_oracle(distributed, oracle, mode):
    expected, _ = oracle
    got = torch.tensor(distributed["modes"][mode]["logits"])
    torch.testing.assert_close(got, expected[mode], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", MULTI)
def test_bytes_sent_are_the_exchange_pattern(distributed, oracle, mode):
    _, cfg = oracle
    w = Workload(cfg.num_tokens, cfg.dim, cfg.depth, cfg.heads, cfg.mlp_ratio, cfg.groups,
                 cfg.codes, batch=2)
    ranks = distributed["modes"][mode]["cases"][0]["ranks"][0]
    for record in ranks:
        assert record["bytes_sent"] == sum(messages(mode, w, 2, record["rank"]))
        assert record["comm_emulated_s"] > 0.0005 * record["messages"]  # latency per message
    if mode == "astra":  # 16 groups x 10 bits = 20 bytes per token, vs 256 in fp32 (sp)
        per_block = sum(r["bytes_by_op"]["all_gather"] for r in ranks) / cfg.depth
        assert per_block == 2 * cfg.num_tokens * 20


def _failed_launch(mode: str, fault: str, timeout_s: float) -> str:
    """Launch two ranks with ``fault`` injected; the RankFailed message says who failed how."""
    with pytest.raises(RankFailed) as info:
        launch(RunSpec(modes=(mode,), reps=1, fault=fault, timeout_s=timeout_s), 2)
    return str(info.value)


def test_killed_rank_is_named_and_nothing_hangs(single_thread):
    message = _failed_launch("sp", "1:kill", timeout_s=20)
    assert message.startswith("rank 1 was killed by SIGKILL"), message
    assert "\n" not in message


def test_hung_rank_times_out_on_its_peer(single_thread):
    message = _failed_launch("astra", "1:hang", timeout_s=3)
    assert "rank 0: timed out after 3 s waiting for a peer" in message, message
    assert "rank 1: still running, terminated" in message


def test_cli_run_reports_a_crashed_rank_in_one_line(tmp_path, single_thread):
    result = CliRunner().invoke(cli, ["astra", "run", "--mode", "tp", "--fault", "1:crash",
                                      "--timeout", "20", "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("edgekit: error: rank 1: RuntimeError: injected fault: rank 1 "
                           "crashed; rank 0: lost connection to a peer (RuntimeError: "), last
    assert not (tmp_path / "r.json").exists()


def test_latency_model_arithmetic():
    w = Workload(tokens=1024, dim=384, depth=12, heads=6, groups=32, codes=1024)
    # sp at 2 ranks: per block one all-gather step of 512 tokens x 384 x 4 bytes, then the
    # class-token all-reduce (2 steps of 768 bytes)
    assert messages("sp", w, 2) == [512 * 384 * 4] * 12 + [768, 768]
    # astra: 512 tokens x 32 groups x 10 bits = 20480 bytes per block
    assert messages("astra", w, 2)[:12] == [20480] * 12
    link = LinkSpec(1e7)
    p = predict("astra", w, 2, link, compute_s=0.5)
    assert p["comm_s"] == pytest.approx(sum(message_time(link, b)
                                            for b in messages("astra", w, 2)))
    assert p["latency_s"] == pytest.approx(0.5 + p["comm_s"])
    # 6 heads cannot split over 4 ranks: scaled from N=2 by the FLOP ratio
    value, source = compute_at("tp", w, 4, {2: 1.0})
    assert source.startswith("measured at N=2") and value == pytest.approx(
        flops_per_rank("tp", w, 4) / flops_per_rank("tp", w, 2))


def test_loopback_compute_runs_rank_zero_work(single_thread):
    compute = measure_compute("digits", None, {"single": None, "astra": None, "tp": None},
                              (2, 8), reps=1)
    assert set(compute["single"]) == {1} and set(compute["astra"]) == {2, 8}
    assert set(compute["tp"]) == {2}  # 4 heads do not split over 8 ranks
    assert all(t > 0 for per_n in compute.values() for t in per_n.values())


def test_launcher_deadline_ends_a_run_without_collectives(single_thread):
    with pytest.raises(RankFailed, match=r"no result after 5 s \(the launcher's deadline\)"):
        launch(RunSpec(modes=("single",), fault="0:hang"), 1, deadline_s=5)


_OVERLAP_RANK = """
import json, sys, time
import torch
from edgekit.methods.astra.runtime.collectives import Comm
from edgekit.methods.astra.runtime.group import join, leave
from edgekit.methods.astra.runtime.link import LinkSpec

rank, world = join(30.0)
comm = Comm(LinkSpec(bandwidth_bps=1e6), rank, world)  # 12,500 bytes: about 0.1 s on the wire
chunk = torch.full((12_500,), rank + 1, dtype=torch.uint8)
pending = comm.start_all_gather(chunk, [12_500, 12_500])
time.sleep(0.3)  # compute that the wire time can hide behind
early = pending.wait()
overlapped = comm.reset()
late = comm.all_gather(chunk, [12_500, 12_500])
blocking = comm.reset()
print(json.dumps({"rank": rank, "parts": [[int(p[0]), int(p[-1])] for p in early + late],
                  "overlapped": [overlapped.emulated_s, overlapped.slept_s],
                  "blocking": [blocking.emulated_s, blocking.slept_s]}))
leave()
"""


def test_compute_while_a_gather_is_in_flight_hides_its_wire_time(tmp_path):
    """Two real ranks over gloo: a gather started before 0.3 s of work waits none of its 0.1 s
    of emulated wire time; the same gather made blocking waits all of it."""
    script = tmp_path / "rank.py"
    script.write_text(_OVERLAP_RANK)
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "PYTHONPATH": str(Path(__file__).parents[1])}
    procs = [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    wire = wire_bytes(12_500) * 8 / 1e6
    for out in outs:
        assert out["parts"] == [[1, 1], [2, 2], [1, 1], [2, 2]]
        emulated, slept = out["overlapped"]
        assert emulated == pytest.approx(wire) and slept < 0.02
        emulated, slept = out["blocking"]
        assert emulated == pytest.approx(wire) and slept == pytest.approx(wire, abs=0.005)


@pytest.mark.parametrize("device, gpus, expected", [
    ("cpu", 0, ("gloo", False)), ("cpu", 2, ("gloo", False)),
    ("cuda", 1, ("gloo", True)),  # two ranks share one GPU: gloo, through host memory
    ("cuda", 2, ("nccl", False)),
])
def test_process_group_backend_follows_the_gpus_per_rank(monkeypatch, device, gpus, expected):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert (backend(device, 2), staged(device, 2)) == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_ranks_without_a_gpu_are_refused_before_any_rank_starts(tmp_path):
    result = CliRunner().invoke(cli, ["astra", "run", "--device", "cuda",
                                      "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith(
        "edgekit: error: --device cuda: torch sees no CUDA device"), result.output
    assert not (tmp_path / "r.json").exists()
