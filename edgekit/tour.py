"""The demo tour (``edgekit tour``, ``make demo``): one run that tells each method's story and
ends in one HTML report.

The tour is a list of edgekit commands, the ones a newcomer would type, so what it shows is what
they can run themselves. This module only plans them (the CLI runs and times them). Each method
is measured against its own baseline on the axis its paper claims (the report's method sections
judge the claims); the all-models digits comparison is one step among them. The short tour uses
the trained checkpoints shipped in ``edgekit.demo_weights`` (checked by SHA-256 and copied under
``$EDGEKIT_HOME/tour``) and measures briefly; ``full`` trains every model to its registered
schedule (compare's own cache) and measures longer. What the short tour cut is written down in
``shortened`` and shown on the page.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgekit.paths import edgekit_home
from edgekit.registry import split_name

# The digits comparison: the reference nets, WBMM and its depthwise twin, the SSA spiking net and
# its ReLU twin, Spik4lite's baseline dense and pruned.
DIGITS_MODELS = ("mlp", "ds-cnn", "wbmm", "wbmm-dw13", "spikingresformer", "resformer-ann",
                 "spikingformer")
# Spik4lite is a training mode, not a model: the full tour trains the authors' baseline with it
# down to this keep fraction of its channels (removed physically); the short tour ships it.
SPIK4LITE_MODEL, SPIK4LITE_KEEP = "spikingformer", 0.5
SPIK4LITE_NAME = "spikingformer-spik4lite"  # its row in the comparison
SPIKING_MODEL = "spikingresformer"  # the one `simulate` prices
VALIDATED_MODEL = "wbmm"  # exported to ONNX and checked against PyTorch (WBMM's own operator)
WIFI_MODELS = ("wifi-mamba", "wifi-petr")  # WiFi-Mamba against its PETR-style baseline
WIFI_DATA = "wifi-pose-sim:station"  # the station protocol: one person on a mark
# ZipMoE where the paper's claim lives: experts that do not fit the memory budget, read from
# storage as slow as an edge board's (the AGX Orin's eMMC), beside the tiny model's run.
MOE_STORAGE_PROFILE = "jetson-agx-orin-64gb"
# ASTRA on a ViT-S at ImageNet's 196 patch tokens: the digits model (16 tokens, under 1 ms) has
# too little compute for two devices to share. One device is its own run (world size 1).
ASTRA_MODEL = ("--model", "vit-s", "--tokens", "196")
ASTRA_MODES = ("sp", "astra")
ASTRA_BANDWIDTHS = ("10Mbps", "100Mbps", "1Gbps")


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
    weights: dict[str, Path] = field(default_factory=dict)  # demo checkpoint -> where it goes


def _compare_checkpoint(name: str) -> Path:
    """Where compare caches ``name`` trained to its schedule (the full tour's compare writes it
    before simulate, profile and validate read it)."""
    from edgekit.compare.cache import cache_path
    from edgekit.data import load_dataset

    entry, variant = split_name(name)
    return cache_path(entry, variant, load_dataset(entry.task))


def _spik4lite(cache: Path) -> tuple[Step, Path]:
    """The full tour's step that trains and prunes the Spik4lite net, and its checkpoint."""
    path = cache / f"{SPIK4LITE_NAME}.safetensors"
    return Step(f"Spik4lite: train {SPIK4LITE_MODEL}, removing channels down to "
                f"{SPIK4LITE_KEEP:.0%}", ("train", SPIK4LITE_MODEL, "--spik4lite",
                                          f"--target-keep={SPIK4LITE_KEEP}", "-o", str(path)),
                cached=path), path


def _moe_steps(cache: Path, out: Path, size: str, tokens: str,
               storage: tuple[str, ...], json_name: str) -> list[Step]:
    checkpoint, store = cache / f"moe-{size}", cache / f"moe-{size}-store"
    capped = f", storage capped as on {storage[1]}" if storage else ", storage uncapped"
    return [Step(f"ZipMoE: a {size} Qwen-MoE checkpoint",
                 ("moe", "make-tiny", str(checkpoint), "--size", size, "--force"),
                 cached=checkpoint / "config.json"),
            Step(f"ZipMoE: compress the {size} model's experts into a store",
                 ("moe", "compress", str(checkpoint), "-o", str(store), "--force"),
                 cached=store / "manifest.json"),
            Step(f"ZipMoE against naive offload and all-in-memory ({size} experts{capped})",
                 ("moe", "bench", str(store), "--max-new-tokens", tokens, *storage,
                  "--json", str(out / json_name)))]


