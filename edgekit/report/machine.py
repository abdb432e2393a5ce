"""The machine the results came from (every report's provenance), the device profile, and the
profiler's runs (``edgekit profile``) with where each figure came from."""
from __future__ import annotations

from typing import Any

from edgekit.report.blocks import Block, Note, Result, SectionKind, Table, fmt, number
from edgekit.schema import ANY_OBJECT, NUMBER, STR, ListOf, MapOf, Object, Optional

PROFILE = Object({"target": STR, "device": Object({"profile": STR, "display_name": STR}),
                  "backend": ANY_OBJECT, "settings": ANY_OBJECT,
                  "latency_ms": Object({"p50": NUMBER, "p99": NUMBER}),
                  "throughput": Object({"samples_per_s": NUMBER}),
                  "memory": ANY_OBJECT, "energy": Object({"source": STR}), "compute": ANY_OBJECT})
DEVICE = Object({"name": STR, "display_name": STR, "kind": STR, "arch": STR,
                 "peak_flops": MapOf(NUMBER), "tdp_w": Optional(NUMBER),
                 "sources": MapOf(STR), "source": STR})
DEVICES = Object({"detected": STR, "profiles": ListOf(DEVICE)})


def machine_blocks(results: list[Result]) -> list[Block]:
    """One row per machine that wrote a result (hostname, system, cores, library versions)."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in results:
        prov = r.doc["provenance"]
        m = prov.get("machine") or {}
        versions = prov.get("versions") or {}
        key = (m.get("hostname"), m.get("machine"), tuple(sorted(versions.items())))
        seen.setdefault(key, {"machine": m, "versions": versions, "files": [],
                              "git": prov.get("git_revision")})["files"].append(r.path)
    rows = [[str(v["machine"].get("hostname", "?")),
             f"{v['machine'].get('system', '?')} {v['machine'].get('machine', '?')}",
             str(v["machine"].get("cpu_count", "?")),
             ", ".join(f"{k} {x}" for k, x in v["versions"].items()),
             str(v["git"] or "–"), str(len(v["files"]))] for v in seen.values()]
    return [Table(["host", "system", "CPUs", "versions", "edgekit commit", "results"], rows,
                  caption="from the provenance every result carries")]


def _device_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for p in doc["profiles"]:
        peaks = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in p["peak_flops"].items())
        mark = " (detected here)" if p["name"] == doc["detected"] else ""
        rows.append([p["name"] + mark, p["display_name"], f"{p['kind']} ({p['arch']})",
                     peaks or "–", fmt(p.get("tdp_w"), ".3g", unit=" W"), p["source"]])
    return rows


def _profile_row(r: Result) -> list[str]:
    d = r.doc
    energy = d["energy"]
    per_inf = number(energy.get("energy_per_inference_j"))
    backend = f"{d['backend'].get('backend', '?')} ({d['backend'].get('device', '?')})"
    share = number(d["compute"].get("share_of_peak"))
    return [d["target"], d["device"]["display_name"], backend,
            f"batch {d['settings'].get('batch', '?')}, {d['settings'].get('threads', '?')} thr",
            fmt(d["latency_ms"]["p50"], ".4g"), fmt(d["latency_ms"]["p99"], ".4g"),
            fmt(d["throughput"]["samples_per_s"], ".0f"),
            "–" if per_inf is None else f"{per_inf * 1e3:.4g}", energy["source"],
            fmt(d["memory"].get("peak_rss_mib"), ".1f"),
            "–" if share is None else f"{share:.1%}"]


def render(results: list[Result]) -> list[Block]:
    blocks: list[Block] = []
    for r in (r for r in results if r.kind == "devices"):
        rows = _device_rows(r.doc)
        detected = [row for row, p in zip(rows, r.doc["profiles"], strict=True)
                    if p["name"] == r.doc["detected"]]
        headers = ["profile", "name", "kind", "peaks", "TDP", "file"]
        blocks.append(Table(headers, detected, caption=f"this machine's profile ({r.path})"))
        blocks.append(Table(headers, rows, folded=f"all {len(rows)} device profiles"))
    profiles = [r for r in results if r.kind == "profile"]
    if profiles:
        blocks.append(Table(["target", "device", "backend", "settings", "p50 ms", "p99 ms",
                             "samples/s", "mJ/inf", "energy source", "peak RSS MiB",
                             "share of peak"], [_profile_row(r) for r in profiles],
                            caption="edgekit profile: latency and memory measured; energy as "
                                    "its source says"))
        notes = dict.fromkeys(r.doc["energy"]["note"] for r in profiles
                              if r.doc["energy"].get("note"))
        blocks.extend(Note(f"energy: {note}") for note in notes)
    return blocks


SECTION = SectionKind(key="device", title="Device profile and profiler runs",
                      schemas={"devices": DEVICES, "profile": PROFILE}, render=render)
