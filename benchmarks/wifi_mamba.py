"""WiFi-Mamba against the PETR-style baseline: forward latency against sequence length, on torch
eager and on ONNX Runtime.

The selective scan is linear in the number of packets L; self-attention over packet tokens is
quadratic. Both CPU-sized models (eval mode, batch 1, one thread by default) run at L = 20 ...
2000 packets, each model exported to ONNX at each length through edgekit's exporter path
(``export_graph``: torch.onnx, onnxslim, onnx.checker; ONNX Runtime's outputs checked against
torch's). WiFi-Mamba runs as it deploys: in eager torch its scan is the compiled kernel
(``edgekit.kernels.wifi_mamba_scan``), on ONNX Runtime the exported graph, whose recurrence is one
ONNX ``Scan`` operator (``onnx_scan.py``). Extra rows: the same model on torch with the
tensor-operation scan (``tensor ops``), on ONNX Runtime the graph exported before the ``Scan``
(``unrolled``: the plain loop up to 150 packets, chunked beyond; its time over the model's in
the last column), the same recurrence scanned one packet at a time at every length
(``ssm.step_scan``, unrolled in the export too), and the scan it had before (one packet at
a time, inputs coupled through a dense projection of the other stream's previous output; zero
coupling weights here, the same operations). The per-packet loops unroll into graphs of tens of
nodes per packet, so they go to ONNX Runtime only up to ``--loop-ort-max`` packets.

Every case is set up first. Each round visits every (backend, length) group once, the groups in
an order that rotates between rounds, and within a group alternates the models call by call, so
the models compared at one length see the same phase of the shared host (whose speed drifts by
tens of percent over seconds) and a burst of load spoils one round of every case rather than
every round of one case. Tables quote the median over rounds of each round's median latency
(spread: lowest and highest round) and, for the ratio of the two models, the median of the
per-round ratios with their range; the scaling exponent is the slope of log latency on log L,
fitted by least squares over all lengths and over L >= 200 (where fixed per-call costs no longer
dominate). Last, the plain loop's own cost on ONNX Runtime: ``ssm.step_scan`` on given terms
(split into packets, the coupled steps, the states put back together) per packet, from frames
of 100 and 400 packets, times blocks x L, beside both models' latency.

    python benchmarks/wifi_mamba.py [--rounds R] [--reps N] [--threads T] [--quick]
"""
from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from common import alternating_rounds, markdown_table, median, write_result
from torch import nn

from edgekit.backends.onnxruntime_backend import make_session
from edgekit.exporters.onnx import export_graph
from edgekit.methods.wifi_mamba import ssm
from edgekit.registry import create_model

LENGTHS = [20, 50, 100, 200, 500, 1000, 2000]
QUICK_LENGTHS = [20, 100, 500]
MAMBA, OPS, UNROLLED, STEP, OLD, PETR = (
    "wifi-mamba", "wifi-mamba tensor ops", "wifi-mamba unrolled", "wifi-mamba step loop",
    "wifi-mamba old loop", "wifi-petr")
ROWS = [MAMBA, OPS, UNROLLED, STEP, OLD, PETR]
TORCH_ONLY = {OPS}  # on ONNX Runtime the same graph as MAMBA: exports never take the kernel
ORT_ONLY = {UNROLLED}  # on torch the same operations as OPS
BACKENDS = ["torch", "onnxruntime"]


def old_loop_scan(a, p, ssm_a, ssm_p, k_a, k_p, h_a, h_p):
    """The scan before the chunked one (git 607c918, ``ssm.dual_selective_scan``), verbatim."""
    u_a, _, dt_a, b_a, c_a = a
    u_p, _, dt_p, b_p, c_p = p
    decay_a = torch.exp(dt_a.unsqueeze(-1) * ssm_a.A())  # (B, L, E, N)
    decay_p = torch.exp(dt_p.unsqueeze(-1) * ssm_p.A())
    y_a_prev = torch.zeros_like(u_a[:, 0])  # (B, E)
    y_p_prev = torch.zeros_like(u_p[:, 0])
    ys_a, ys_p = [], []
    for t in range(u_a.shape[1]):
        x_a = u_a[:, t] + k_a(y_p_prev)  # (B, E): coupling from the other stream's output
        x_p = u_p[:, t] + k_p(y_a_prev)
        h_a = decay_a[:, t] * h_a + (dt_a[:, t] * x_a).unsqueeze(-1) * b_a[:, t].unsqueeze(1)
        h_p = decay_p[:, t] * h_p + (dt_p[:, t] * x_p).unsqueeze(-1) * b_p[:, t].unsqueeze(1)
        y_a_prev = (h_a * c_a[:, t].unsqueeze(1)).sum(-1) + ssm_a.D * x_a  # (B, E)
        y_p_prev = (h_p * c_p[:, t].unsqueeze(1)).sum(-1) + ssm_p.D * x_p
        ys_a.append(y_a_prev)
        ys_p.append(y_p_prev)
    return torch.stack(ys_a, 1), torch.stack(ys_p, 1), h_a, h_p


