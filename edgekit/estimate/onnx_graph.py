"""Layers of an ONNX graph: one row per node, tensor sizes from ``onnx.shape_inference``.

The graph's inputs are fixed at the concrete shapes of the input spec first, so symbolic
dimensions resolve. FLOPs are counted for the common ops only: Conv and ConvTranspose (2 per
multiply-accumulate), MatMul and Gemm (2 M N K), and element-wise ops (1 per output element,
which torch's counter leaves at 0). Pure data movement (Reshape, Gather, Concat, ...) counts 0
FLOPs; any other op type counts 0 and is listed as not counted. Initialisers and Constant
nodes are weights; a Gather from an initialiser reads the rows it returns.
"""
from __future__ import annotations

import math
from pathlib import Path

import onnx
from onnx import TensorProto, helper, shape_inference

from edgekit.errors import UsageError
from edgekit.estimate.layers import Analysis, Footprint, Layer, Liveness
from edgekit.inputs import InputSpec

_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Neg", "Abs", "Erf",
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip", "Gelu",
    "Max", "Min", "Where", "Sin", "Cos", "Mish", "Softplus", "Elu", "Selu"})
MOVEMENT = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Shape", "Gather",
    "GatherElements", "Concat", "Slice", "Split", "Expand", "Cast", "Constant", "ConstantOfShape",
    "Range", "Pad", "Tile", "Equal", "Less", "Greater", "Not", "And", "Or", "Size",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
_ALIASES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})  # no copy
_GATHERS = frozenset({"Gather", "GatherElements"})
FLOP_RULE = ("Conv/ConvTranspose: 2 x output (input) elements x weight elements per output "
             "channel; MatMul/Gemm: 2 M N K; element-wise: 1 per output element; data movement 0")


def _fixed_inputs(model: onnx.ModelProto, spec: InputSpec, batch: int) -> None:
    """Give the graph's inputs the spec's concrete shapes, so shape inference resolves them."""
    fields = {f.name: f for f in spec.fields}
    for value in model.graph.input:
        if value.name in fields:
            shape = value.type.tensor_type.shape
            shape.ClearField("dim")
            for size in fields[value.name].shape_at(batch):
                shape.dim.add().dim_value = size


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...] | None, int]]:
    """name -> (dims, or None where inference left one unknown; element type)."""
    graph = model.graph
    known: dict[str, tuple[tuple[int, ...] | None, int]] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        known[value.name] = (None if -1 in dims or not tensor.HasField("shape") else dims,
                             tensor.elem_type)
    for init in graph.initializer:
        known[init.name] = (tuple(init.dims), init.data_type)
    return known


def _footprint(entry: tuple[tuple[int, ...] | None, int] | None) -> Footprint | None:
    if entry is None or entry[0] is None:
        return None
    dims, elem = entry
    count = math.prod(dims)
    if elem in _FLOAT_TYPES:
        return Footprint(floats=count)
    return Footprint(fixed=count * helper.tensor_dtype_to_np_dtype(elem).itemsize)


def _flops(node: onnx.NodeProto, dims: dict[str, tuple[int, ...] | None]) -> int | None:
    """FLOPs of ``node``; None where its op is not counted or a shape is unknown."""
    op = node.op_type
    out = dims.get(node.output[0]) if node.output else None
    first = dims.get(node.input[0]) if node.input else None
    if op in MOVEMENT:
        return 0
    if out is None:
        return None
    if op in ELEMENTWISE:
        return math.prod(out)
    if op == "Conv" and (weight := dims.get(node.input[1])):
        return 2 * math.prod(out) * math.prod(weight[1:])
    if op == "ConvTranspose" and first and (weight := dims.get(node.input[1])):
        return 2 * math.prod(first) * math.prod(weight[1:])
    if op == "MatMul" and first:
        return 2 * math.prod(out) * first[-1]
    if op == "Gemm" and first:
        trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
        return 2 * math.prod(out) * first[0 if trans_a else 1]
    return None


def analyse_onnx(path: str | Path, spec: InputSpec, batch: int, name: str) -> Analysis:
    """Read the layers of the ONNX file at ``path`` with its inputs at ``spec``'s shapes."""
    try:
        model = onnx.load(str(path), load_external_data=False)
        _fixed_inputs(model, spec, batch)
        model = shape_inference.infer_shapes(model, data_prop=True)
    except (OSError, onnx.onnx_cpp2py_export.checker.ValidationError,
            onnx.onnx_cpp2py_export.shape_inference.InferenceError) as exc:
        raise UsageError(f"{path}: shape inference failed: {' '.join(str(exc).split())[:200]}",
                         hint="check the file with onnx.checker, or give --input shapes") from exc
    known = _shapes(model)
    dims = {key: entry[0] for key, entry in known.items()}
    weights = {init.name for init in model.graph.initializer}
    weights |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    liveness, alias = Liveness(), {}
    for value in model.graph.input:
        if value.name not in weights and (size := _footprint(known.get(value.name))):
            liveness.make(value.name, size, 0)
    layers, uncounted, unsized = [], {}, 0
    nodes = list(model.graph.node)
    for step, node in enumerate(nodes):
        layer = Layer(node.name or f"{node.op_type}_{step}", node.op_type, ops=1)
        flops = _flops(node, dims)
        if flops is None:
            uncounted[node.op_type] = uncounted.get(node.op_type, 0) + 1
        layer.flops = flops or 0
        outputs = [o for o in node.output if o]
        out_size = sum((_footprint(known.get(o)) or Footprint() for o in outputs), Footprint())
        for name_in in (i for i in node.input if i):
            key = alias.get(name_in, name_in)
            liveness.read(key, step)
            size = _footprint(known.get(name_in))
            unsized += size is None
            if node.op_type in _ALIASES or node.op_type == "Shape" or size is None:
                continue
            if name_in in weights:
                layer.weights += out_size if node.op_type in _GATHERS else size
            else:
                layer.activations += size
        if node.op_type in _ALIASES and node.input and node.input[0] not in weights:
            alias.update({o: alias.get(node.input[0], node.input[0]) for o in outputs})
        elif node.op_type != "Constant":
            layer.activations += out_size
            for output in outputs:
                if size := _footprint(known.get(output)):
                    liveness.make(output, size, step)
        layers.append(layer)
    steps = max(len(nodes), 1)
    for value in model.graph.output:
        liveness.keep(alias.get(value.name, value.name), steps - 1)
    if unsized:
        uncounted["(tensors of unknown shape, 0 bytes)"] = unsized
    total = sum((_footprint(known.get(w)) or Footprint() for w in weights), Footprint())
    return Analysis(name=name, method="onnx: one row per node, sizes from onnx.shape_inference",
                    flop_rule=FLOP_RULE, layers=tuple(layers), weights=total,
                    live=liveness.timeline(steps), uncounted=uncounted)
