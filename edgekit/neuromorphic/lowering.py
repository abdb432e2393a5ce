"""A spiking net as a chain of synapse layers, each a sparse matrix and a bias, followed by a
neuron population (or, for the last, read out as is): the form a neuromorphic chip is given.

The net is first written as a NIR graph by SpikingJelly's exporter (``exporters/nir.py``, which
refuses every operation NIR cannot express). Between two neuron nodes, the NIR nodes (Conv2d,
Affine, Linear, AvgPool2d, SumPool2d, Flatten) are one affine map of the spikes; each map is
probed with the unit vectors and zero (``f(x) = M x + c``, so ``M = f(e_i) - f(0)``, ``c =
f(0)``), which fuses an average pool into the convolution after it, as a chip's synapses must.
A neuron node becomes its per-step update in NIR's discretisation with the graph's ``dt``
(forward Euler, as SpikingJelly's importer runs it): ``v <- (1 - decay) v + gain I`` with
``decay = dt / tau`` and ``gain = r dt / tau`` (LIF) or ``decay = 0`` and ``gain = r dt`` (IF),
firing at ``v >= v_threshold`` and resetting to 0.

Hand-written because no installable library lowers NIR to a chip's synapse matrices: Lava 0.10
and lava-dl 0.6 hold no NIR code. ``tests/test_loihi2.py`` checks that the lowered layers, run in
float, give PyTorch's spikes exactly.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy import sparse

from edgekit.errors import UsageError
from edgekit.optional import SPIKING, require

PROBE_CHUNK = 2048  # unit vectors probed at once (a chunk of an identity matrix)
_LINEAR_NODES = ("Conv2d", "Affine", "Linear", "AvgPool2d", "SumPool2d", "Flatten")


@dataclass(frozen=True)
class Neurons:
    """A population's per-step update: ``v <- (1 - decay) v + gain I``, spike at
    ``v >= threshold``, hard reset to 0."""

    kind: str  # "LIF" or "IF", the NIR node it came from
    decay: float
    gain: float
    threshold: float


@dataclass(frozen=True)
class SynapseLayer:
    """``I = matrix @ x + bias``, then ``neurons`` (None: the readout, ``I`` is the output)."""

    name: str  # the NIR nodes it was fused from, joined by '+'
    matrix: sparse.csr_matrix  # (outputs, inputs), float64
    bias: np.ndarray  # (outputs,)
    neurons: Neurons | None
    neuron_name: str | None
    output_shape: tuple[int, ...]  # per sample, before flattening


@dataclass(frozen=True)
class LoweredNet:
    input_shape: tuple[int, ...]  # per sample (C, H, W) or (features,)
    layers: tuple[SynapseLayer, ...]
    dt: float


def _pair(value: Any) -> tuple[int, int]:
    flat = np.asarray(value, dtype=np.int64).reshape(-1)
    return (int(flat[0]), int(flat[-1]))


def _node_function(node: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The batched torch function of one linear NIR node (batch first)."""
    kind = type(node).__name__
    if kind == "Conv2d":
        weight = torch.as_tensor(np.asarray(node.weight), dtype=torch.float64)
        bias = torch.as_tensor(np.asarray(node.bias), dtype=torch.float64) \
            if node.bias is not None and np.ndim(node.bias) else None
        return lambda x: F.conv2d(x, weight, bias, _pair(node.stride), _pair(node.padding),
                                  _pair(node.dilation), int(node.groups))
    if kind in ("Affine", "Linear"):
        weight = torch.as_tensor(np.asarray(node.weight), dtype=torch.float64)
        bias = torch.as_tensor(np.asarray(node.bias), dtype=torch.float64) \
            if kind == "Affine" else None
        return lambda x: F.linear(x, weight, bias)
    if kind in ("AvgPool2d", "SumPool2d"):
        kernel, stride, padding = _pair(node.kernel_size), _pair(node.stride), \
            _pair(node.padding)
        area = kernel[0] * kernel[1] if kind == "SumPool2d" else 1
        return lambda x: F.avg_pool2d(x, kernel, stride, padding,
                                      count_include_pad=True) * area
    if kind == "Flatten":
        return lambda x: torch.flatten(x, int(node.start_dim), int(node.end_dim))
    raise UsageError(f"the NIR node {kind} has no Loihi 2 synapse form",
                     hint=f"Loihi 2 export lowers {', '.join(_LINEAR_NODES)}, LIF and IF")


def _chain(graph: Any) -> list[str]:
    """The node names from the input to the output; a graph that branches is refused."""
    successors: dict[str, list[str]] = {}
    for src, dst in graph.edges:
        successors.setdefault(src, []).append(dst)
    inputs = [n for n, node in graph.nodes.items() if type(node).__name__ == "Input"]
    if len(inputs) != 1:
        raise UsageError(f"Loihi 2 export takes a net with one input; the graph has "
                         f"{len(inputs)}")
    order, name = [], inputs[0]
    while True:
        order.append(name)
        nxt = successors.get(name, [])
        if not nxt:
            break
        if len(nxt) > 1 or len(order) > len(graph.nodes):
            raise UsageError(f"Loihi 2 export takes a chain of layers; node '{name}' feeds "
                             f"{len(nxt)} nodes", hint="a residual or branching net has no "
                                                       "lowering here")
        name = nxt[0]
    return order


