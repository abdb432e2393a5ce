"""``edgekit export --to loihi2``: lowering, Loihi 2's integer rules against Lava, the check."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import nir
import numpy as np
import pytest
import torch
from scipy import sparse

from edgekit.data import load_dataset
from edgekit.errors import CheckFailed, UsageError
from edgekit.exporters.nir import DEFAULT_DT
from edgekit.neuromorphic import loihi2_rules as rules
from edgekit.neuromorphic.loihi2_check import check, float_run
from edgekit.neuromorphic.loihi2_export import (
    Loihi2CheckFailed,
    chip_graph,
    export_loihi2,
    read_chip,
)
from edgekit.neuromorphic.loihi2_quantize import (
    ChipLayer,
    ChipNet,
    ChipNeurons,
    InputFormat,
    quantize,
)
from edgekit.neuromorphic.loihi2_sim import run_chip
from edgekit.neuromorphic.lowering import lower_graph, nir_graph_of
from edgekit.targets import resolve_target

pytestmark = pytest.mark.usefixtures("single_thread")
LAVA = importlib.util.find_spec("lava") is not None
LAVA_MISSING = "Lava (lava-nc 0.10) is not installed: it declares Python < 3.11; " \
    "docs/neuromorphic.md says how to install it in a venv of its own to run this check"
if LAVA:  # Lava sets multiprocessing's start method on import, which fails once anything has
    try:  # fixed it (a test that ran before): import it while this module is collected
        import lava.magma.core.process.process  # noqa: F401
    except RuntimeError as exc:
        LAVA, LAVA_MISSING = False, f"Lava does not import here: {exc}"
SAMPLES = 48
TRAINED = Path(__file__).parent / "data" / "spiking-cnn-digits.safetensors"


@pytest.fixture(scope="module")
def cnn():
    """A trained spiking-cnn (``edgekit train spiking-cnn``: seed 0, 40 epochs, 97.22 % on the
    360 digits test samples), lowered, and digits."""
    source = resolve_target(str(TRAINED))
    net = lower_graph(nir_graph_of(source, DEFAULT_DT), DEFAULT_DT)
    return source, net, load_dataset(source.task)


def test_lowering_is_the_float_net(cnn):
    """The lowered layers, run in float64 with NIR's per-step update, give PyTorch's spikes."""
    source, net, digits = cnn
    x = digits.x_test[:SAMPLES]
    logits, torch_spikes = float_run(source.model, x)
    inp = np.repeat(x.reshape(1, len(x), -1).astype(np.float64), source.model.T, 0)
    spikes = []
    for layer in net.layers:
        current = inp @ layer.matrix.T.toarray() + layer.bias
        if layer.neurons is None:
            break
        v, fired = np.zeros(current.shape[1:]), []
        for t in range(len(current)):
            v = (1 - layer.neurons.decay) * v + layer.neurons.gain * current[t]
            fired.append(v >= layer.neurons.threshold)
            v[fired[-1]] = 0
        inp = np.stack(fired).astype(np.float64)
        spikes.append(np.stack(fired))
    assert [layer.matrix.shape for layer in net.layers] == [(1024, 64), (512, 1024), (64, 512),
                                                            (10, 64)]
    assert all(np.array_equal(a, b) for a, b in zip(spikes, torch_spikes, strict=True))
    np.testing.assert_allclose(current.sum(0), logits, atol=1e-4)


def test_rules_restate_lavas_arithmetic():
    """Rounding towards zero in decays, floor in negative exponents, wrap and saturation."""
    assert rules.decay(np.array([-7, 7]), 2048).tolist() == [-3, 3]
    assert rules.scale_by_exponent(np.array([-7, 7]), -1).tolist() == [-4, 3]
    assert rules.truncate_weights(np.array([-3, 3, 300, -300])).tolist() == [-4, 2, 254, -256]
    assert rules.wrap_current(np.array([2**23 + 5, -(2**23) - 5])).tolist() == [
        -(2**23) + 5, 2**23 - 5]
    assert rules.voltage_update(np.array([2**23 - 1]), np.array([2**23 - 1]), 0).tolist() == [
        2**23 - 1]
    u, v, fired = rules.lif_step(np.zeros(2, np.int64), np.zeros(2, np.int64),
                                 np.array([10, 11]), du=4095, dv=2048, vth=10)
    assert u.tolist() == [640, 704] and fired.tolist() == [False, True] and v.tolist() == [640, 0]


def test_quantised_formats_and_the_written_file(cnn, tmp_path):
    source, net, digits = cnn
    chip = quantize(net, digits.x_train[:64])
    assert chip.input_format == InputFormat(0.0, 1.0 / 255)
    for layer in chip.layers:
        values = np.concatenate([layer.weights.data, layer.bias])
        assert values.min() >= -256 and values.max() <= 254 and not np.any(values % 2)
        if layer.neurons is not None:
            assert (layer.neurons.du, layer.neurons.dv) == (4095, 2048)
            assert 2**9 <= layer.neurons.vth <= 2**12
    result = export_loihi2(source, tmp_path / "art", calib_samples=64)
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["format"] == "loihi2" and manifest["validation"]["passed"]
    assert manifest["files"]["model.nir"]["sha256"] and manifest["manifest_sha256"]
    assert [layer["weight_exp"] for layer in manifest["layers"]] == [
        layer.exponent for layer in chip.layers]
    written = read_chip(tmp_path / "art" / "model.nir")
    assert all((w.weights != c.weights).nnz == 0 and np.array_equal(w.bias, c.bias)
               for w, c in zip(written.layers, chip.layers, strict=True))
    assert result.validation.agreement > 0.95
    odd = dataclasses.replace(chip.layers[1], bias=chip.layers[1].bias + 1)
    nir.write(str(tmp_path / "odd.nir"), chip_graph(ChipNet(
        chip.input_format, chip.input_shape, (chip.layers[0], odd, *chip.layers[2:])),
        DEFAULT_DT))
    with pytest.raises(CheckFailed, match="synapse_1 bias: 512 odd mantissas"):
        read_chip(tmp_path / "odd.nir")


def test_the_check_fails_on_a_wrong_decay_and_on_odd_weights(cnn):
    """dv = 0 (no leak instead of 0.5) fails the check; odd mantissas lower the agreement."""
    source, net, digits = cnn
    chip = quantize(net, digits.x_train[:64])
    x, y = digits.x_test[:SAMPLES], digits.y_test[:SAMPLES]
    good, _ = check(source.model, chip, x, y, "test")
    assert good.passed, good.failures

    def wrong_decay(layer: ChipLayer) -> ChipLayer:
        if layer.neurons is None:
            return layer
        return dataclasses.replace(layer, neurons=dataclasses.replace(layer.neurons, dv=0))

    decayed, _ = check(source.model, ChipNet(chip.input_format, chip.input_shape,
                                             tuple(map(wrong_decay, chip.layers))), x, y, "test")
    assert not decayed.passed and "spike agreement" in decayed.failures[0]

    def odd(layer: ChipLayer) -> ChipLayer:  # +1: the synapse drops it again, -1 goes down by 2
        weights = layer.weights.copy()
        weights.data = weights.data - 1
        return dataclasses.replace(layer, weights=weights)

    odd_chip = ChipNet(chip.input_format, chip.input_shape, (odd(chip.layers[0]),
                                                             *chip.layers[1:]))
    skewed, _ = check(source.model, odd_chip, x, y, "test")
    assert skewed.agreement < good.agreement


def test_export_refuses_a_non_spiking_net_and_a_silent_one_leaves_nothing(cnn, tmp_path):
    with pytest.raises(UsageError, match="not a spiking net"):
        export_loihi2(resolve_target("mlp:small"), tmp_path / "mlp")
    source, _, _ = cnn
    layer = source.model.body[0]
    saved = layer.weight.detach().clone()
    with torch.no_grad():
        layer.weight.mul_(1e-3)  # the first layer stays below threshold: nothing fires
    try:
        with pytest.raises(Loihi2CheckFailed, match="never fires"):
            export_loihi2(source, tmp_path / "silent", calib_samples=32)
    finally:
        with torch.no_grad():
            layer.weight.copy_(saved)
    assert not (tmp_path / "silent").exists()


def _lava_run(chip: ChipNet, q: np.ndarray, T: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The chip's net as Lava processes, run bit-accurately (fixed_pt), one sample: the graded
    input (a RingBuffer) with a constant channel, the first layer's relay; per layer a Dense of
    the weights and a Dense of the bias column fed by the relay, then a LIF; the relays are a
    chain of always-on LIFs (each fed by the one before with a weight far above its threshold),
    delayed like the spikes. Returns per layer its spikes and v (T, neurons), or, for a readout,
    the summed synaptic output twice (T, outputs), re-aligned for the step each Dense adds."""
    from lava.magma.core.run_conditions import RunSteps
    from lava.magma.core.run_configs import Loihi2SimCfg
    from lava.proc.dense.process import Dense
    from lava.proc.io.sink import RingBuffer as Sink
    from lava.proc.io.source import RingBuffer as Source
    from lava.proc.lif.process import LIF
    from lava.proc.monitor.process import Monitor

    steps = T + len(chip.layers) + 1
    width = q.size
    data = np.zeros((width + 1, steps), dtype=np.int32)
    data[:, :T] = np.append(q.reshape(-1), chip.layers[0].relay)[:, None]
    source = Source(data=data)
    spikes, relay, probes = source.s_out, None, []
    for k, layer in enumerate(chip.layers):
        weights, outputs = layer.weights.toarray(), layer.weights.shape[0]
        if k == 0:  # the input and its relay channel share the graded port
            synapses = [(Dense(weights=np.hstack([weights, layer.bias[:, None]]),
                               weight_exp=layer.exponent, num_message_bits=8), spikes)]
        else:
            synapses = [(Dense(weights=weights, weight_exp=layer.exponent), spikes),
                        (Dense(weights=layer.bias[:, None], weight_exp=layer.exponent), relay)]
        for dense, port in synapses:
            port.connect(dense.s_in)
        if layer.neurons is None:
            sinks = [Sink(shape=(outputs,), buffer=steps) for _ in synapses]
            for (dense, _), sink in zip(synapses, sinks, strict=True):
                dense.a_out.connect(sink.a_in)
            probes.append(("readout", sinks, None))
            break
        n = layer.neurons
        lif = LIF(shape=(outputs,), du=n.du, dv=n.dv, vth=n.vth, bias_mant=0)
        for dense, _ in synapses:
            dense.a_out.connect(lif.a_in)
        sink, monitor = Sink(shape=(outputs,), buffer=steps), Monitor()
        lif.s_out.connect(sink.a_in)
        monitor.probe(lif.v, steps)
        probes.append((lif.name, [sink], monitor))
        always = LIF(shape=(1,), du=4095, dv=0, vth=1, bias_mant=0)  # fires every step fed
        if k == 0:
            feed = Dense(weights=np.hstack([np.zeros((1, width), int), [[254]]]),
                         num_message_bits=8)
            source.s_out.connect(feed.s_in)
        else:
            feed = Dense(weights=np.array([[254]]))
            relay.connect(feed.s_in)
        feed.a_out.connect(always.a_in)
        spikes, relay = lif.s_out, always.s_out
    source.run(condition=RunSteps(num_steps=steps), run_cfg=Loihi2SimCfg(select_tag="fixed_pt"))
    try:
        out = []
        for k, (name, sinks, monitor) in enumerate(probes):
            window = slice(k + 1, k + 1 + T)
            if monitor is None:
                total = sum(sink.data.get() for sink in sinks)[:, window].T
                out.append((total, total))
            else:
                out.append((sinks[0].data.get()[:, window].T.astype(bool),
                            np.asarray(monitor.get_data()[name]["v"])[window]))
        return out
    finally:
        source.stop()


