"""The FP32 reference every export carries: one input sample and PyTorch's FP32 outputs on it.

It is saved once, when the ONNX model is exported (``reference.npz``, listed with its SHA-256 in
the manifest), and copied unchanged into every engine and Jetson bundle made from that model, so
fp32, fp16 and int8 builds, on any machine, are judged against the same numbers (Polygraphy's
"run, save, compare later").

The file is a plain ``.npz`` (never pickled) with arrays ``input.<name>`` and ``output.<name>``;
``calibration.npz`` uses the same layout for its input samples.
"""
from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.errors import UsageError
from edgekit.exporters.graph_form import REFERENCE_WARM_FRAMES, GraphForm
from edgekit.exporters.validate import is_constant
from edgekit.fileio import atomic_write_bytes
from edgekit.targets import ModelSource

REFERENCE_FILE = "reference.npz"
REFERENCE_SEED = 0
INPUT_PREFIX, OUTPUT_PREFIX = "input.", "output."


@dataclass(frozen=True)
class Reference:
    """Input arrays by input name and PyTorch FP32 outputs by output name."""

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]

    @property
    def batch(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


def save_arrays(path: str | Path, inputs: dict[str, np.ndarray],
                outputs: dict[str, np.ndarray] | None = None) -> Path:
    """Write ``input.<name>`` / ``output.<name>`` arrays to an ``.npz`` atomically."""
    arrays = {f"{INPUT_PREFIX}{k}": np.ascontiguousarray(v) for k, v in inputs.items()}
    arrays.update({f"{OUTPUT_PREFIX}{k}": np.ascontiguousarray(v)
                   for k, v in (outputs or {}).items()})
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())


def load_arrays(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The input and output arrays of a file written by ``save_arrays`` (no pickles)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path}: not a readable .npz file ({exc})") from exc
    inputs = {k[len(INPUT_PREFIX):]: v for k, v in arrays.items() if k.startswith(INPUT_PREFIX)}
    outputs = {k[len(OUTPUT_PREFIX):]: v for k, v in arrays.items() if k.startswith(OUTPUT_PREFIX)}
    if not inputs:
        raise UsageError(f"{path}: no arrays named '{INPUT_PREFIX}<name>'",
                         hint="it was not written by edgekit")
    return inputs, outputs


