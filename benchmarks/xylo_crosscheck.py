"""edgekit's Xylo simulation against xylosim, SynSense's bit-accurate one, on a trained
spiking-cnn:xylo and every digits test sample: hidden and readout spikes compared at every step,
and what Xylo's rules do to the float net's spikes and accuracy.

Needs xylosim (``pip install 'edgekit[xylo]'``; benchmarks/xylo_venv.sh builds a venv with it).

    python -m edgekit train spiking-cnn:xylo -o /tmp/xylo.safetensors
    python benchmarks/xylo_crosscheck.py /tmp/xylo.safetensors
"""
from __future__ import annotations

import argparse
import importlib.metadata
import time

import numpy as np
import torch
from common import write_result

from edgekit.checkpoint import load_checkpoint
from edgekit.data import DIGITS
from edgekit.neuromorphic.net_layers import walk
from edgekit.neuromorphic.xylo_sim import (
    compare_on_xylo,
    map_to_xylo,
    run_xylo,
    run_xylosim,
    xylo_events,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a spiking-cnn:xylo checkpoint from edgekit train")
    args = parser.parse_args()
    model, _ = load_checkpoint(args.checkpoint)
    model.eval()
    data = DIGITS.loader()
    x, y = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
    layers = walk(model, x[:1])
    net = map_to_xylo(layers)
    events = xylo_events(model.encode(x))
    start = time.perf_counter()
    mine_h, mine_o = run_xylo(net, events)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    ref_h, ref_o = run_xylosim(net, events)
    xylosim_s = time.perf_counter() - start
    same_pred = int((mine_o.sum(0).argmax(1) == ref_o.sum(0).argmax(1)).sum())
    vs_float = compare_on_xylo(model, layers, x, y)
    body = {
        "checkpoint": args.checkpoint, "samples": len(x), "T": int(events.shape[0]),
        "xylosim": importlib.metadata.version("xylosim"),
        "hidden_entries_equal": int((mine_h == ref_h).sum()), "hidden_entries": int(mine_h.size),
        "readout_entries_equal": int((mine_o == ref_o).sum()),
        "readout_entries": int(mine_o.size),
        "samples_all_spikes_equal": int(((mine_h == ref_h).all((0, 2))
                                         & (mine_o == ref_o).all((0, 2))).sum()),
        "predictions_equal": same_pred,
        "hidden_spikes": int(ref_h.sum()), "readout_spikes": int(ref_o.sum()),
        "seconds": {"edgekit": round(ours_s, 3), "xylosim": round(xylosim_s, 3)},
        "against_float": vs_float.to_json(),
    }
    for key, value in body.items():
        print(f"{key}: {value}")
    write_result("xylo_crosscheck", body)
    if not (np.array_equal(mine_h, ref_h) and np.array_equal(mine_o, ref_o)):
        raise SystemExit("edgekit's Xylo simulation differs from xylosim")


if __name__ == "__main__":
    main()
