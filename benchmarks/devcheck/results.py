"""The results written back: the machine measured on, the Markdown summary, atomic writes,
edgekit's provenance."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from devcheck.base import Context, Outcome


def machine(outcomes: list[Outcome]) -> dict[str, Any]:
    """What the run measured on: the environment step's record and the profile edgekit
    detected (empty where those steps did not run)."""
    found = {o.name: o.results for o in outcomes}
    env = dict(found.get("environment", {}).get("environment.json", {}))
    detected = found.get("devices", {}).get("devices.json", {}).get("detected")
    return {**env, **({"detected_profile": detected} if detected else {})}


def summary_markdown(outcomes: list[Outcome], found: dict[str, dict], mode: str) -> str:
    lines = [f"# edgekit device check ({mode})", "", "## Machine", ""]
    described = machine(outcomes)
    lines += [f"- GPU: {'; '.join(described['nvidia_smi'][1:]) or 'none'} "
              f"({described['nvidia_smi'][0] if described['nvidia_smi'] else 'nvidia-smi'})"
              if "nvidia_smi" in described else "- GPU: not recorded"]
    versions = described.get("versions", {})
    lines += [f"- Python {described.get('python', '?')} on {described.get('platform', '?')}, "
              f"{described.get('cpu_count', '?')} CPUs; "
              + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
              f"- device profile detected: {described.get('detected_profile', 'not recorded')}"]
    lines += ["", "## Requirements", "",
              "| requirement | present | detail |", "|---|---|---|"]
    lines += [f"| {n} | {'yes' if r['ok'] else 'no'} | {r.get('detail') or r.get('reason')} |"
              for n, r in found.items()]
    lines += ["", "## Steps", "", "| step | status | seconds | reason / what |",
              "|---|---|---|---|"]
    lines += [f"| {o.name} | {o.status} | {o.seconds:g} | {o.reason or o.what} |"
              for o in outcomes]
    verdicts = [(o.name, v) for o in outcomes for v in o.verdicts]
    if verdicts:
        lines += ["", "## Verdicts", "", "| step | claim | value | met |", "|---|---|---|---|"]
        lines += [f"| {name} | {v.get('claim') or v.get('target')} | "
                  f"{v.get('value', v.get('held_in', ''))} | "
                  f"{_met(v)} |" for name, v in verdicts]
    return "\n".join(lines) + "\n"


def _met(v: dict[str, Any]) -> str:
    if "met" in v:  # None: a measurement with no target
        return "-" if v["met"] is None else "yes" if v["met"] else "no"
    return str(v.get("verdict", "-"))


def write_atomic(path: Path, text: str) -> None:
    """Atomic: a reader (or a run cut off by its limit) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def edgekit_provenance(ctx: Context) -> dict[str, Any]:
    sys.path[:0] = [p for p in (str(ctx.site),) if ctx.site.is_dir()]
    try:
        from edgekit.provenance import provenance
        return provenance()
    except Exception as exc:  # edgekit missing or broken: the run's results still come back
        return {"error": f"edgekit.provenance unavailable: {exc!r}"}
