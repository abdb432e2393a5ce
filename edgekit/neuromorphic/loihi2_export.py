"""``edgekit export --to loihi2``: a spiking net in Loihi 2's fixed-point formats, checked.

The net is lowered (``lowering``), quantised (``loihi2_quantize``) and written as a NIR graph of
the chip's net, ``input -> flatten -> (Affine -> CubaLIF)* -> Affine -> output``: each Affine
holds a synapse layer's integer mantissas times ``2**(weight_exp + 6)`` and the relay's bias
column times what the relay sends as its bias (so the Affine's output is what the layer adds to
the chip's current ``u``), each CubaLIF the chip's decays (``tau = dt * 4096 / decay``, with
``w_in = tau_syn / dt`` and ``r = tau_mem / dt`` as SpikingJelly's NIR exporter writes a CUBA
LIF) and ``vth << 6`` as its threshold; the readout Affine holds mantissas times
``2**weight_exp``. Every node's ``metadata`` carries its integers (weight_exp, du, dv, vth), and
``manifest.json`` every format, scale and exponent. The check (``loihi2_check``) runs the net
read back from the written file, so what passes is what was written; a failed check leaves no
folder and exits 1.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from edgekit.errors import CheckFailed, UsageError
from edgekit.exporters.artifact import (
    MANIFEST_SCHEMA,
    ExportResult,
    file_record,
    task_record,
    write_manifest,
)
from edgekit.exporters.calibration import DEFAULT_SAMPLES, select_samples
from edgekit.exporters.nir import DEFAULT_DT
from edgekit.fileio import atomic_directory
from edgekit.neuromorphic import loihi2_rules as rules
from edgekit.neuromorphic.loihi2_check import Loihi2Check, check
from edgekit.neuromorphic.loihi2_quantize import (
    ChipLayer,
    ChipNet,
    ChipNeurons,
    InputFormat,
    quantize,
)
from edgekit.neuromorphic.lowering import lower_graph, nir_graph_of
from edgekit.optional import SPIKING, require
from edgekit.provenance import provenance
from edgekit.targets import ModelSource

MODEL_FILE = "model.nir"
MAX_CHECK_SAMPLES = 2000
LAVA_MODELS = ("lava.proc.lif.models.PyLifModelBitAcc",
               "lava.proc.dense.models.PyDenseModelBitAcc")
FORMATS = {
    "weights": "8-bit mantissa per synapse, mixed sign: even values in [-256, 254]; one "
               "exponent (weight_exp) per synapse layer shifts the weighted sum",
    "bias": "a column of the layer's weights fed by an always-on relay neuron (one step of "
            "delay per synapse layer, as the spikes), same mantissa format and exponent; the "
            "first layer's relay is an input channel sending the graded value 255, the others "
            "spike 1",
    "input": "8-bit graded spikes q in [0, 255]: x ~ input_format.low + q * input_format.step",
    "synaptic_input": "weighted sum shifted by weight_exp, then left by 6 into u",
    "u": "24-bit signed, wraps on overflow; du 12-bit unsigned, decays by (du + 1) / 4096",
    "v": "24-bit signed, saturates at +-(2**23 - 1); dv 12-bit unsigned, decays by dv / 4096",
    "vth": "17-bit unsigned; a neuron fires where v > vth << 6 and v resets to 0",
}


class Loihi2CheckFailed(CheckFailed):
    """The fixed-point net departs from the float net beyond the check's thresholds."""

    def __init__(self, report: Loihi2Check, where: str) -> None:
        super().__init__(f"{where}: {'; '.join(report.failures)}")
        self.report = report


@dataclass(frozen=True)
class CheckData:
    calibration: np.ndarray
    calibration_origin: str
    x: np.ndarray
    y: np.ndarray | None
    origin: str


