"""Spik4lite: the authors' Spikingformer baseline with its low-efficiency channels removed
physically, against the same net unpruned, on latency and energy on commodity hardware (the
paper's Jetson Orin Nano; here the machine the tour ran on) at a small accuracy cost."""
from __future__ import annotations

from edgekit.report.blocks import Result, Table, fmt, number
from edgekit.report.methods.story import (
    MET,
    NOT_MET,
    Story,
    Verdict,
    bars,
    find_row,
    missing,
    ratio,
)

DENSE, PRUNED = "spikingformer", "spikingformer-spik4lite"
ACCURACY_SLACK = 0.02  # "a small accuracy cost": at most two points


def judge(results: list[Result]) -> Verdict:
    found = find_row(results, PRUNED), find_row(results, DENSE)
    if None in found:
        return missing(f"compare rows for both {DENSE} and its pruned net {PRUNED}")
    (p, doc), (d, _) = found
    faster = p["latency_p50_ms"] < d["latency_p50_ms"]
    kept = p["accuracy"] >= d["accuracy"] - ACCURACY_SLACK
    energy = (number(p["energy_per_inference_j"]), number(d["energy_per_inference_j"]))
    why = (f"Pruned {p['params']:,} parameters against {d['params']:,}; latency "
           f"{p['latency_p50_ms']:.4g} ms against {d['latency_p50_ms']:.4g} ms "
           f"({ratio(p['latency_p50_ms'], d['latency_p50_ms'])}, {doc['backend']}, measured)")
    if None not in energy:
        why += (f", energy {energy[0] * 1e3:.4g} against {energy[1] * 1e3:.4g} mJ "
                f"({p['energy_source']})")
    why += f"; accuracy {p['accuracy']:.2%} against {d['accuracy']:.2%}."
    if not kept:
        why += " The accuracy cost is above two points."
    rows = ((PRUNED, p), (DENSE, d))
    figure = bars("method-spik4lite", "Spik4lite pruned against unpruned (bars start at 0)", [
        ("median latency (ms)", "ms", [(n, r["latency_p50_ms"], "measured") for n, r in rows]),
        ("M SOPs per inference", "M", [(n, (number(r.get("sops_per_sample")) or 0) / 1e6,
                                        "counted") for n, r in rows]),
        ("accuracy (%)", "%", [(n, r["accuracy"] * 100, "test split") for n, r in rows])])
    table = Table(["model", "accuracy", "params", "M SOPs", "p50 ms", "mJ/inf", "energy source"],
                  [[n, fmt(r["accuracy"], ".2f", 100, "%"), f"{r['params']:,}",
                    fmt(r.get("sops_per_sample"), ".4g", 1e-6), fmt(r["latency_p50_ms"], ".4f"),
                    fmt(r["energy_per_inference_j"], ".4f", 1e3), r["energy_source"]]
                   for n, r in rows])
    return Verdict(MET if faster and kept else NOT_MET, why, [figure, table])


STORY = Story("spik4lite", "Spik4lite: physical channel removal for spiking nets",
              "removing whole low-efficiency channels physically makes a spiking net faster and "
              "cheaper on commodity hardware at a small accuracy cost (paper: Spikingformer on a "
              "Jetson Orin Nano).", judge)
