"""What an ONNX export traces: the model's one-call form, or its streaming step (``--stream``).

A model that carries state between calls (WiFi-Mamba's persistent SSM memory) runs in PyTorch
frame after frame with its state fed back. Its one-call graph starts every frame from a fresh
state, so a deployment of it loses the memory. The streaming form exports the entry's
``StreamSpec.step`` instead: the state is a graph input and the next state a graph output, and
the runtime carries it between calls. Both forms are validated the same way. A stream is
validated as a chain of frames in which each runtime is fed its own previous state, so state
errors that grow over the frames are checked too, not only one call.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.registry import StreamSpec
from edgekit.targets import ModelSource

# Frames the state of a stream's reference input has been carried through (from the initial
# state), so that a saved reference, and every engine judged against it, exercises the memory.
REFERENCE_WARM_FRAMES = 2
# Frames of one validation chain of a stream (the first from the initial state).
STREAM_VALIDATION_FRAMES = 8
_FRAME_SEED_STRIDE = 7919  # example-input seeds of successive frames: seed, seed + stride, ...


@dataclass(frozen=True)
class GraphForm:
    """The module an export traces, with its graph's input and output names."""

    module: nn.Module
    input_names: list[str]
    output_names: list[str]
    source: ModelSource
    stream: StreamSpec | None = None

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.stream.state_names if self.stream else ()

    @property
    def next_names(self) -> tuple[str, ...]:
        return self.stream.next_names if self.stream else ()

    def frame(self, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
        """The model's own example inputs (without any state)."""
        return self.source.example_inputs(batch=batch, seed=seed)

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        return self.stream.initial_state(self.source.model, batch) if self.stream else ()

    @torch.inference_mode()
    def run(self, inputs: Sequence[torch.Tensor]) -> dict[str, np.ndarray]:
        """PyTorch FP32 eager outputs by graph output name (the next state included)."""
        out = self.module.eval()(*inputs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return {name: o.detach().float().cpu().numpy()
                for name, o in zip(self.output_names, outs, strict=False)}

    def example_inputs(self, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
        """Example inputs of the graph: a stream's state is the initial state carried through
        ``REFERENCE_WARM_FRAMES`` frames of example inputs, so it is not the trivial one."""
        x = self.frame(batch, seed)
        if self.stream is None:
            return x
        state = self.initial_state(batch)
        for k in range(1, REFERENCE_WARM_FRAMES + 1):
            out = self.run((*self.frame(batch, seed + k * _FRAME_SEED_STRIDE), *state))
            state = tuple(torch.from_numpy(out[n]) for n in self.next_names)
        return (*x, *state)

    def feed(self, inputs: Sequence[torch.Tensor]) -> dict[str, np.ndarray]:
        return {n: t.numpy() for n, t in zip(self.input_names, inputs, strict=True)}

    def chain(self, batch: int, seed: int, frames: int,
              infer: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
              ) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
        """Run a stream of ``frames`` frames from the initial state through ``infer`` (a
        runtime) and through PyTorch, each fed its own previous state; returns both lists of
        per-frame outputs (runtime's, PyTorch's)."""
        if self.stream is None:
            raise UsageError("only a streaming export carries state between frames")
        runtime_state = torch_state = tuple(t.numpy() for t in self.initial_state(batch))
        actual, reference = [], []
        for k in range(frames):
            x = tuple(t.numpy() for t in self.frame(batch, seed + k * _FRAME_SEED_STRIDE))
            runtime_out = infer(dict(zip(self.input_names, (*x, *runtime_state), strict=True)))
            torch_out = self.run(tuple(torch.from_numpy(a) for a in (*x, *torch_state)))
            actual.append(runtime_out)
            reference.append(torch_out)
            runtime_state = tuple(runtime_out[n] for n in self.next_names)
            torch_state = tuple(torch_out[n] for n in self.next_names)
        return actual, reference

    def record(self) -> dict | None:
        """The manifest's ``stream`` record (None for the one-call form)."""
        if self.stream is None:
            return None
        return {"state": [{"input": i, "output": o}
                          for i, o in zip(self.state_names, self.next_names, strict=True)],
                "description": self.stream.description,
                "usage": "feed each call's outputs " + ", ".join(self.next_names)
                         + " to the next call's inputs " + ", ".join(self.state_names)}


def graph_form(source: ModelSource, stream: bool = False) -> GraphForm:
    """The form of ``source`` an export traces; ``stream`` asks for the streaming step."""
    if not stream:
        return GraphForm(source.model, source.inputs.names, list(source.output_names), source)
    spec = source.stream
    if spec is None:
        from edgekit.registry import list_models

        have = [e.name for e in list_models() if e.stream is not None]
        raise UsageError(f"{source.name} carries no state between calls, so it has no "
                         f"streaming form to export",
                         hint=f"--stream applies to {', '.join(have) or 'no built-in model'}")
    step = spec.step(source.model)
    return GraphForm(step, [*source.inputs.names, *spec.state_names],
                     [*source.output_names, *spec.next_names], source, spec)
