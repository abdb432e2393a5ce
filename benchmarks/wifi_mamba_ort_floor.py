"""Where WiFi-Mamba's time goes on ONNX Runtime, and what a faster scan in standard ops could buy.

Issue 19 asks WiFi-Mamba to be at least as fast as the PETR baseline from 20 packets up on ONNX
Runtime (CPU provider, one thread), with a graph of standard ONNX operators (the one edgekit
exports, which TensorRT and a Jetson can run too). Two measurements, every case timed in the
same interleaved rounds (``common.run_rounds``: each round visits every case once, the order
rotating, so a burst of load spoils one round of every case):

1. **Scan forms**, the coupled recurrence h_t = ā_t ⊙ h_{t-1} + κ_t ⊙ flip(h_{t-1}) + v_t alone on
   given terms (B = 1, a (2, 16, 64) state): the plain loop the model exported up to 150
   packets before its recurrence became a ``Scan`` (``ssm.step_scan``, about six nodes per
   packet), against a work-efficient pairwise reduction
   (``pairwise_scan`` below, k levels): each level composes the 2x2 transitions of neighbouring
   packets in a few whole-frame operations, so the sequential loop shrinks to L / 2^k steps and
   the graph to a fraction of the nodes, at about twice the arithmetic. It tests the one
   assumption that could make a standard-op scan faster: that the loop's cost is per-node
   overhead. And ONNX's own ``Scan`` operator with the plain loop's step as its body
   (``scan_op_graph``, batch-major, the states as its output): a graph of constant size, no
   frames to split or states to concatenate, a subgraph run per packet instead. (The model's
   own Scan, ``onnx_scan.py``, also scans time-major and reads C · h out in its body.)
2. **Whole model**: the baseline, WiFi-Mamba as exported (its recurrence one ``Scan``), and
   WiFi-Mamba with the recurrence
   replaced by one elementwise product of its terms (the states are then ā ⊙ v: everything else
   in the graph is kept, the decay and drive included; unrolled, one chunk at every length),
   which bounds what any scan in standard ops could reach inside this graph.

    python benchmarks/wifi_mamba_ort_floor.py [--rounds 7] [--levels 3] [--quick]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import onnx
import torch
from common import markdown_table, median, run_rounds, write_result
from torch import nn

from edgekit.backends.onnxruntime_backend import make_session
from edgekit.exporters.onnx import export_graph
from edgekit.methods.wifi_mamba import ssm
from edgekit.registry import create_model

SCAN_LENGTHS = [20, 50, 100, 200, 400]
MODEL_LENGTHS = [20, 50, 100, 200]
STATE = (2, 16, 64)  # streams, N, E
SCAN_OP = "ONNX Scan"


def general_steps(decay, cross, drive, h):
    """The recurrence one packet at a time with a general 2x2 transition (diag ā, off κ)."""
    h, states = h.unsqueeze(1), []
    for d, k, v in zip(decay.split(1, 1), cross.split(1, 1), drive.split(1, 1), strict=True):
        h = d * h + k * h.flip(-3) + v
        states.append(h)
    return torch.cat(states, 1)


def pairwise_scan(decay, cross, drive, h, levels: int):
    """States (B, L, 2, N, E); L a multiple of 2**levels. Packets 2i and 2i+1 compose into one
    step, M = M_b M_a with M = diag(ā) + diag(κ) flip, v = M_b v_a + v_b; the odd states come out
    of the shorter scan and the even ones follow from them in one whole-frame pass."""
    if levels == 0:
        return general_steps(decay, cross, drive, h)
    (da, db), (ka, kb), (va, vb) = (t.unflatten(1, (-1, 2)).unbind(2)
                                    for t in (decay, cross, drive))
    odd = pairwise_scan(db * da + kb * ka.flip(-3), db * ka + kb * da.flip(-3),
                        db * va + kb * va.flip(-3) + vb, h, levels - 1)
    before = torch.cat([h.unsqueeze(1), odd[:, :-1]], 1)
    even = da * before + ka * before.flip(-3) + va
    return torch.stack([even, odd], 2).flatten(1, 2)


def scan_op_graph(length: int) -> onnx.ModelProto:
    """ONNX ``Scan`` over the packet axis with ``ssm.step_scan``'s step as its body: inputs d, s,
    v, h as ``PlainLoop`` takes them, output the states (1, L, 2, N, E)."""
    from onnx import TensorProto, helper

    one = [1, *STATE]
    consts = [helper.make_tensor(name, TensorProto.INT64, [1], [value]) for name, value in
              (("start", -1), ("end", -2**62), ("axis", 1), ("step", -1))]
    body = helper.make_graph(
        [helper.make_node("Slice", ["h", "start", "end", "axis", "step"], ["flipped"]),
         helper.make_node("Mul", ["s", "flipped"], ["g"]),  # s: the outer graph's input
         helper.make_node("Add", ["g", "v_t"], ["g_plus_v"]),
         helper.make_node("Sub", ["h", "g"], ["h_minus_g"]),
         helper.make_node("Mul", ["d_t", "h_minus_g"], ["decayed"]),
         helper.make_node("Add", ["decayed", "g_plus_v"], ["next"]),
         helper.make_node("Identity", ["next"], ["state"])],
        "step", [helper.make_tensor_value_info(n, TensorProto.FLOAT, one)
                 for n in ("h", "d_t", "v_t")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, one) for n in ("next", "state")],
        initializer=consts)
    graph = helper.make_graph(
        [helper.make_node("Scan", ["h", "d", "v"], ["last", "states"], body=body,
                          num_scan_inputs=2, scan_input_axes=[1, 1], scan_output_axes=[1])],
        "scan_op", [helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, length, *STATE]),
                    helper.make_tensor_value_info("s", TensorProto.FLOAT, list(STATE)),
                    helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, length, *STATE]),
                    helper.make_tensor_value_info("h", TensorProto.FLOAT, one)],
        [helper.make_tensor_value_info("last", TensorProto.FLOAT, one),
         helper.make_tensor_value_info("states", TensorProto.FLOAT, [1, length, *STATE])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    return model


class PlainLoop(nn.Module):
    def forward(self, decay, share, drive, h):
        return ssm.step_scan(decay, share, drive, h)[0]


class Pairwise(nn.Module):
    def __init__(self, levels: int) -> None:
        super().__init__()
        self.levels = levels

    def forward(self, decay, share, drive, h):
        length, pad = decay.shape[1], -decay.shape[1] % 2 ** self.levels
        cross = ssm.cross(share, decay)
        if pad:  # identity steps: ā = 1, κ = 0, v = 0
            decay = torch.cat([decay, torch.ones_like(decay[:, :pad])], 1)
            cross, drive = (torch.cat([t, torch.zeros_like(t[:, :pad])], 1)
                            for t in (cross, drive))
        return pairwise_scan(decay, cross, drive, h, self.levels)[:, :length]


def stand_in_scan(decay, share, drive, h):
    """One elementwise pass over the terms in place of the recurrence (not a scan)."""
    states = decay * drive
    return states, states[:, -1]


def scan_cases(tmp: Path, levels: int, lengths: list[int]) -> tuple[dict, dict]:
    cases, info = {}, {}
    torch.manual_seed(0)
    for length in lengths:
        args = (torch.rand(1, length, *STATE) * 0.5 + 0.5, torch.rand(*STATE) * 0.5 - 0.25,
                torch.randn(1, length, *STATE), torch.randn(1, *STATE))
        reference = PlainLoop()(*args)
        forms = {"plain loop": PlainLoop(),
                 **{f"pairwise {k}": Pairwise(k) for k in range(1, levels + 1)}}
        for name, module in forms.items():
            err = float((module(*args) - reference).abs().max())
            if err > 1e-4:
                raise SystemExit(f"{name} disagrees with the plain loop at {length}: {err:.2e}")
            path = tmp / f"scan-{name.replace(' ', '-')}-{length}.onnx"
            export_graph(module, args, path, opset=18, input_names=["d", "s", "v", "h"],
                         output_names=["states"], dynamo=False)
            session = make_session(path, threads=1)
            given = dict(zip("dsvh", (a.numpy() for a in args), strict=True))
            feed = {i.name: given[i.name] for i in session.get_inputs()}
            cases[("scan", name, length)] = lambda s=session, f=feed: s.run(None, f)
            info[("scan", name, length)] = {"nodes": len(onnx.load(str(path)).graph.node),
                                            "max_abs_vs_plain_loop": err}
        path, graph = tmp / f"scan-op-{length}.onnx", scan_op_graph(length)
        onnx.save(graph, path)
        (body,) = (a.g for a in graph.graph.node[0].attribute if a.name == "body")
        session = make_session(path, threads=1)
        feed = dict(zip("dsvh", (a.numpy() for a in args), strict=True))
        err = float(abs(session.run(None, feed)[1] - reference.numpy()).max())
        if err > 1e-4:
            raise SystemExit(f"the Scan operator disagrees with the plain loop at {length}: "
                             f"{err:.2e}")
        cases[("scan", SCAN_OP, length)] = lambda s=session, f=feed: s.run(None, f)
        info[("scan", SCAN_OP, length)] = {"nodes": 1 + len(body.node),
                                              "max_abs_vs_plain_loop": err}
    return cases, info


def model_cases(tmp: Path, lengths: list[int]) -> tuple[dict, dict]:
    cases, info = {}, {}
    original = ssm.step_scan
    for length in lengths:
        torch.manual_seed(0)
        x = torch.randn(1, 2, 270, length)
        for name, entry, scan in (("wifi-petr", "wifi-petr", None),
                                  ("wifi-mamba", "wifi-mamba", None),
                                  ("wifi-mamba, no recurrence", "wifi-mamba", stand_in_scan)):
            torch.manual_seed(0)
            model = create_model(entry).eval()
            if scan is not None:  # one unrolled chunk at every length: the stand-in is it all
                for block in model.blocks:
                    block.chunk, block.onnx_scan = length, False
            path = tmp / f"model-{len(cases)}.onnx"
            ssm.step_scan = scan or original
            try:
                export_graph(model, (x,), path, opset=18, input_names=["input"],
                             output_names=["poses", "logits"], dynamo=False)
            finally:
                ssm.step_scan = original
            session = make_session(path, threads=1)
            feed = {"input": x.numpy()}
            cases[("model", name, length)] = lambda s=session, f=feed: s.run(None, f)
            info[("model", name, length)] = {"nodes": len(onnx.load(str(path)).graph.node)}
    return cases, info


def summarise(samples: dict, info: dict) -> dict:
    return {"|".join(map(str, key)): {**info[key], "ms_rounds": [s * 1e3 for s in v],
                                      "ms": median(v) * 1e3} for key, v in samples.items()}


def ratio(samples: dict, num, den) -> tuple[float, float, float]:
    per_round = [a / b for a, b in zip(samples[num], samples[den], strict=True)]
    return median(per_round), min(per_round), max(per_round)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--levels", type=int, default=3, help="pairwise levels to try (1..K)")
    parser.add_argument("--quick", action="store_true", help="20 and 100 packets only")
    args = parser.parse_args()
    if args.rounds < 1 or not 1 <= args.levels <= 4:
        parser.error("--rounds must be at least 1 and --levels in 1..4")
    torch.set_num_threads(1)
    scan_lengths = [20, 100] if args.quick else SCAN_LENGTHS
    model_lengths = [20, 100] if args.quick else MODEL_LENGTHS
    with tempfile.TemporaryDirectory() as tmp:
        cases, info = scan_cases(Path(tmp), args.levels, scan_lengths)
        more, more_info = model_cases(Path(tmp), model_lengths)
        cases.update(more)
        info.update(more_info)
        samples, loads = run_rounds(cases, args.rounds, min_time=0.15, min_iters=10)

    def cell(key, base) -> str:
        mid, lo, hi = ratio(samples, base, key)
        return f"{median(samples[key]) * 1e3:.2f} ({info[key]['nodes']} n; x{mid:.2f}, " \
               f"{lo:.2f}-{hi:.2f})"

    forms = ["plain loop", *(f"pairwise {k}" for k in range(1, args.levels + 1)), SCAN_OP]
    scan_rows = [[length, *(cell(("scan", f, length), ("scan", "plain loop", length))
                            for f in forms)] for length in scan_lengths]
    scan_table = markdown_table(["packets L", *(f"{f} ms" for f in forms)], scan_rows)
    names = ["wifi-petr", "wifi-mamba", "wifi-mamba, no recurrence"]
    model_rows = [[length, *(cell(("model", n, length), ("model", "wifi-petr", length))
                             for n in names)] for length in model_lengths]
    model_table = markdown_table(["packets L", *(f"{n} ms" for n in names)], model_rows)
    print("Scan forms on ONNX Runtime (ms; nodes; plain loop / form, median and range of rounds):")
    print(scan_table)
    print("\nWhole model on ONNX Runtime (ms; nodes; wifi-petr / model, median and range):")
    print(model_table)
    write_result("wifi_mamba_ort_floor", {
        "settings": {**vars(args), "state": list(STATE), "threads": 1,
                     "provider": "CPUExecutionProvider"},
        "load_1min_per_round": loads, "cases": summarise(samples, info),
        "scan_table": scan_table, "model_table": model_table,
        "petr_over_mamba": {str(n): ratio(samples, ("model", "wifi-petr", n),
                                          ("model", "wifi-mamba", n)) for n in model_lengths},
        "petr_over_no_recurrence": {
            str(n): ratio(samples, ("model", "wifi-petr", n),
                          ("model", "wifi-mamba, no recurrence", n)) for n in model_lengths},
        "best_pairwise_over_plain": {
            str(n): max(median([p / q for p, q in zip(samples[("scan", "plain loop", n)],
                                                       samples[("scan", f, n)], strict=True)])
                        for f in forms[1:-1]) for n in scan_lengths},
        "scan_op_over_plain": {str(n): ratio(samples, ("scan", "plain loop", n),
                                             ("scan", SCAN_OP, n)) for n in scan_lengths},
    })


if __name__ == "__main__":
    main()