def torch_outputs(form: GraphForm, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """PyTorch FP32 eager outputs of ``form`` on ``inputs`` (CPU), by output name."""
    missing = [n for n in form.input_names if n not in inputs]
    if missing:
        raise UsageError(f"the reference has no input {', '.join(missing)}")
    return form.run([torch.from_numpy(np.ascontiguousarray(inputs[n])) for n in form.input_names])


def make_reference(form: GraphForm, batch: int) -> Reference:
    """The form's deterministic example inputs at ``batch`` (a stream's state carried through a
    few frames) and PyTorch's outputs on them."""
    inputs = form.feed(form.example_inputs(batch, seed=REFERENCE_SEED))
    return Reference(inputs, torch_outputs(form, inputs))


# Samples of the entry's own training data that set an untrained spiking net's BatchNorm statistics.
FIRING_CALIBRATION_SAMPLES = 64


# The batch sizes a dynamic-batch ONNX export is validated at (onnx.validate_onnx), and the
# draws of example inputs per batch size.
DYNAMIC_VALIDATION_BATCHES = (1, 3)
# One draw at batch 1 is a single sample, on which an untrained net may happen to be silent.
VALIDATION_DRAWS = 3


def validation_seeds(batch: int) -> list[int]:
    """The example-input seeds an export validates a batch size on: ``batch`` (the one earlier
    versions used), ``batch + 1000``, ..."""
    return [batch + 1000 * draw for draw in range(VALIDATION_DRAWS)]


def _judged_inputs(source: ModelSource) -> list[torch.Tensor]:
    """The example inputs exports judge a net on: the reference's and the NIR check's (seed
    ``REFERENCE_SEED``), and the ONNX validation's at the dynamic batches (batch 1 included)."""
    return [*source.example_inputs(batch=1), *source.example_inputs(batch=4),
            *(x for b in DYNAMIC_VALIDATION_BATCHES for seed in validation_seeds(b)
              for x in source.example_inputs(batch=b, seed=seed))]


def _silent(model: torch.nn.Module, *inputs: torch.Tensor) -> bool:
    """Whether the net's output is constant on any of ``inputs`` (one run each, from rest)."""
    return any(is_constant(model(x).numpy()) for x in inputs)


def make_spiking_net_fire(source: ModelSource) -> dict[str, Any] | None:
    """Make an untrained spiking net fire before it is exported and validated.

    With initial BatchNorm statistics (mean 0, variance 1) an untrained spiking net's neurons
    never reach threshold: every output is the same constant, which any graph returning that
    constant reproduces, so validation would prove nothing. Untrained weights (no checkpoint) get
    their BatchNorm statistics from the first ``FIRING_CALIBRATION_SAMPLES`` training samples of
    the entry's own dataset; trained weights (a checkpoint, or BatchNorm statistics that have
    seen data) are left as they are. None for a non-spiking entry;
    else what was done, for the manifest."""
    if not source.spiking:
        return None
    if source.checkpoint is not None:
        return {"weights": "trained (checkpoint)", "batchnorm": "as trained"}
    if source.user is not None:  # the user's weights are never changed
        return {"weights": "the user's own", "batchnorm": "as given"}
    norms = [m for m in source.model.modules()
             if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if norms and not any(int(m.num_batches_tracked) == 0 for m in norms):
        return {"weights": "in memory, no checkpoint",
                "batchnorm": "as given (statistics already set from data)"}
    from edgekit.data import load_dataset
    from edgekit.spiking.layers import calibrate_batchnorm, functional, scale_to_fire

    data = load_dataset(source.task)
    x = torch.from_numpy(np.ascontiguousarray(data.x_train[:FIRING_CALIBRATION_SAMPLES]))
    where = f"the first {len(x)} training samples of {data.name}"
    functional.reset_net(source.model)
    with torch.no_grad():
        if norms:
            calibrate_batchnorm(source.model, [x])
            done = {"batchnorm": f"statistics calibrated on {where}, so that the net fires"}
        elif not _silent(source.model, x, *_judged_inputs(source)):
            functional.reset_net(source.model)  # it answers the data and the reference inputs
            return {"weights": "in memory, no checkpoint", "batchnorm": "none to calibrate"}
        else:
            scaled = scale_to_fire(source.model, x)
            done = {"batchnorm": "none to calibrate",
                    "weights_scaled": f"{scaled} layers feeding a spiking neuron scaled on "
                                      f"{where} (input spread 2, twice the threshold), so that "
                                      f"the net fires"}
    functional.reset_net(source.model)
    return {"weights": "untrained (random initialisation)", **done}


def save_reference(path: str | Path, reference: Reference) -> Path:
    return save_arrays(path, reference.inputs, reference.outputs)


def load_reference(path: str | Path) -> Reference:
    inputs, outputs = load_arrays(path)
    if not outputs:
        raise UsageError(f"{path}: no reference outputs ('{OUTPUT_PREFIX}<name>' arrays)")
    return Reference(inputs, outputs)


def reference_record(reference: Reference, form: GraphForm) -> dict[str, Any]:
    """What the manifest says about the reference (the file itself is hashed under ``files``)."""
    inputs = f"example inputs ({form.source.inputs.describe()}; seed {REFERENCE_SEED})"
    if form.stream is not None:
        inputs += (f"; {', '.join(form.state_names)}: the initial state carried through "
                   f"{REFERENCE_WARM_FRAMES} frames of example inputs")
    return {"file": REFERENCE_FILE, "batch": reference.batch, "inputs": inputs,
            "outputs": "PyTorch FP32 eager on CPU",
            "shapes": {**{f"{INPUT_PREFIX}{k}": list(v.shape)
                          for k, v in reference.inputs.items()},
                       **{f"{OUTPUT_PREFIX}{k}": list(v.shape)
                          for k, v in reference.outputs.items()}}}


# -- validating an artifact against its reference -------------------------------------------------

# Lower bounds on the default tolerance of reduced-precision engines (the entry's own tolerance,
# meant for FP32, applies where it is looser). Pass --atol/--rtol to judge by your own.
PRECISION_TOLERANCE = {"fp16": (1e-2, 1e-2), "int8": (1e-1, 1e-1)}


def reference_label(manifest: dict[str, Any]) -> str:
    """What an artifact's saved reference outputs are: PyTorch's, or (an imported ONNX file)
    ONNX Runtime's on the graph as written."""
    made_by = (manifest.get("reference") or {}).get("outputs", "PyTorch FP32 eager on CPU")
    return ("saved PyTorch FP32 reference" if made_by.startswith("PyTorch")
            else f"saved reference ({made_by})")


def default_tolerance(manifest: dict[str, Any],
                      precision: str | None = None) -> tuple[float, float, str]:
    """(atol, rtol, why): the export's own tolerance, widened for fp16 / int8 engines."""
    from edgekit.registry import ExportSettings

    validation = ((manifest.get("onnx") or manifest.get("fp32") or {}).get("validation")
                  or manifest.get("validation") or {})
    outputs = validation.get("outputs") or [{}]
    atol = float(outputs[0].get("atol", ExportSettings.atol))
    rtol = float(outputs[0].get("rtol", ExportSettings.rtol))
    precision = precision or (manifest.get("tensorrt") or {}).get("precision", "fp32")
    if precision in PRECISION_TOLERANCE:
        floor_atol, floor_rtol = PRECISION_TOLERANCE[precision]
        return max(atol, floor_atol), max(rtol, floor_rtol), f"default for {precision}"
    return atol, rtol, "the export's tolerance"
