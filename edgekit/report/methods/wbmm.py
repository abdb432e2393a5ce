"""WBMM against its depthwise twin (``wbmm-dw13``: a 13x13 depthwise conv in every WBMM's place),
both trained alike, on latency at equal accuracy (arXiv 2607.02097: WBMM with 14x14 windows is
faster than 5x5 depthwise convolution while seeing 7.8x the area)."""
from __future__ import annotations

from edgekit.report.blocks import Result, Table, fmt
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

ACCURACY_SLACK = 0.01  # "equal accuracy": within one point of the twin


def judge(results: list[Result]) -> Verdict:
    found = find_row(results, "wbmm"), find_row(results, "wbmm-dw13")
    if None in found:
        return missing("compare rows for both wbmm and its depthwise twin wbmm-dw13")
    (w, doc), (d, _) = found
    faster = w["latency_p50_ms"] < d["latency_p50_ms"]
    equal = w["accuracy"] >= d["accuracy"] - ACCURACY_SLACK
    why = (f"WBMM {w['latency_p50_ms']:.4g} ms against the depthwise twin's "
           f"{d['latency_p50_ms']:.4g} ms per inference "
           f"({ratio(w['latency_p50_ms'], d['latency_p50_ms'])}, "
           f"{doc['backend']}, measured), accuracy {w['accuracy']:.2%} against "
           f"{d['accuracy']:.2%} on {w['dataset']}.")
    if not equal:
        why += " The accuracy falls more than one point short."
    hover = "{0}: {1}"
    figure = bars("method-wbmm", "WBMM against a 13x13 depthwise convolution (bars start at 0)", [
        ("median latency (ms)", "ms", [(n, r["latency_p50_ms"], hover.format(n, "measured"))
                                       for n, r in (("wbmm", w), ("wbmm-dw13", d))]),
        ("accuracy (%)", "%", [(n, r["accuracy"] * 100, hover.format(n, "test split"))
                               for n, r in (("wbmm", w), ("wbmm-dw13", d))]),
        ("parameters (k)", "k", [(n, r["params"] / 1e3, hover.format(n, "counted"))
                                 for n, r in (("wbmm", w), ("wbmm-dw13", d))])])
    table = Table(["model", "accuracy", "p50 ms", "params", "MFLOPs"],
                  [[n, fmt(r["accuracy"], ".2f", 100, "%"), fmt(r["latency_p50_ms"], ".4f"),
                    f"{r['params']:,}", fmt(r["flops_per_sample"], ".3f", 1e-6)]
                   for n, r in (("wbmm", w), ("wbmm-dw13", d))])
    return Verdict(MET if faster and equal else NOT_MET, why, [figure, table])


STORY = Story("wbmm", "WBMM: windowed batch matrix multiplication",
              "a window of WBMM is faster than the depthwise convolution it stands for, at the "
              "same accuracy (paper: 14x14 windows beat 5x5 depthwise conv with 7.8x the "
              "receptive field).", judge)
