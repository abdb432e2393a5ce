"""``edgekit moe bench``: ZipMoE against naive offload and all-in-memory, side by side."""
from __future__ import annotations

from typing import Any

from edgekit.report.blocks import Block, Figure, Note, Result, SectionKind, Table, fmt
from edgekit.schema import BOOL, NUMBER, STR, MapOf, Object

MODE = Object({"tokens_per_s": NUMBER, "ttft_ms": NUMBER, "tpot_ms": NUMBER, "bytes_read": NUMBER,
               "experts": Object({"full_hit_rate": NUMBER, "sm_hit_rate": NUMBER,
                                  "miss_rate": NUMBER, "wait_s": NUMBER})})
SCHEMA = Object({"settings": Object({"memory_budget_bytes": NUMBER}),
                 "model": Object({"family": STR, "moe_layers": NUMBER, "experts": NUMBER,
                                  "top_k": NUMBER}),
                 "results": MapOf(MODE), "speedup": MapOf(NUMBER),
                 "logits": Object({"identical": BOOL})})


def _hover(mode: str, r: dict[str, Any]) -> str:
    x = r["experts"]
    return (f"<b>{mode}</b><br>{r['tokens_per_s']:.2f} tokens/s<br>TTFT {r['ttft_ms']:.1f} ms, "
            f"TPOT {r['tpot_ms']:.1f} ms<br>experts: full hit {x['full_hit_rate']:.1%}, "
            f"SM hit {x['sm_hit_rate']:.1%}, miss {x['miss_rate']:.1%}<br>read "
            f"{r['bytes_read'] / 2**20:.2f} MiB, waited {x['wait_s']:.3f} s<br>(measured)")


def _figure(doc: dict[str, Any], name: str) -> Figure:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    modes = list(doc["results"])
    res = doc["results"]
    hover = [_hover(m, res[m]) for m in modes]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("tokens/s", "TTFT (ms)", "TPOT (ms)"))
    for col, key in enumerate(("tokens_per_s", "ttft_ms", "tpot_ms"), start=1):
        fig.add_trace(go.Bar(x=modes, y=[res[m][key] for m in modes], hovertext=hover,
                             hoverinfo="text", showlegend=False,
                             marker_color=["#d62728" if m == "zipmoe" else "#1f77b4"
                                           for m in modes]), row=1, col=col)
    fig.update_layout(height=380, title="ZipMoE modes, same prompts", margin={"t": 80},
                      hoverlabel={"align": "left"})
    return Figure(name, fig)


def _storage(doc: dict[str, Any]) -> str:
    storage = doc["results"].get("zipmoe", {}).get("storage", {})
    return str(storage.get("bandwidth", "?"))


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for i, result in enumerate(results):
        doc = result.doc
        m, s = doc["model"], doc["settings"]
        blocks.append(Note(f"{m['family']}: {m['moe_layers']} MoE layers × {m['experts']} experts "
                           f"top-{m['top_k']}, memory budget "
                           f"{s['memory_budget_bytes'] / 2**20:.2f} MiB; logits bit-identical "
                           f"across modes: {'yes' if doc['logits']['identical'] else 'NO'}; "
                           f"storage {_storage(doc)} "
                           f"({result.path})"))
        blocks.append(_figure(doc, f"moe-{i}"))
        blocks.append(Table(
            ["mode", "tokens/s", "TTFT ms", "TPOT ms", "full hit", "SM hit", "miss", "read MiB",
             "wait s"],
            [[mode, fmt(r["tokens_per_s"], ".2f"), fmt(r["ttft_ms"], ".1f"),
              fmt(r["tpot_ms"], ".1f"), fmt(r["experts"]["full_hit_rate"], ".1f", 100, "%"),
              fmt(r["experts"]["sm_hit_rate"], ".1f", 100, "%"),
              fmt(r["experts"]["miss_rate"], ".1f", 100, "%"), fmt(r["bytes_read"], ".2f",
                                                                    2**-20),
              fmt(r["experts"]["wait_s"], ".3f")] for mode, r in doc["results"].items()],
            caption="speed-ups: " + ", ".join(f"{k.replace('_', ' ')} {v:.2f}×"
                                              for k, v in doc["speedup"].items())))
    return blocks


SECTION = SectionKind(key="zipmoe", title="ZipMoE runs in detail",
                      schemas={"moe/bench": SCHEMA}, render=render)