def check_data(source: ModelSource, calib_data: str | Path | None,
               calib_samples: int | None) -> CheckData:
    """Calibration samples (the input's range) and the samples the check runs on: the task's
    training and test splits (of ``calib_data`` where given), else ``calib_data``'s ``x`` (and
    ``y``), else the model's example inputs."""
    count = calib_samples or DEFAULT_SAMPLES
    if source.task is not None:
        from edgekit.data import load_dataset

        data = load_dataset(source.task, calib_data)
        calibration = select_samples(data.x_train, count)
        x, y = data.x_test[:MAX_CHECK_SAMPLES], data.y_test[:MAX_CHECK_SAMPLES]
        return CheckData(calibration, f"{data.name} (train split, {len(calibration)} of "
                                      f"{len(data.x_train)} samples)", x, y,
                         f"{data.name} test split, {len(x)} samples")
    if calib_data is not None:
        from edgekit.data import read_npz

        arrays = read_npz(calib_data, "save with numpy.savez(path, x=..., y=...)")
        if "x" not in arrays:
            raise UsageError(f"{calib_data}: no array x")
        x = np.asarray(arrays["x"], dtype=np.float32)[:MAX_CHECK_SAMPLES]
        if x.shape[1:] != tuple(source.model.input_shape):
            raise UsageError(f"{calib_data}: x has samples of shape {x.shape[1:]}, the model "
                             f"takes {tuple(source.model.input_shape)}")
        y = np.asarray(arrays["y"], dtype=np.int64)[:len(x)] if "y" in arrays else None
        return CheckData(select_samples(x, count), f"{calib_data}", x, y,
                         f"{calib_data}, {len(x)} samples")
    (example,) = source.example_inputs(batch=64)
    x = example.numpy().astype(np.float32)
    return CheckData(x, "the model's example inputs (64)", x, None,
                     "the model's example inputs, 64 samples (no labels: give --calib-data)")


def chip_graph(chip: ChipNet, dt: float) -> Any:
    """The chip's net as a NIR graph (see the module's doc)."""
    nir = require("nir", SPIKING, "Loihi 2 export")
    shape = np.asarray(chip.input_shape)
    nodes: dict[str, Any] = {
        "input": nir.Input(input_type={"input": shape}),
        "flatten": nir.Flatten(input_type={"input": shape}, start_dim=-len(shape), end_dim=-1),
    }
    edges, previous = [("input", "flatten")], "flatten"
    for k, layer in enumerate(chip.layers):
        synapse = f"synapse_{k}"
        shift = layer.exponent + (rules.ACTIVATION_SHIFT if layer.neurons is not None else 0)
        dense = layer.weights.toarray().astype(np.float64)
        nodes[synapse] = nir.Affine(weight=dense * 2.0 ** shift,
                                    bias=layer.bias.astype(np.float64) * layer.relay
                                    * 2.0 ** shift,
                                    metadata={"weight_exp": layer.exponent, "shift": shift,
                                              "relay": layer.relay, "scale": layer.scale,
                                              "output_shape": np.asarray(layer.output_shape),
                                              "source_nodes": layer.name})
        edges.append((previous, synapse))
        previous = synapse
        if layer.neurons is None:
            continue
        n, size = layer.neurons, layer.weights.shape[0]

        def full(value: float, size: int = size) -> np.ndarray:
            return np.full(size, float(value))

        tau_syn = dt * rules.DECAY_UNITY / (n.du + rules.DU_OFFSET)
        tau_mem = dt * rules.DECAY_UNITY / n.dv if n.dv else np.inf
        neurons = f"neurons_{k}"
        nodes[neurons] = nir.CubaLIF(
            tau_syn=full(tau_syn), tau_mem=full(tau_mem), r=full(tau_mem / dt),
            v_leak=full(0), v_threshold=full(n.vth << rules.THRESHOLD_SHIFT), v_reset=full(0),
            w_in=full(tau_syn / dt),
            metadata={"du": n.du, "dv": n.dv, "vth": n.vth, "source_node": layer.neuron_name})
        edges.append((synapse, neurons))
        previous = neurons
    nodes["output"] = nir.Output(output_type={"output": np.asarray([chip.layers[-1]
                                                                   .weights.shape[0]])})
    edges.append((previous, "output"))
    return nir.NIRGraph(nodes=nodes, edges=edges, metadata={
        "dt": float(dt), "writer": "edgekit", "target": "loihi2",
        "input_low": chip.input_format.low, "input_step": chip.input_format.step})


