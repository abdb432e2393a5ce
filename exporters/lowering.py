"""Lowerings: nodes a model's trace emits in edgekit's own ONNX domain, rewritten into standard
ONNX operators before the graph is simplified and checked.

torch.onnx traces a Python loop into one group of nodes per step. A method that wants an ONNX
control-flow operator instead (a ``Scan`` over packets) marks the region with a
``torch.autograd.Function`` whose ``symbolic`` emits ``edgekit::OpType``, and registers here how
to spell that node in standard ONNX. Nothing outside edgekit ever sees the domain: export fails
on a node that no lowering claims.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgekit.errors import CheckFailed

DOMAIN = "edgekit"

# lower(node, prefix) -> (nodes, initializers) in standard ONNX that compute node's outputs from
# its inputs; every new name starts with ``prefix``, unique to the node.
Lowering = Callable[[Any, str], tuple[list[Any], list[Any]]]
_LOWERINGS: dict[str, Lowering] = {}


def register_lowering(op_type: str, lower: Lowering) -> None:
    """How ``edgekit::op_type`` is written in standard ONNX (a module registers on import)."""
    _LOWERINGS[op_type] = lower


def lower_custom_ops(model: Any) -> int:
    """Rewrite every ``edgekit``-domain node of ``model`` (an ``onnx.ModelProto``) in place;
    returns how many there were. Raises CheckFailed for one no lowering is registered for."""
    graph = model.graph
    if not any(node.domain == DOMAIN for node in graph.node):
        return 0
    nodes, count = [], 0
    for node in graph.node:
        if node.domain != DOMAIN:
            nodes.append(node)
            continue
        lower = _LOWERINGS.get(node.op_type)
        if lower is None:
            raise CheckFailed(f"the exported graph holds {DOMAIN}::{node.op_type}, which no "
                              f"lowering rewrites into standard ONNX")
        new_nodes, initializers = lower(node, f"{DOMAIN}_{node.op_type}_{count}/")
        nodes.extend(new_nodes)
        graph.initializer.extend(initializers)
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    standard = [o for o in model.opset_import if o.domain != DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(standard)
    return count