def plan(out: Path, full: bool = False) -> Tour:
    """Every step of the tour, writing into ``out``; caches under ``$EDGEKIT_HOME/tour``."""
    from edgekit.demo_weights.build import RECIPES

    out = out.resolve()
    cache = edgekit_home() / "tour"
    duration = "1.0" if full else "0.3"
    steps = [Step("the device profiles, and the one detected here",
                  ("devices", "--json", str(out / "devices.json")))]
    weights = {} if full else {r.name: cache / f"{r.name}.safetensors" for r in RECIPES}
    if full:  # compare trains the registry names to their schedules; Spik4lite trains here
        spik4lite_step, spik4lite = _spik4lite(cache)
        steps.append(spik4lite_step)
        digits = [*DIGITS_MODELS, str(spik4lite)]
        wifi = list(WIFI_MODELS)
        spiking, validated = (str(_compare_checkpoint(n)) for n in (SPIKING_MODEL,
                                                                    VALIDATED_MODEL))
    else:  # the shipped checkpoints, by file name: compare runs in the cache folder
        digits = [weights[n].name for n in (*DIGITS_MODELS, SPIK4LITE_NAME)]
        wifi = [weights[n].name for n in WIFI_MODELS]
        spiking, validated = (str(weights[n]) for n in (SPIKING_MODEL, VALIDATED_MODEL))
    steps.append(Step("compare the digits models: accuracy, latency, energy",
                      ("compare", *digits, "--duration", duration,
                       "--plot", str(out / "compare.png"), "--csv", str(out / "compare.csv"),
                       "--json", str(out / "compare.json")), cwd=cache))
    steps.append(Step("simulate the spiking net: firing rates, SOPs, neuromorphic energy",
                      ("simulate", SPIKING_MODEL, "--checkpoint", spiking, "--duration",
                       duration, "--plot", str(out / "simulate.png"), "--json",
                       str(out / "simulate.json"))))
    steps.append(Step("profile one model on this machine", ("profile", validated, "--duration",
                                                             duration, "--json",
                                                             str(out / "profile.json"))))
    steps.append(Step("export WBMM to ONNX and validate it against PyTorch",
                      ("validate", validated, "--json", str(out / "validate.json"))))
    tokens = "32" if full else "8"
    steps += _moe_steps(cache, out, "tiny", tokens, (), "moe-bench.json")
    steps += _moe_steps(cache, out, "small", tokens, ("--storage-profile", MOE_STORAGE_PROFILE),
                        "moe-bench-edge.json")
    reps = ("--reps", "5" if full else "3")
    steps.append(Step("ASTRA's baseline: the ViT on one device",
                      ("astra", "run", "--world-size", "1", "--mode", "single", *ASTRA_MODEL,
                       *reps, "--json", str(out / "astra-single.json"))))
    steps.append(Step("ASTRA against sequence parallelism on 2 ranks over emulated links",
                      ("astra", "run", "--world-size", "2", *ASTRA_MODEL,
                       *(a for m in ASTRA_MODES for a in ("--mode", m)),
                       *(a for b in ASTRA_BANDWIDTHS for a in ("--bandwidth", b)),
                       *reps, "--json", str(out / "astra-run.json"))))
    steps.append(Step("WiFi-Mamba against its baseline on simulated CSI (station protocol)",
                      ("compare", *wifi, "--data", WIFI_DATA, "--duration", duration,
                       "--json", str(out / "wifi-compare.json")), cwd=cache))

    shortened = [] if full else [
        "trained checkpoints shipped with edgekit (edgekit/demo_weights/manifest.json: the "
        "command, data digest and score of each) instead of training every model to its "
        "registered schedule",
        f"profiler timed {duration} s per model (full: 1.0 s)",
        "moe bench generated 8 tokens per prompt (full: 32)",
        "astra run: 3 reps per case (full: 5)",
        "run `make demo DEMO=full` (or `edgekit tour --full`) for the long version",
    ]
    inputs = [out / name for name in ("tour.json", "devices.json", "compare.json",
                                      "profile.json", "simulate.json", "moe-bench.json",
                                      "moe-bench-edge.json", "astra-single.json",
                                      "astra-run.json",
                                      "wifi-compare.json", "validate.json")]
    return Tour(steps, shortened, inputs, weights)


def shown(arg: str, out: Path) -> str:
    """A command argument as the page shows it: paths under the output folder or
    ``$EDGEKIT_HOME`` relative to them, so no absolute (temporary) path reaches the page."""
    for root, name in ((out.resolve(), out.name), (edgekit_home(), "$EDGEKIT_HOME")):
        if arg == str(root) or arg.startswith(str(root) + "/"):
            return name + arg[len(str(root)):]
    return arg