def _mantissas(values: np.ndarray, shift: int, what: str) -> np.ndarray:
    """The stored mantissas, refused unless they are what the synapse keeps: even integers in
    [-256, 254] (an odd one would lose its lowest bit on the chip)."""
    m = np.asarray(values, dtype=np.float64) / 2.0 ** shift
    ints = np.rint(m)
    if not np.array_equal(m, ints) or ints.min(initial=0) < rules.WEIGHT_MIN \
            or ints.max(initial=0) > rules.WEIGHT_MAX:
        raise CheckFailed(f"{what}: values that are not 8-bit mantissas times 2**{shift}")
    odd = int(np.count_nonzero(ints % 2))
    if odd:
        raise CheckFailed(f"{what}: {odd} odd mantissas, which Loihi 2's mixed-sign synapse "
                          f"truncates (it keeps even values in [-256, 254])")
    return ints.astype(np.int64)


def read_chip(path: str | Path) -> ChipNet:
    """The chip's net from a NIR file written by ``chip_graph`` (the check runs this)."""
    nir = require("nir", SPIKING, "Loihi 2 export")
    graph = nir.read(str(path))
    meta = graph.metadata
    layers, k = [], 0
    while f"synapse_{k}" in graph.nodes:
        synapse = graph.nodes[f"synapse_{k}"]
        shift = int(synapse.metadata["shift"])
        weights = sparse.csr_matrix(_mantissas(synapse.weight, shift, f"synapse_{k} weights"))
        relay = int(synapse.metadata["relay"])
        bias = _mantissas(np.asarray(synapse.bias) / relay, shift, f"synapse_{k} bias")
        node = graph.nodes.get(f"neurons_{k}")
        neurons = None
        if node is not None:
            md = node.metadata
            neurons = ChipNeurons(int(md["du"]), int(md["dv"]), int(md["vth"]))
        layers.append(ChipLayer(str(synapse.metadata["source_nodes"]), weights, bias, relay,
                                int(synapse.metadata["weight_exp"]),
                                float(synapse.metadata["scale"]), neurons,
                                None if node is None else str(node.metadata["source_node"]),
                                tuple(int(d) for d in synapse.metadata["output_shape"])))
        k += 1
    shape = tuple(int(d) for d in graph.nodes["input"].input_type["input"])
    return ChipNet(InputFormat(float(meta["input_low"]), float(meta["input_step"])), shape,
                   tuple(layers))


def _layer_record(layer: ChipLayer, k: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "synapse_node": f"synapse_{k}", "from": layer.name, "outputs": int(layer.weights.shape[0]),
        "inputs": int(layer.weights.shape[1]), "synapses": int(layer.weights.nnz),
        "weight_exp": layer.exponent,
        "mantissa_range": [int(min(layer.weights.data.min(initial=0), layer.bias.min())),
                           int(max(layer.weights.data.max(initial=0), layer.bias.max()))],
        "bias": "relay neuron column" if np.any(layer.bias) else "none",
        "relay_sends": layer.relay,
        "scale": layer.scale,
        "scale_of": "chip units of v per float unit of the membrane" if layer.neurons
                    else "chip units of the readout per float unit of the output",
    }
    if layer.neurons is not None:
        n = layer.neurons
        record["neurons"] = {"node": f"neurons_{k}", "from": layer.neuron_name, "du": n.du,
                             "dv": n.dv, "vth": n.vth, "float_decay": n.decay,
                             "decay_on_chip": n.dv / rules.DECAY_UNITY,
                             "float_gain": n.gain, "float_threshold": n.threshold}
    return record


