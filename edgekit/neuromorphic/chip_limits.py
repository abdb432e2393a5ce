"""The published limits of neuromorphic chips, from ``profiles/chips/*.toml``.

Each file cites a source for every limit (the vendors' own libraries where they encode the rules:
sinabs for DYNAP-CNN/Speck, Rockpool for Xylo; Intel's brief and Lava for Loihi 2). Validation is
strict, like the device profiles': a typo must not turn a limit into "no limit".
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import edgekit.profiles
from edgekit.errors import ProfileError, UnknownNameError

CHIPS_DIR = Path(edgekit.profiles.__file__).resolve().parent / "chips"

# Every family's limits and their types: a list of ints, an int, or a list of names.
FAMILY_LIMITS: dict[str, dict[str, type]] = {
    "dynapcnn": {"kernel_memory": list, "neuron_memory": list, "bias_memory": list,
                 "weight_bits": int, "state_bits": int, "input_side": int, "neurons": list,
                 "pooling": list},
    "xylo": {"inputs": int, "outputs": int, "hidden_neurons": int, "synapses_per_neuron": int,
             "weight_bits": int, "threshold_bits": int, "neurons": list},
    "loihi2": {"cores": int, "neurons_per_core": int, "neurons": int, "synapses": int,
               "weight_bits": int, "state_bits": int, "neuron_models": list},
}


@dataclass(frozen=True)
class ChipLimits:
    name: str
    display_name: str
    family: str
    limits: dict[str, Any]
    sources: dict[str, str]  # "limits.KEY" -> citation
    path: Path

    def __getitem__(self, key: str) -> Any:
        return self.limits[key]

    def source(self, key: str) -> str:
        return self.sources[f"limits.{key}"]


def _check(path: Path, doc: dict[str, Any]) -> ChipLimits:
    def bad(what: str) -> ProfileError:
        return ProfileError(f"{path}: {what}")

    unknown = set(doc) - {"name", "display_name", "family", "limits", "sources"}
    if unknown:
        raise bad(f"unknown keys {sorted(unknown)}")
    family = doc.get("family")
    if family not in FAMILY_LIMITS:
        raise bad(f"family must be one of {sorted(FAMILY_LIMITS)}, got {family!r}")
    expected = FAMILY_LIMITS[family]
    limits, sources = doc.get("limits", {}), doc.get("sources", {})
    if set(limits) != set(expected):
        raise bad(f"[limits] must hold exactly {sorted(expected)}, got {sorted(limits)}")
    for key, kind in expected.items():
        value = limits[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise bad(f"limits.{key} must be a {kind.__name__}, got {value!r}")
        numbers = [value] if kind is int else [v for v in value if not isinstance(v, str)]
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in numbers):
            raise bad(f"limits.{key} must hold positive integers, got {value!r}")
        if not isinstance(sources.get(f"limits.{key}"), str) or not sources[f"limits.{key}"]:
            raise bad(f"limits.{key} has no source under [sources]")
    if family == "dynapcnn" and not (len(limits["kernel_memory"]) == len(limits["neuron_memory"])
                                     == len(limits["bias_memory"])):
        raise bad("kernel_memory, neuron_memory and bias_memory must list one value per core")
    name = doc.get("name")
    if name != path.stem:
        raise bad(f"name {name!r} must be the file's stem {path.stem!r}")
    return ChipLimits(name, str(doc.get("display_name", name)), family, dict(limits),
                      dict(sources), path)


def read_chip(path: Path) -> ChipLimits:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ProfileError(f"{path}: not a readable chip profile ({e})") from None
    return _check(path, doc)


@functools.cache
def chips() -> dict[str, ChipLimits]:
    return {p.stem: read_chip(p) for p in sorted(CHIPS_DIR.glob("*.toml"))}


def chip_names() -> list[str]:
    return sorted(chips())


def load_chip(name: str) -> ChipLimits:
    if name not in chips():
        raise UnknownNameError("neuromorphic target", name, chip_names())
    return chips()[name]