@pytest.mark.skipif(not LAVA, reason=LAVA_MISSING)
def test_the_simulation_is_lavas_bit_accurate_loihi2():
    """Random integer nets of two LIF layers (biases on relays, weight exponents -3, 0 and 1,
    random du, dv, vth): edgekit's simulation and Lava's PyDenseModelBitAcc + PyLifModelBitAcc
    give the same spikes and the same v at every step."""
    rng = np.random.default_rng(0)
    T = 12
    for trial in range(3):
        sizes = (20, 30, 16)
        layers = []
        for k in range(2):
            weights = 2 * rng.integers(-128, 128, size=(sizes[k + 1], sizes[k]))
            bias = 2 * rng.integers(-40, 60, size=sizes[k + 1])
            neurons = ChipNeurons(int(rng.integers(3000, 4096)), int(rng.integers(0, 4096)),
                                  int(rng.integers(200, 3000)))
            layers.append(ChipLayer(f"layer{k}", sparse.csr_matrix(weights), bias,
                                    255 if k == 0 else 1,
                                    [-3, 0, 1][trial] if k == 0 else 0, 1.0, neurons,
                                    f"lif{k}", (sizes[k + 1],)))
        chip = ChipNet(InputFormat(0.0, 1.0), (sizes[0],), tuple(layers))
        q = rng.integers(0, 256, size=(1, sizes[0]))
        ours = run_chip(chip, q, T, record_voltages=True).traces
        lava = _lava_run(chip, q[0], T)
        assert sum(int(t.spikes.sum()) for t in ours) > 0
        assert any(np.any(t.voltages < 0) for t in ours)  # the decay's rounding of negatives
        for mine, (spikes, voltages) in zip(ours, lava, strict=True):
            np.testing.assert_array_equal(mine.spikes[:, 0, :], spikes)
            np.testing.assert_array_equal(mine.voltages[:, 0, :], voltages)