def export_loihi2(source: ModelSource, out_dir: str | Path, *,
                  calib_data: str | Path | None = None, calib_samples: int | None = None,
                  force: bool = False, dt: float = DEFAULT_DT,
                  echo: Callable[[str], None] = lambda line: None) -> ExportResult[Loihi2Check]:
    """Quantise a spiking net for Loihi 2, write it, and check it against the float net."""
    started = time.perf_counter()
    net = lower_graph(nir_graph_of(source, dt), dt)
    data = check_data(source, calib_data, calib_samples)
    echo(f"calibrating the 8-bit input with {data.calibration_origin}")
    chip = quantize(net, data.calibration)
    inputs = [*source.files, *([Path(calib_data)] if calib_data is not None else [])]
    with atomic_directory(out_dir, inputs=inputs, force=force) as staging:
        model_path = staging / MODEL_FILE
        require("nir", SPIKING, "Loihi 2 export").write(str(model_path), chip_graph(chip, dt))
        written = read_chip(model_path)
        if not _same_integers(written, chip):
            raise CheckFailed(f"{model_path.name} read back does not hold the quantised "
                              f"integers")
        report, _ = check(source.model, written, data.x, data.y, data.origin)
        if not report.passed:
            raise Loihi2CheckFailed(report, f"Loihi 2 export of {source.name}")
        (field,) = source.inputs.fields
        manifest = {
            "schema_version": MANIFEST_SCHEMA,
            "format": "loihi2",
            "model_file": MODEL_FILE,
            "source": source.record(),
            "task": task_record(source.task) if source.task is not None else None,
            "inputs": [{"name": "input", "shape": ["batch", *field.shape[1:]],
                        "dtype": "uint8 graded spikes"}],
            "outputs": [{"name": "output", "shape": ["batch", int(chip.layers[-1]
                                                                  .weights.shape[0])],
                         "dtype": "int (readout summed over T)"}],
            "timesteps": source.model.T,
            "dt_s": dt,
            "neuron_model": "CUBA LIF, Loihi 2 fixed point (Lava's PyLifModelBitAcc)",
            "formats": FORMATS,
            "input_format": {"bits": 8, "low": chip.input_format.low,
                             "step": chip.input_format.step},
            "layers": [_layer_record(layer, k) for k, layer in enumerate(chip.layers)],
            "timing": f"each synapse layer adds one step: layer k's step t runs at chip step "
                      f"t + k; send the input for T = {source.model.T} steps, run T + "
                      f"{len(chip.layers)} steps, and sum the readout over its T steps",
            "calibration": {"origin": data.calibration_origin,
                            "samples": int(len(data.calibration))},
            "simulated_with": {"model": "edgekit.neuromorphic.loihi2_sim",
                               "stands_in_for": list(LAVA_MODELS),
                               "checked_against": "Lava 0.10 in tests/test_loihi2.py where "
                                                  "lava imports"},
            "validation": report.to_dict(),
            "files": {MODEL_FILE: file_record(model_path)},
            "export_seconds": round(time.perf_counter() - started, 3),
            "provenance": provenance(),
        }
        write_manifest(staging, manifest)
    return ExportResult(Path(out_dir), manifest, report, time.perf_counter() - started)


def _same_integers(written: ChipNet, chip: ChipNet) -> bool:
    """Whether the file read back holds exactly the integers the quantiser made."""
    return written.input_format == chip.input_format and all(
        w.exponent == c.exponent and (w.weights != c.weights).nnz == 0
        and np.array_equal(w.bias, c.bias) and w.relay == c.relay
        and (w.neurons is None) == (c.neurons is None)
        and (w.neurons is None or (w.neurons.du, w.neurons.dv, w.neurons.vth)
             == (c.neurons.du, c.neurons.dv, c.neurons.vth))
        for w, c in zip(written.layers, chip.layers, strict=True))