class OldLoopBlock(nn.Module):
    """A ``DualSSMBlock`` run as before (memoryless frame): the old scan with zero E x E
    couplings, which cost what trained ones do."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        e = block.ssm_a.d_inner
        self.k_a, self.k_p = nn.Linear(e, e, bias=False), nn.Linear(e, e, bias=False)
        nn.init.zeros_(self.k_a.weight)
        nn.init.zeros_(self.k_p.weight)

    def forward(self, xa, xp, h):
        b = self.block
        pa, pp = b.ssm_a.prepare(b.norm_a(xa)), b.ssm_p.prepare(b.norm_p(xp))
        h0 = pa[0].new_zeros(xa.shape[0], b.ssm_a.d_inner, b.ssm_a.d_state)
        y_a, y_p, h_a, h_p = old_loop_scan(pa, pp, b.ssm_a, b.ssm_p, self.k_a, self.k_p, h0, h0)
        return (xa + b.ssm_a.out_proj(y_a * F.silu(pa[1])),
                xp + b.ssm_p.out_proj(y_p * F.silu(pp[1])), torch.stack([h_a, h_p], 1))


def build_models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    mamba = create_model(MAMBA).eval()
    ops, unrolled, step = (copy.deepcopy(mamba) for _ in range(3))
    for block in ops.blocks:
        block.fused = False  # torch runs the tensor-operation scan
    for block in unrolled.blocks:
        block.onnx_scan = False  # exported as before the Scan operator: plain loop or chunks
    for block in step.blocks:  # one chunk: the plain loop, unrolled in the export too
        block.chunk, block.fused, block.onnx_scan = max(LENGTHS), False, False
    old = copy.deepcopy(mamba)
    old.blocks = nn.ModuleList(OldLoopBlock(b) for b in old.blocks)
    return {MAMBA: mamba, OPS: ops, UNROLLED: unrolled, STEP: step, OLD: old,
            PETR: create_model(PETR).eval()}


def exponent(lengths: list[int], ms: list[float], min_len: int = 0) -> float:
    pts = [(length, m) for length, m in zip(lengths, ms, strict=True) if length >= min_len]
    slope, _ = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)
    return float(slope)


def export_case(model: nn.Module, x: torch.Tensor, path: Path) -> dict:
    """Export through edgekit's path, open a 1-thread session, check it against torch."""
    t0 = time.perf_counter()
    export_graph(model, (x,), path, opset=18, input_names=["input"],
                 output_names=["poses", "logits"], dynamo=False)
    seconds = time.perf_counter() - t0
    session = make_session(path, threads=1)
    out = session.run(None, {"input": x.numpy()})
    with torch.inference_mode():
        ref = model(x)
    err = max(float(np.abs(o - r.numpy()).max()) for o, r in zip(out, ref, strict=True))
    if err > 1e-3:
        raise SystemExit(f"ONNX Runtime disagrees with torch on {path.name}: max abs {err:.2e}")
    return {"session": session, "export_s": round(seconds, 1), "max_abs_vs_torch": err,
            "nodes": len(onnx.load(str(path)).graph.node)}


class PlainLoop(nn.Module):
    """``ssm.step_scan`` on given terms: the plain loop's own work on a frame (splitting the
    terms into packets, the coupled steps, the states put back together), none of the model's."""

    def forward(self, decay, share, drive, h):
        return ssm.step_scan(decay, share, drive, h)[0]


