"""SpikingJelly's neuron forward against edgekit's lean one (``edgekit.spiking.lean_neurons``),
side by side: the registry's spiking nets at batch 1 on one thread, eager PyTorch and ONNX
Runtime (each exported the way ``edgekit export`` does), interleaved rounds.

- "spikingjelly": every neuron pinned to SpikingJelly's own multi-step forward (what edgekit ran
  before; the pin also keeps the export's swap away);
- "lean": what edgekit runs now in eval and exports.

Per net: ONNX nodes, latency (median of per-round medians, min-max), and whether the two give the
same bits: logits of torch and of ONNX Runtime on 64 test images, lean against spikingjelly
(the lean forward is meant to compute exactly SpikingJelly's values). Nets are untrained with
BatchNorm calibrated on 256 training images, so that they fire (latency does not depend on the
weights). Results: ``results/lean_neurons.json``.

    python benchmarks/lean_neurons.py [--rounds 5] [--nets spiking-cnn spikingformer ...]
"""
from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path
from types import MethodType
from typing import Any

import numpy as np
import onnx
import torch
from common import export_as_edgekit, markdown_table, median, run_rounds, write_result

from edgekit.backends import make_session
from edgekit.data import load_dataset
from edgekit.registry import create_model, get_entry
from edgekit.spiking.layers import calibrate_batchnorm, mean_firing_rate, neuron

NETS = ("spiking-cnn", "spikingformer", "spikingresformer")
VARIANTS = ("spikingjelly", "lean")


def pin_spikingjelly(model: torch.nn.Module) -> torch.nn.Module:
    """Every neuron runs SpikingJelly's own forward (an instance method, which the lean swap
    leaves alone)."""
    for m in model.modules():
        if isinstance(m, neuron.BaseNode):
            vars(m)["multi_step_forward"] = MethodType(type(m).multi_step_forward, m)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--nets", nargs="+", default=list(NETS), choices=list(NETS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    workdir = Path(tempfile.mkdtemp(prefix="lean-neurons-"))
    cases, rows = {}, {}
    for name in args.nets:
        data = load_dataset(get_entry(name).task)
        torch.manual_seed(0)
        base = calibrate_batchnorm(create_model(name), [torch.from_numpy(data.x_train[:256])])
        x1, x64 = torch.from_numpy(data.x_test[:1]), torch.from_numpy(data.x_test[:64])
        outputs = {}
        for variant in VARIANTS:
            model = copy.deepcopy(base).eval()
            if variant == "spikingjelly":
                pin_spikingjelly(model)
            path = workdir / f"{name}-{variant}.onnx"
            export_as_edgekit(model, x1, path)
            session = make_session(path, threads=1)
            with torch.no_grad():
                outputs[variant] = (model(x64).numpy(), np.concatenate(
                    [session.run(None, {"x": x64[i:i + 1].numpy()})[0] for i in range(64)]))
            rows[(name, variant)] = {"net": name, "variant": variant,
                                     "onnx_nodes": len(onnx.load(str(path)).graph.node),
                                     "firing_rate": mean_firing_rate(model, x64)}
            cases[(name, variant, "torch")] = lambda m=model, x=x1: m(x)
            feed = {"x": x1.numpy()}
            cases[(name, variant, "onnxruntime")] = lambda s=session, f=feed: s.run(None, f)
        (sj_torch, sj_ort), (lean_torch, lean_ort) = outputs["spikingjelly"], outputs["lean"]
        rows[(name, "lean")].update(
            torch_bits_equal=bool(np.array_equal(sj_torch, lean_torch)),
            ort_bits_equal=bool(np.array_equal(sj_ort, lean_ort)),
            ort_vs_torch_max_abs=float(np.abs(lean_ort - lean_torch).max()))
        print(name, {k: v for k, v in rows[(name, "lean")].items() if k != "net"}, flush=True)
    samples, loads = run_rounds(cases, args.rounds, args.min_time, 5)
    for (name, variant, backend), s in samples.items():
        rows[(name, variant)][f"{backend}_ms"] = median(s) * 1e3
        rows[(name, variant)][f"{backend}_spread_ms"] = [min(s) * 1e3, max(s) * 1e3]
    table: list[list[Any]] = []
    for name in args.nets:
        sj, lean = rows[(name, "spikingjelly")], rows[(name, "lean")]
        for row in (sj, lean):
            table.append([name, row["variant"], row["onnx_nodes"],
                          *(f"{row[f'{b}_ms']:.3f} ({row[f'{b}_spread_ms'][0]:.3f}-"
                            f"{row[f'{b}_spread_ms'][1]:.3f})" for b in ("torch", "onnxruntime"))])
        lean["speedup"] = {b: sj[f"{b}_ms"] / lean[f"{b}_ms"] for b in ("torch", "onnxruntime")}
        table.append([name, "speed-up", f"{sj['onnx_nodes'] / lean['onnx_nodes']:.2f}x fewer",
                      f"{lean['speedup']['torch']:.2f}x", f"{lean['speedup']['onnxruntime']:.2f}x"])
    print(markdown_table(["net", "neurons", "ONNX nodes", "torch ms", "ORT ms"], table))
    write_result("lean_neurons", {"rounds": args.rounds, "load_average_1min": loads,
                                  "rows": list(rows.values())})


if __name__ == "__main__":
    main()
