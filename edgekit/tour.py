"""The demo tour (``edgekit tour``, ``make demo``): one run that touches every method and ends in
one HTML report.

The tour is a list of edgekit commands, the ones a newcomer would type, so what it shows is what
they can run themselves. This module only plans them (the CLI runs and times them). The short
tour trains briefly and caches what it trains under ``$EDGEKIT_HOME/tour``, so a second run only
measures; ``full`` trains every model to its registered schedule (compare's own cache) and
measures longer. What the short tour cut is written down in ``SHORTENED`` and shown on the page.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.paths import edgekit_home
from edgekit.registry import split_name

# The digits comparison: the reference nets, WBMM, and the SSA spiking net with its ReLU twin.
DIGITS_MODELS = ("mlp", "ds-cnn", "wbmm", "spikingresformer", "resformer-ann")
# Spik4lite is a training mode, not a model: the tour trains the authors' baseline with it down to
# this keep fraction of its channels (removed physically) and adds it to the digits comparison.
SPIK4LITE_MODEL, SPIK4LITE_KEEP = "spikingformer", 0.5
# short tour: two removal cycles reach keep 0.5 (the tokenizer gives up at most 30 % a step)
SPIK4LITE_SHORT = ("--epochs=8", "--cycles=2")
SPIKING_MODEL = "spikingresformer"  # the one `simulate` prices
VALIDATED_MODEL = "wbmm"  # exported to ONNX and checked against PyTorch (WBMM's own operator)
WIFI_MODELS = ("wifi-mamba", "wifi-petr")  # WiFi-Mamba against its PETR-style baseline

# The short tour's training: seconds per model (no epoch starts after them; at least one runs),
# or whole epochs for the SSA nets, whose one-cycle schedule then completes (3 epochs: 88-90 %).
SHORT_TRAINING = {"mlp": "--seconds=10", "ds-cnn": "--seconds=10", "wbmm": "--seconds=10",
                  "spikingresformer": "--epochs=3", "resformer-ann": "--epochs=3",
                  "wifi-mamba": "--seconds=15", "wifi-petr": "--seconds=15"}


@dataclass(frozen=True)
class Step:
    """One edgekit command of the tour. ``cached``: a file whose presence means the step already
    ran in an earlier tour (its output is reused); ``cwd``: the folder it runs in."""

    title: str
    args: tuple[str, ...]
    cached: Path | None = None
    cwd: Path | None = None


@dataclass(frozen=True)
class Tour:
    steps: list[Step]
    shortened: list[str]  # what the short tour cut, for the page
    report_inputs: list[Path]  # the JSON files the report is built from


def _spik4lite(cache: Path, full: bool) -> tuple[Step, Path]:
    """The step that trains and prunes the Spik4lite net, and the checkpoint it writes."""
    budget = () if full else SPIK4LITE_SHORT
    name = (f"{SPIK4LITE_MODEL}-spik4lite-keep{SPIK4LITE_KEEP}"
            f"{'' if full else '-' + SPIK4LITE_SHORT[0].split('=')[1] + 'ep'}.safetensors")
    path = cache / name
    return Step(f"Spik4lite: train {SPIK4LITE_MODEL}, removing channels down to "
                f"{SPIK4LITE_KEEP:.0%}", ("train", SPIK4LITE_MODEL, "--spik4lite",
                                          f"--target-keep={SPIK4LITE_KEEP}", *budget, "-o",
                                          str(path)), cached=path), path


def _training(name: str) -> str:
    return SHORT_TRAINING[name]


def _checkpoint_name(name: str) -> str:
    """``mlp-10s.safetensors``, ``spikingresformer-1ep.safetensors``: the budget in the name, so
    the table says how briefly each model was trained."""
    option, value = _training(name).lstrip("-").split("=")
    return f"{name.replace(':', '-')}-{value}{'s' if option == 'seconds' else 'ep'}.safetensors"


def _compare_checkpoint(name: str) -> Path:
    """Where compare caches ``name`` trained to its schedule (the full tour's compare writes it
    before simulate, profile and validate read it)."""
    from edgekit.compare.cache import cache_path
    from edgekit.data import load_dataset

    entry, variant = split_name(name)
    return cache_path(entry, variant, load_dataset(entry.task))


def _trained(names: list[str], cache: Path, full: bool) -> tuple[list[Step], list[str]]:
    """Steps that train ``names`` briefly (short tour, cached) and what compare is then given:
    the checkpoints' file names (it runs in ``cache``) or, for the full tour, the registry names
    (compare trains them to their schedule and caches them itself)."""
    if full:
        return [], list(names)
    steps = [Step(f"train {n} briefly ({_training(n).lstrip('-').replace('=', ' ')})",
                  ("train", n, _training(n), "-o", str(cache / _checkpoint_name(n))),
                  cached=cache / _checkpoint_name(n)) for n in names]
    return steps, [_checkpoint_name(n) for n in names]


def plan(out: Path, full: bool = False) -> Tour:
    """Every step of the tour, writing into ``out``; caches under ``$EDGEKIT_HOME/tour``."""
    out = out.resolve()
    cache = edgekit_home() / "tour"
    duration = "1.0" if full else "0.3"
    models = list(DIGITS_MODELS)
    steps = [Step("the device profiles, and the one detected here",
                  ("devices", "--json", str(out / "devices.json")))]

    train_steps, targets = _trained(models, cache, full)
    spik4lite_step, spik4lite_checkpoint = _spik4lite(cache, full)
    steps += [*train_steps, spik4lite_step]
    targets.append(spik4lite_checkpoint.name)  # compare runs in the cache folder
    steps.append(Step("compare the digits models: accuracy, latency, energy",
                      ("compare", *targets, "--duration", duration,
                       "--plot", str(out / "compare.png"), "--csv", str(out / "compare.csv"),
                       "--json", str(out / "compare.json")), cwd=cache))
    spiking, validated = (str(_compare_checkpoint(n) if full else cache / _checkpoint_name(n))
                          for n in (SPIKING_MODEL, VALIDATED_MODEL))
    checkpoint = ("--checkpoint", spiking)
    steps.append(Step("simulate the spiking net: firing rates, SOPs, neuromorphic energy",
                      ("simulate", SPIKING_MODEL, *checkpoint, "--samples",
                       "100" if full else "20", "--duration", duration,
                       "--plot", str(out / "simulate.png"), "--json", str(out / "simulate.json"))))
    steps.append(Step("profile one model on this machine", ("profile", validated, "--duration",
                                                             duration, "--json",
                                                             str(out / "profile.json"))))
    steps.append(Step("export WBMM to ONNX and validate it against PyTorch",
                      ("validate", validated, "--json", str(out / "validate.json"))))

    moe_checkpoint, store = cache / "moe-tiny", cache / "moe-store"
    steps.append(Step("ZipMoE: a tiny Qwen-MoE checkpoint",
                      ("moe", "make-tiny", str(moe_checkpoint), "--force"),
                      cached=moe_checkpoint / "config.json"))
    steps.append(Step("ZipMoE: compress its experts into a store",
                      ("moe", "compress", str(moe_checkpoint), "-o", str(store), "--force"),
                      cached=store / "manifest.json"))
    steps.append(Step("ZipMoE against naive offload and all-in-memory",
                      ("moe", "bench", str(store), "--max-new-tokens", "32" if full else "8",
                       "--json", str(out / "moe-bench.json"))))

    bandwidths = ("10Mbps", "100Mbps", "1Gbps") if full else ("10Mbps", "1Gbps")
    modes = ("astra", "sp", "tp", "bp-sp") if full else ("astra", "sp")
    steps.append(Step("ASTRA on 2 ranks over emulated links",
                      ("astra", "run", "--world-size", "2",
                       *(a for m in modes for a in ("--mode", m)),
                       *(a for b in bandwidths for a in ("--bandwidth", b)),
                       "--reps", "5" if full else "3", "--json", str(out / "astra-run.json"))))

    wifi_steps, wifi_targets = _trained(list(WIFI_MODELS), cache, full)
    steps += wifi_steps
    steps.append(Step("WiFi-Mamba against its baseline on simulated CSI",
                      ("compare", *wifi_targets, "--duration", duration,
                       "--json", str(out / "wifi-compare.json")), cwd=cache))

    shortened = [] if full else [
        "models trained briefly (" + ", ".join(f"{n} {_training(n).lstrip('-')}" for n in
                                               [*models, *WIFI_MODELS])
        + f"; Spik4lite {SPIK4LITE_MODEL} {' '.join(SPIK4LITE_SHORT)}) instead of their "
        "registered schedules; their accuracy is far from trained",
        f"profiler timed {duration} s per model (full: 1.0 s)",
        "simulate ran 20 test samples (full: 100)",
        "moe bench generated 8 tokens per prompt (full: 32)",
        f"astra run: modes {', '.join(modes)} on {', '.join(bandwidths)}, 3 reps (full: 4 modes, "
        "3 links, 5 reps)",
        "run `make demo DEMO=full` (or `edgekit tour --full`) for the long version",
    ]
    inputs = [out / name for name in ("tour.json", "devices.json", "compare.json",
                                      "profile.json", "simulate.json", "moe-bench.json",
                                      "astra-run.json", "wifi-compare.json", "validate.json")]
    return Tour(steps, shortened, inputs)