def step_floor_us(tmp: Path, rounds: int, state: tuple[int, int] = (16, 64)) -> dict:
    """ONNX Runtime's time per packet of the plain loop alone, from frames of 100 and 400
    packets (their difference over 300), median of ``rounds`` rounds of 20 calls each."""
    sessions, feeds, nodes = {}, {}, {}
    for packets in (100, 400):
        args = (torch.rand(1, packets, 2, *state), torch.rand(2, *state) * 0.5 - 0.25,
                torch.rand(1, packets, 2, *state), torch.rand(1, 2, *state))
        path = tmp / f"loop-{packets}.onnx"
        export_graph(PlainLoop(), args, path, opset=18, input_names=["d", "s", "v", "h"],
                     output_names=["states"], dynamo=False)
        sessions[packets] = make_session(path, threads=1)
        feeds[packets] = {name: a.numpy() for name, a in zip("dsvh", args, strict=True)}
        nodes[packets] = len(onnx.load(str(path)).graph.node)
    per_round = []
    for _ in range(rounds):
        ms = {}
        for packets, session in sessions.items():
            calls = []
            for _ in range(20):
                t0 = time.perf_counter()
                session.run(None, feeds[packets])
                calls.append(time.perf_counter() - t0)
            ms[packets] = median(calls)
        per_round.append((ms[400] - ms[100]) / 300 * 1e6)
    return {"us_per_packet": median(per_round), "rounds_us": per_round,
            "nodes_per_packet": (nodes[400] - nodes[100]) / 300}


