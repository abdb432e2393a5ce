"""Simulate a spiking net on real inputs: per-layer activity, op counts, inter-core communication,
and the energy of one inference under neuromorphic cost models beside the profiler's figure for
the same inference on a conventional device (docs/methods/ssa.md, "Neuromorphic simulation").
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from edgekit.data import load_dataset
from edgekit.energy.select import sysfs_root
from edgekit.errors import UsageError
from edgekit.flops import model_cost
from edgekit.inputs import InputOverride
from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.timing import TimingPlan
from edgekit.profiles import DeviceProfile, detect_profile, list_profiles, load_profile
from edgekit.profiles.claim import measured_on
from edgekit.registry import all_names, split_name
from edgekit.spiking.counting import COUNTER_SOURCE, count, spike_total
from edgekit.spiking.energy import horowitz_45nm, neuromorphic, spikingjelly_simple
from edgekit.spiking.layers import MultiStepNet, check_timesteps, is_spiking
from edgekit.targets import (
    ModelSource,
    is_registry_name,
    load_model_source,
    path_exists,
    registry_source,
)

DEFAULT_CHIP = "loihi"


@dataclass(frozen=True)
class SimulateSettings:
    samples: int = 100  # test-split samples to run
    batch_size: int = 50
    timesteps: int | None = None  # None: the model's own T
    chip: str = DEFAULT_CHIP  # a neuromorphic profile
    device: str | None = None  # the conventional device the profiler runs on; None = detected
    profile_device: bool = True  # False: skip the profiler (its figure is then absent)
    duration_s: float = 1.0  # the profiler's timed phase
    threads: int | None = None  # the profiler's intra-op threads; None = every usable core
    data: str | None = None  # a user's .npz instead of the entry's dataset

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise UsageError(f"--samples must be at least 1, got {self.samples}")
        if self.batch_size < 1:
            raise UsageError(f"batch size must be at least 1, got {self.batch_size}")
        if self.timesteps is not None:
            check_timesteps(self.timesteps)


def spiking_names() -> list[str]:
    return [n for n in all_names() if split_name(n)[0].spiking]


def load_spiking_source(model: str, checkpoint: str | None = None,
                        timesteps: int | None = None,
                        inputs: Sequence[InputOverride | str] = ()) -> ModelSource:
    """MODEL (a registry name, a checkpoint path, or a spiking module of the user's own:
    ``file.py:callable``, ``.pt2``...) with trained weights from ``checkpoint``.

    Refuses non-spiking models and checkpoints of another model or variant; ``timesteps``
    rebuilds a registry net for another T (the weights do not depend on T).
    """
    if checkpoint is None and not model.endswith(".safetensors") \
            and not is_registry_name(model) and not path_exists(model, "file"):
        return _user_spiking_source(model, timesteps, inputs)
    if checkpoint is None and (model.endswith(".safetensors") or path_exists(model, "file")):
        checkpoint, model = model, read_checkpoint(model).model_name
    entry, variant = split_name(model)
    name = model
    if not entry.spiking:
        raise UsageError(f"{name} is not a spiking model: simulate runs spiking nets only",
                         hint=f"spiking models: {', '.join(spiking_names())}")
    ckpt = None
    if checkpoint is not None:
        ckpt = read_checkpoint(checkpoint)
        if (ckpt.entry.name, ckpt.variant) != (entry.name, variant):
            raise UsageError(f"checkpoint {checkpoint} holds '{ckpt.model_name}', not '{name}'",
                             hint=f"simulate {ckpt.model_name} --checkpoint {checkpoint}")
        model_obj, ckpt = load_checkpoint(checkpoint, expect_entry=entry.name)
    else:
        model_obj = entry.build(variant).eval()
    if timesteps is not None and check_timesteps(timesteps) != model_obj.T:
        rebuilt = entry.build(variant, **{**dict(model_obj.edgekit_cfg["config"]), "T": timesteps})
        rebuilt.load_state_dict(model_obj.state_dict())
        model_obj = rebuilt.eval()
    if not isinstance(model_obj, MultiStepNet) or not is_spiking(model_obj):
        raise UsageError(f"{name} has no spiking neurons to simulate")
    return registry_source(entry, variant, model_obj, ckpt)


def _user_spiking_source(model: str, timesteps: int | None,
                         inputs: Sequence[InputOverride | str]) -> ModelSource:
    source = load_model_source(model, inputs=inputs)
    if not source.spiking:
        raise UsageError(f"{source.name} is not a spiking net edgekit can simulate",
                         hint="simulate runs edgekit MultiStepNet modules with spiking neurons "
                              "(edgekit.spiking.layers); built-in: "
                              + ", ".join(spiking_names()))
    if timesteps is not None and timesteps != source.model.T:
        raise UsageError(f"-T {timesteps}: {source.name} is your own module, built for "
                         f"T={source.model.T}", hint="build it for another T in your callable")
    return source


def _chip(name: str) -> DeviceProfile:
    chip = load_profile(name)
    if chip.kind != "neuromorphic":
        chips = [p.name for p in list_profiles() if p.kind == "neuromorphic"]
        raise UsageError(f"--chip {name} is a {chip.kind} profile, not a neuromorphic cost table",
                         hint=f"neuromorphic profiles: {', '.join(chips)}")
    return chip


def _device(name: str | None) -> DeviceProfile:
    device = load_profile(name) if name is not None else detect_profile()
    if device.kind == "neuromorphic":
        raise UsageError(f"--device {device.name} is a neuromorphic cost table, not a machine the "
                         "profiler can run on", hint="pass it as --chip; --device names a CPU, "
                         "GPU or Jetson profile")
    if name is not None:
        measured_on(device, as_device=False, root=sysfs_root())  # refused now, not after
    return device


def simulation_inputs(source: ModelSource,
            settings: SimulateSettings) -> tuple[np.ndarray, np.ndarray | None, str]:
    """The samples to run: the entry's test split (or ``--data``); for a user's module, the
    user's ``--data`` (the input's array, ``labels`` if there) or else its example inputs."""
    if source.task is None:
        if settings.data is None:
            x = source.inputs.example(settings.samples)[0].numpy()
            return x, None, f"{len(x)} random example inputs (no --data)"
        from edgekit.user_data import load_named_data

        named = load_named_data(settings.data, source.inputs)
        n = min(settings.samples, named.count)
        labels = named.labels[:n] if named.labels is not None else None
        return named.arrays[source.inputs.names[0]][:n], labels, named.origin
    dataset = load_dataset(source.task, settings.data)
    n = min(settings.samples, len(dataset.x_test))
    return dataset.x_test[:n], dataset.y_test[:n], f"{dataset.name} test split"


def _profile_target(source: ModelSource, workdir: Path) -> ModelSource | str:
    """What the profiler loads: the same weights and the same T as the simulation."""
    if source.entry is None:
        return source  # a user's module: profiled as it is
    cfg = source.model.edgekit_cfg
    same_config = dict(cfg["config"]) == source.entry.config_for(source.variant)
    if same_config and source.checkpoint is not None:
        return str(source.checkpoint.path)
    if same_config and source.checkpoint is None:
        return source.name
    return str(save_checkpoint(source.model, workdir / "simulated.safetensors"))


def _device_energy(source: ModelSource, settings: SimulateSettings,
                   device: DeviceProfile) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="edgekit-simulate-") as tmp:
        report = profile(_profile_target(source, Path(tmp)),
                         ProfileSettings(backend="torch", device=settings.device, batch=1,
                                         threads=settings.threads,
                                         plan=TimingPlan(duration_s=settings.duration_s)))
    energy = report["energy"]
    return {"model": f"profiler on {device.name}", "profile": device.name,
            "energy_j": energy.get("energy_per_inference_j"), "source": energy["source"],
            "measured": energy["measured"], "note": energy.get("note"),
            "backend": "torch", "batch": 1, "threads": report["settings"]["threads"],
            "latency_p50_ms": report["latency_ms"]["p50"],
            "iterations": report["iterations"]}


def simulate(source: ModelSource,
             settings: SimulateSettings = SimulateSettings()) -> dict[str, Any]:
    """Run ``source`` on real inputs and report activity, op counts, communication and energy.

    Every count and energy is per inference (one sample), averaged over the samples run.
    """
    chip = _chip(settings.chip)
    device = _device(settings.device) if settings.profile_device else None
    model = source.model.eval()
    x, y, data_name = simulation_inputs(source, settings)
    batches = [torch.from_numpy(x[i:i + settings.batch_size])
               for i in range(0, len(x), settings.batch_size)]
    counts, outputs = count(model, batches)
    n = counts.samples
    predictions = torch.cat(outputs).argmax(-1).numpy()
    spikes, updates = spike_total(counts)
    T = model.T
    attention = []
    for a in counts.attention.values():
        attention.append({
            "name": a.name, "kind": a.kind, "T": a.T, "N": a.N, "D": a.D,
            "values_moved": a.values_moved, "formula": a.formula,
            "spikes_moved": a.spikes_moved / n,
        })
    energy = [horowitz_45nm(counts).to_dict(), spikingjelly_simple(counts).to_dict(),
              neuromorphic(counts, chip).to_dict()]
    dense = model_cost(model, (torch.from_numpy(x[:1]),))
    report: dict[str, Any] = {
        "model": source.name,
        "source": source.record(),
        "T": T,
        "samples": n,
        "inputs": data_name,
        "accuracy": float((predictions == y[:n]).mean()) if y is not None else None,
        "counters": COUNTER_SOURCE,
        "totals": {"params": dense.params, "dense_flops": dense.flops,
                   "macs": counts.totals["mac"] / n,
                   "acs": counts.totals["ac"] / n, "sops": counts.totals["synop"] / n,
                   "spikes": spikes / n, "neuron_updates": updates / n,
                   "firing_rate": spikes / updates if updates else 0.0,
                   "memory_bytes": counts.totals["memory_access_bytes"] / n},
        "layers": [layer.per_inference(n) for layer in counts.layers.values()],
        "attention": attention,
        "energy": energy,
        "chip": chip.name,
    }
    if device is not None:
        report["device_energy"] = _device_energy(source, settings, device)
    return report