def _neurons(node: Any, dt: float) -> Neurons:
    kind = type(node).__name__
    if kind not in ("LIF", "IF"):
        raise UsageError(f"the NIR neuron {kind} has no Loihi 2 lowering here",
                         hint="Loihi 2 export lowers LIF and IF neurons")
    reset = np.asarray(0.0 if getattr(node, "v_reset", None) is None else node.v_reset)
    leak = np.asarray(getattr(node, "v_leak", 0.0))
    if np.any(reset != 0) or np.any(leak != 0):
        raise UsageError(f"a {kind} neuron with a reset or leak potential other than 0",
                         hint="Loihi 2's LIF resets to 0 and leaks towards 0")
    fields = {"threshold": np.asarray(node.v_threshold), "r": np.asarray(node.r)}
    if kind == "LIF":
        fields["tau"] = np.asarray(node.tau)
    for field, values in fields.items():
        if values.size and not np.all(values == values.reshape(-1)[0]):
            raise UsageError(f"a {kind} population whose {field} differs between neurons",
                             hint="Loihi 2 export takes one value per population")
    first = {k: float(v.reshape(-1)[0]) for k, v in fields.items()}
    if kind == "LIF":
        return Neurons("LIF", dt / first["tau"], first["r"] * dt / first["tau"],
                       first["threshold"])
    return Neurons("IF", 0.0, first["r"] * dt, first["threshold"])


@torch.no_grad()
def _probe(functions: list[Callable[[torch.Tensor], torch.Tensor]],
           input_shape: tuple[int, ...]) -> tuple[sparse.csr_matrix, np.ndarray, tuple[int, ...]]:
    """``M`` and ``c`` of the affine map the functions compose, on inputs of ``input_shape``."""
    def run(x: torch.Tensor) -> torch.Tensor:
        for f in functions:
            x = f(x)
        return x

    size = int(np.prod(input_shape))
    zero = run(torch.zeros((1, *input_shape), dtype=torch.float64))
    output_shape = tuple(zero.shape[1:])
    c = zero.reshape(-1).numpy()
    blocks = []
    for start in range(0, size, PROBE_CHUNK):
        stop = min(start + PROBE_CHUNK, size)
        basis = torch.zeros((stop - start, size), dtype=torch.float64)
        basis[torch.arange(stop - start), torch.arange(start, stop)] = 1.0
        columns = run(basis.reshape(-1, *input_shape)).reshape(stop - start, -1).numpy() - c
        blocks.append(sparse.csr_matrix(columns.T))
    return sparse.hstack(blocks, format="csr"), c, output_shape


def lower_graph(graph: Any, dt: float) -> LoweredNet:
    """A NIR graph of a feed-forward spiking net as synapse layers (see the module's doc)."""
    order = _chain(graph)
    nodes = graph.nodes
    input_shape = tuple(int(d) for d in np.asarray(nodes[order[0]].input_type["input"]))
    layers: list[SynapseLayer] = []
    shape, pending, names = input_shape, [], []
    for name in order[1:]:
        node = nodes[name]
        kind = type(node).__name__
        if kind in _LINEAR_NODES:
            pending.append(_node_function(node))
            names.append(name)
        elif kind == "Output":
            break
        else:
            neurons = _neurons(node, dt)
            if not pending:
                raise UsageError(f"neuron node '{name}' follows another neuron node directly",
                                 hint="each neuron population needs a synapse layer before it")
            matrix, bias, out_shape = _probe(pending, shape)
            layers.append(SynapseLayer("+".join(names), matrix, bias, neurons, name, out_shape))
            shape, pending, names = out_shape, [], []
    if pending:
        matrix, bias, out_shape = _probe(pending, shape)
        layers.append(SynapseLayer("+".join(names), matrix, bias, None, None, out_shape))
    if not any(layer.neurons is not None for layer in layers):
        raise UsageError("the net has no spiking neurons to place on Loihi 2")
    return LoweredNet(input_shape, tuple(layers), dt)


def nir_graph_of(source: Any, dt: float) -> Any:
    """SpikingJelly's NIR graph of a ``MultiStepNet`` source (refused where NIR cannot express
    an operation), made spec-conformant as ``edgekit export --to nir`` writes it."""
    from edgekit.exporters.nir import (
        TimeMajorBody,
        conform,
        example_sequence,
        nir_blockers,
        nir_refusal,
    )
    from edgekit.spiking.layers import MultiStepNet, functional

    require("nir", SPIKING, "Loihi 2 export")
    from spikingjelly.activation_based.nir_exchange import export_to_nir

    model = source.model.eval()
    if not source.spiking or not isinstance(model, MultiStepNet):
        raise UsageError(f"{source.name} is not a spiking net; Loihi 2 runs spiking nets",
                         hint="export it with --to onnx")
    blockers = nir_blockers(source)
    if blockers:
        raise nir_refusal(source.name, blockers)
    functional.reset_net(model)
    with torch.no_grad():
        nir_graph = export_to_nir(TimeMajorBody(model), example_sequence(source, 1), dt=dt)
        graph = conform(nir_graph, dt)
    functional.reset_net(model)
    return graph
