"""What carrying WiFi-Mamba's memory costs on ONNX Runtime, and whether a long stream drifts.

``edgekit export wifi-mamba --stream`` exports the streaming step (the SSM memory as an input,
the next memory as an output), which a deployment runs frame after frame. Two questions:

1. **Latency**: the stream graph (feeding each call's ``memory_out`` back) against the
   one-frame graph (a fresh memory every call), on ONNX Runtime (CPU provider, one thread), and
   the same two on eager torch (``forward_stream`` against ``forward``), at the dataset's 20
   packets; in each round the two forms alternate call by call (``common.alternating_rounds``),
   so the host's changes of speed reach both alike.
2. **Drift**: a stream of ``--frames`` frames through ONNX Runtime, its own memory fed back,
   against ``forward_stream`` in PyTorch: the largest pose error at each frame, so errors that
   grow with the stream's length would show (the export's own check runs 8 frames). The model
   is made sensitive to its memory (memory gate near 1, state tokens scaled up), as in
   tests/test_stream_export.py; the gap between the streamed poses and fresh-memory poses is
   reported beside it.

    python benchmarks/wifi_mamba_stream.py [--rounds 7] [--calls 300] [--frames 200]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from common import alternating_rounds, markdown_table, median, write_result

from edgekit.backends.onnxruntime_backend import make_session
from edgekit.exporters.onnx import OnnxOptions, export_onnx
from edgekit.registry import create_model, get_entry
from edgekit.targets import registry_source


def sensitive_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = create_model("wifi-mamba").eval()
    with torch.no_grad():
        for block in model.blocks:
            block.memory_gate.fill_(4.0)
        model.state_tokens.weight.mul_(100.0)
    return model


def frames(count: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(123)
    return [torch.rand(1, 2, 270, 20, generator=gen) for _ in range(count)]


def latency_groups(frame_path: Path, stream_path: Path, model: torch.nn.Module) -> list[dict]:
    x = frames(1)[0]
    feed = {"input": x.numpy()}
    frame_session = make_session(frame_path, threads=1)
    stream_session = make_session(stream_path, threads=1)
    state = {"ort": model.initial_memory(1).numpy(), "torch": None}

    def ort_stream() -> None:
        *_, state["ort"] = stream_session.run(None, {**feed, "memory": state["ort"]})

    def torch_stream() -> None:
        *_, state["torch"] = model.forward_stream(x, state["torch"])

    return [{"onnxruntime frame": lambda: frame_session.run(None, feed),
             "onnxruntime stream": ort_stream},
            {"torch frame": lambda: model(x), "torch stream": torch_stream}]


@torch.inference_mode()
def drift(stream_path: Path, model: torch.nn.Module, count: int) -> dict:
    session = make_session(stream_path, threads=1)
    memory_ort, memory_torch = model.initial_memory(1).numpy(), None
    errors, gaps = [], []
    for x in frames(count):
        poses_ort, _, memory_ort = session.run(None, {"input": x.numpy(), "memory": memory_ort})
        poses, _, memory_torch = model.forward_stream(x, memory_torch)
        errors.append(float(np.abs(poses_ort - poses.numpy()).max()))
        gaps.append(float((poses - model(x)[0]).abs().max()))
    return {"frames": count, "max_abs_pose_error_per_frame": errors,
            "max_abs_pose_error": max(errors),
            "first_10_max": max(errors[:10]), "last_10_max": max(errors[-10:]),
            "memory_effect_max_abs_per_frame": gaps,
            "memory_effect_min_after_first": min(gaps[1:]) if len(gaps) > 1 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="calls of each case per round")
    parser.add_argument("--frames", type=int, default=200, help="frames of the drift stream")
    args = parser.parse_args()
    if args.rounds < 1 or args.calls < 1 or args.frames < 2:
        parser.error("--rounds and --calls must be at least 1 and --frames at least 2")
    torch.set_num_threads(1)
    model = sensitive_model()
    source = registry_source(get_entry("wifi-mamba"), None, model)
    with tempfile.TemporaryDirectory() as tmp:
        frame = export_onnx(source, Path(tmp) / "frame").folder / "model.onnx"
        stream = export_onnx(source, Path(tmp) / "stream",
                             OnnxOptions(stream=True)).folder / "model.onnx"
        found = drift(stream, model, args.frames)
        samples, loads = alternating_rounds(latency_groups(frame, stream, model), args.rounds,
                                            args.calls)

    def per_round(num: str, den: str) -> list[float]:
        return [a / b for a, b in zip(samples[num], samples[den], strict=True)]

    ratios = {backend: per_round(f"{backend} stream", f"{backend} frame")
              for backend in ("onnxruntime", "torch")}
    rows = [[backend, f"{median(samples[f'{backend} frame']) * 1e3:.3f}",
             f"{median(samples[f'{backend} stream']) * 1e3:.3f}",
             f"{median(r):.3f} ({min(r):.3f}-{max(r):.3f})"] for backend, r in ratios.items()]
    table = markdown_table(["backend", "frame ms", "stream ms", "stream / frame (range)"], rows)
    print(table)
    print(f"drift over {found['frames']} frames: max abs pose error "
          f"{found['max_abs_pose_error']:.2e} (first 10 frames {found['first_10_max']:.2e}, "
          f"last 10 {found['last_10_max']:.2e}); the memory moves the poses by at least "
          f"{found['memory_effect_min_after_first']:.2e} after the first frame")
    write_result("wifi_mamba_stream", {
        "settings": {**vars(args), "threads": 1, "packets": 20,
                     "provider": "CPUExecutionProvider"},
        "load_1min_per_round": loads,
        "ms_rounds": {k: [s * 1e3 for s in v] for k, v in samples.items()},
        "ms": {k: median(v) * 1e3 for k, v in samples.items()},
        "stream_over_frame": {k: {"median": median(r), "min": min(r), "max": max(r),
                                  "rounds": r} for k, r in ratios.items()},
        "table": table, "drift": found,
    })


if __name__ == "__main__":
    main()