def test_cli_exports_and_refuses_in_one_line(tmp_path):
    from click.testing import CliRunner

    from edgekit.cli import cli

    def run(*args: str):
        return CliRunner().invoke(cli, ["export", *args], env={"COLUMNS": "200"})

    made = run(str(TRAINED), "--to", "loihi2", "--calib-samples", "32", "-o",
               str(tmp_path / "art"))
    assert made.exit_code == 0, made.stderr
    assert "[✓] spikes:" in made.stdout and "loihi2: " in made.stdout
    assert json.loads((tmp_path / "art" / "manifest.json").read_text())["format"] == "loihi2"
    for args, message in (
            (("mlp:small", "--to", "loihi2"), "mlp:small is not a spiking net"),
            (("spiking-cnn", "--to", "loihi2", "--opset", "18"), "--opset"),
            (("spiking-cnn", "--to", "loihi2", "--precision", "int8"), "--precision applies")):
        refused = run(*args, "-o", str(tmp_path / "no"))
        assert refused.exit_code == 2 and message in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not LAVA, reason=LAVA_MISSING)
def test_the_exported_spiking_cnn_runs_alike_in_lava(cnn, tmp_path):
    """The trained spiking-cnn's file, read back, in Lava (convolutions as Dense matrices,
    relays, readout): every spike, every v and the readout equal edgekit's, on two test samples
    (EDGEKIT_LAVA_SAMPLES=360 runs all of them, about a second each)."""
    source, _, digits = cnn
    export_loihi2(source, tmp_path / "art", calib_samples=64)
    chip = read_chip(tmp_path / "art" / "model.nir")
    q = chip.input_format.encode(digits.x_test[:int(os.environ.get("EDGEKIT_LAVA_SAMPLES", 2))])
    ours = run_chip(chip, q, source.model.T, record_voltages=True).traces
    for i in range(len(q)):
        lava = _lava_run(chip, q[i], source.model.T)
        for mine, (first, second) in zip(ours, lava, strict=True):
            if mine.spikes is None:
                np.testing.assert_array_equal(mine.output[:, i, :], first)
            else:
                np.testing.assert_array_equal(mine.spikes[:, i, :], first)
                np.testing.assert_array_equal(mine.voltages[:, i, :], second)
