"""``edgekit simulate``: per-layer firing rates and synaptic operations of a spiking net, and its
energy under each cost table (45 nm MAC/AC energies, a neuromorphic chip's per-event costs)
beside the profiler's energy for the same inference on a device."""
from __future__ import annotations

from html import escape
from typing import Any

from edgekit.report.blocks import (
    Block,
    Figure,
    Note,
    Result,
    SectionKind,
    Table,
    fmt,
    number,
    shown_path,
)
from edgekit.schema import ANY_OBJECT, NUMBER, STR, ListOf, MapOf, Object, Optional

LAYER = Object({"name": STR, "type": STR, "macs": NUMBER, "acs": NUMBER, "sops": NUMBER,
                "firing_rate": Optional(NUMBER), "spikes": Optional(NUMBER)})
ENERGY = Object({"model": STR, "energy_j": Optional(NUMBER), "components_j": MapOf(NUMBER),
                 "cost_table": STR, "formula": STR})
SCHEMA = Object({"model": STR, "T": NUMBER, "samples": NUMBER, "inputs": STR,
                 "accuracy": NUMBER, "layers": ListOf(LAYER), "totals": ANY_OBJECT,
                 "energy": ListOf(ENERGY), "device_energy": Optional(ANY_OBJECT),
                 "source": ANY_OBJECT})


def _active(layer: dict[str, Any]) -> bool:
    return bool(layer["macs"] or layer["acs"] or layer["sops"] or "firing_rate" in layer)


def _layer_figure(doc: dict[str, Any], name: str) -> Figure:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    layers = [r for r in doc["layers"] if _active(r)]
    names = [r["name"] for r in layers]
    hover = [f"<b>{escape(r['name'])}</b> ({escape(r['type'])})<br>firing rate "
             f"{fmt(r.get('firing_rate'), '.2f', 100, '%')}<br>"
             f"spikes {fmt(r.get('spikes'), ',.0f')}"
             f"<br>MACs {fmt(r['macs'], ',.0f')}<br>ACs {fmt(r['acs'], ',.0f')}"
             f"<br>SOPs {fmt(r['sops'], ',.0f')}<br>(counted on {doc['samples']} samples of "
             f"{doc['inputs']}, T={doc['T']})" for r in layers]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("firing rate per layer (%)",
                                        "operations per inference (log)"))
    fig.add_trace(go.Bar(x=names, y=[(number(r.get("firing_rate")) or 0) * 100 for r in layers],
                         name="firing rate %", hovertext=hover, hoverinfo="text",
                         marker_color="#d62728"), row=1, col=1)
    for key, label, colour in (("sops", "SOPs", "#1f77b4"), ("acs", "ACs", "#2ca02c"),
                               ("macs", "MACs", "#9467bd")):
        fig.add_trace(go.Bar(x=names, y=[r[key] or None for r in layers], name=label,
                             hovertext=hover, hoverinfo="text", marker_color=colour),
                      row=2, col=1)
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_layout(height=620, barmode="group", title=f"{doc['model']}: per layer",
                      margin={"t": 70, "b": 120}, hoverlabel={"align": "left"})
    return Figure(name, fig)


def _energy_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [{"label": e["model"], "table": e["cost_table"], "energy_j": e["energy_j"],
             "how": f"estimated: {e['formula']}",
             "parts": ", ".join(f"{k} {v * 1e6:.3g} µJ" for k, v in e["components_j"].items())}
            for e in doc["energy"]]
    device = doc.get("device_energy")
    if device and number(device.get("energy_j")) is not None:
        rows.append({"label": str(device.get("model", "device")),
                     "table": "profiler, PyTorch eager at batch 1 (compare's rows: its own "
                              "backend, so their mJ differ)",
                     "energy_j": device["energy_j"], "how": str(device.get("source", "?")),
                     "parts": f"p50 {fmt(device.get('latency_p50_ms'), '.3f')} ms"})
    return rows


def _energy_figure(doc: dict[str, Any], name: str) -> Figure:
    import plotly.graph_objects as go

    rows = [r for r in _energy_rows(doc) if number(r["energy_j"]) is not None]
    fig = go.Figure(go.Bar(
        x=[r["energy_j"] * 1e6 for r in rows], y=[r["label"] for r in rows], orientation="h",
        marker_color="#ff7f0e", hoverinfo="text",
        hovertext=[f"<b>{escape(r['label'])}</b><br>{r['energy_j'] * 1e6:.4g} µJ per inference"
                   f"<br>{escape(r['table'])}<br>{escape(r['how'])}<br>{escape(r['parts'])}"
                   for r in rows]))
    fig.update_layout(title="energy per inference under each cost table (µJ, log)",
                      xaxis_type="log", height=120 + 40 * len(rows),
                      margin={"l": 200, "t": 50}, hoverlabel={"align": "left"})
    return Figure(name, fig)


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for i, result in enumerate(results):
        doc = result.doc
        weights = ("trained checkpoint " + shown_path(doc["source"]["checkpoint"])
                   if doc["source"].get("checkpoint") else "untrained weights")
        blocks.append(Note(f"{doc['model']}, T={doc['T']}, {doc['samples']} samples of "
                           f"{doc['inputs']}: accuracy {doc['accuracy'] * 100:.2f}% on these "
                           f"samples ({weights}; {result.path}). The compare table scores the "
                           "whole test split, so its accuracy can differ; its SOPs and 45 nm "
                           "energy are counted on the same first samples as here."))
        blocks.append(_layer_figure(doc, f"simulate-{i}-layers"))
        blocks.append(Table(
            ["layer", "type", "fire %", "spikes", "MACs", "ACs", "SOPs"],
            [[r["name"], r["type"], fmt(r.get("firing_rate"), ".2f", 100),
              fmt(r.get("spikes"), ",.0f"), fmt(r["macs"], ",.0f"), fmt(r["acs"], ",.0f"),
              fmt(r["sops"], ",.0f")] for r in doc["layers"] if _active(r)],
            caption="per inference, mean over the samples"))
        blocks.append(_energy_figure(doc, f"simulate-{i}-energy"))
        blocks.append(Table(["model", "µJ", "cost table", "how", "components"],
                            [[r["label"], fmt(r["energy_j"], ".4g", 1e6), r["table"], r["how"],
                              r["parts"]] for r in _energy_rows(doc)]))
    return blocks


SECTION = SectionKind(key="simulate", title="SSA spiking net in detail: firing rates, SOPs, "
                                                  "energy",
                      schemas={"simulate": SCHEMA}, render=render)