def speed_verdicts(backend: str, ratios: dict[tuple[str, int], list[float]]) -> list[dict]:
    """Issue 19's speed target on one backend: WiFi-Mamba at least as fast as the baseline at
    every length, judged on the medians of the per-round ratios and on every single round."""
    mine = [v for (b, _), v in ratios.items() if b == backend]
    lowest_median = min(median(v) for v in mine)
    lowest_round = min(min(v) for v in mine)
    target = f"{backend}: wifi-mamba at least as fast as wifi-petr at every length"
    return [{"target": f"{target} (median of rounds)", "value": round(lowest_median, 3),
             "met": lowest_median >= 1},
            {"target": f"{target} (every round)", "value": round(lowest_round, 3),
             "met": lowest_round >= 1}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3, help="calls per case per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--loop-ort-max", type=int, default=100,
                        help="longest sequence the per-packet loops are exported at")
    parser.add_argument("--quick", action="store_true", help=f"lengths {QUICK_LENGTHS}")
    args = parser.parse_args()
    if args.rounds < 1 or args.reps < 1 or args.threads < 1:
        parser.error("--rounds, --reps and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    started = time.perf_counter()
    models = build_models()
    inputs = {length: torch.randn(1, 2, 270, length) for length in lengths}
    cases = [(n, "torch", length) for n in ROWS if n not in ORT_ONLY for length in lengths]
    exports: dict[tuple[str, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in ROWS:
            for length in lengths:
                if n in TORCH_ONLY or (n in (STEP, OLD) and length > args.loop_ort_max):
                    continue
                print(f"exporting {n} at L={length}", flush=True)
                path = Path(tmp) / f"{n.replace(' ', '-')}-{length}.onnx"
                exports[(n, length)] = export_case(models[n], inputs[length], path)
                cases.append((n, "onnxruntime", length))
        floor = step_floor_us(Path(tmp), args.rounds)

    def call(case):
        name, backend, length = case
        if backend == "torch":
            models[name](inputs[length])
        else:
            exports[(name, length)]["session"].run(None, {"input": inputs[length].numpy()})

    groups = [{c: (lambda c=c: call(c)) for c in cases if c[1:] == (backend, length)}
              for backend in BACKENDS for length in lengths]
    seconds, loads = alternating_rounds(groups, args.rounds, args.reps)
    times = {c: [s * 1e3 for s in v] for c, v in seconds.items()}
    ms = {c: median(v) for c, v in times.items()}
    def per_round(num: str, den: str, backend: str, length: int) -> list[float]:
        return [a / b for a, b in zip(times[(num, backend, length)], times[(den, backend, length)],
                                      strict=True)]

    ratios = {(backend, length): per_round(PETR, MAMBA, backend, length)
              for backend in BACKENDS for length in lengths}
    scan_gain = {length: per_round(UNROLLED, MAMBA, "onnxruntime", length) for length in lengths}

    def cell(case):
        if case not in ms:
            return "-"
        return f"{ms[case]:.2f} ({min(times[case]):.2f}-{max(times[case]):.2f})"

    def spread(values: list[float]) -> str:
        return f"{median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    tables, fits = {}, {}
    for backend in BACKENDS:
        shown = [n for n in ROWS if any((n, backend, length) in ms for length in lengths)]
        ort = backend == "onnxruntime"
        rows = [[length] + [cell((n, backend, length)) for n in shown]
                + [spread(ratios[(backend, length)])] + ([spread(scan_gain[length])] if ort else [])
                for length in lengths]
        tables[backend] = markdown_table(
            ["packets L"] + [f"{n} ms" for n in shown] + ["petr / mamba (rounds)"]
            + (["unrolled / mamba (rounds)"] if ort else []), rows)
        fits[backend] = {}
        for n in ROWS:
            have = [length for length in lengths if (n, backend, length) in ms]
            if len(have) >= 2:
                fits[backend][n] = {
                    "all": exponent(have, [ms[(n, backend, length)] for length in have]),
                    **({"L>=200": exponent(have, [ms[(n, backend, length)] for length in have],
                                           200)}
                       if sum(length >= 200 for length in have) >= 2 else {})}
    params = {n: sum(p.numel() for p in models[n].parameters()) for n in (MAMBA, PETR)}
    fit_rows = [[n, backend, f"{params[n]:,}" if n in params else "as wifi-mamba",
                 f"{f['all']:.2f}", f"{f['L>=200']:.2f}" if "L>=200" in f else "-"]
                for backend in BACKENDS for n, f in fits[backend].items()]
    fit_table = markdown_table(["model", "backend", "params", "exponent (all L)",
                                "exponent (L >= 200)"], fit_rows)
    for backend in BACKENDS:
        print(f"\n{backend} (ms: median of rounds, lowest-highest round)\n{tables[backend]}")
    print()
    print(fit_table)
    blocks = len(models[MAMBA].blocks)
    floor_rows = [[length, f"{blocks * length * floor['us_per_packet'] / 1e3:.2f}",
                   f"{ms[(PETR, 'onnxruntime', length)]:.2f}",
                   f"{ms[(MAMBA, 'onnxruntime', length)]:.2f}"] for length in lengths]
    floor_table = markdown_table(["packets L", f"{blocks} blocks x L packets of the loop ms",
                                  "wifi-petr ms", "wifi-mamba ms"], floor_rows)
    print(f"\nONNX Runtime, the plain loop alone ({floor['nodes_per_packet']:.0f} nodes a packet): "
          f"{floor['us_per_packet']:.2f} us a packet (rounds {min(floor['rounds_us']):.2f}-"
          f"{max(floor['rounds_us']):.2f})\n{floor_table}")
    verdicts = [verdict for backend in BACKENDS for verdict in speed_verdicts(backend, ratios)]
    for v in verdicts:
        print(f"{'met' if v['met'] else 'NOT met'}: {v['target']} (lowest {v['value']:.2f})")
    write_result("wifi_mamba", {
        "verdicts": verdicts,
        "step_floor": floor,
        "settings": {**vars(args), "lengths": lengths, "batch": 1,
                     "backends": ["torch eager", "onnxruntime CPUExecutionProvider"],
                     "cpu_count": os.cpu_count()},
        "machine_load": {"loadavg_1min_at_round_start": loads, "loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "latency_ms": {backend: {n: {str(length): ms[(n, backend, length)]
                                     for length in lengths if (n, backend, length) in ms}
                                 for n in ROWS} for backend in BACKENDS},
        "petr_over_mamba": {backend: {str(length): {"median": median(ratios[(backend, length)]),
                                                    "rounds": ratios[(backend, length)]}
                                      for length in lengths} for backend in BACKENDS},
        "onnxruntime_unrolled_over_scan": {str(length): {"median": median(v), "rounds": v}
                                           for length, v in scan_gain.items()},
        "round_ms": {backend: {n: {str(length): times[(n, backend, length)]
                                   for length in lengths if (n, backend, length) in times}
                               for n in ROWS} for backend in BACKENDS},
        "onnx": {n: {str(length): {k: v for k, v in exports[(n, length)].items()
                                   if k != "session"}
                     for length in lengths if (n, length) in exports} for n in ROWS},
        "exponents": fits, "params": params,
        "tables": {**{f"latency_{b}": tables[b] for b in BACKENDS}, "fits": fit_table,
                   "step_floor": floor_table},
    })


if __name__ == "__main__":
    main()
