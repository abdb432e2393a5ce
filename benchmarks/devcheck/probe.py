"""What a step needs, probed once before any runs: a CUDA GPU that torch sees, NVML, Triton,
TensorRT, onnxruntime-gpu, the carried wheel folder."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

from devcheck.base import NO_GPU


def probe(python: str, wheels: Path, cpu_stand_in: bool, timeout_s: float) -> dict[str, dict]:
    """Each requirement: {"ok": bool, "detail" or "reason": str}. Cheap checks first: torch is
    imported (in a child, under a time box) only where nvidia-smi lists a GPU."""
    found: dict[str, dict] = {}
    smi = shutil.which("nvidia-smi")
    gpu_line = ""
    if smi:
        try:
            gpu_line = subprocess.run([smi, "-L"], capture_output=True, text=True,
                                      timeout=timeout_s).stdout.strip()
        except (subprocess.TimeoutExpired, OSError) as exc:
            gpu_line = f"nvidia-smi -L failed: {exc}"
    if not smi or not gpu_line.startswith("GPU"):
        found["gpu"] = {"ok": False, "reason": f"{NO_GPU}: " + (
            "nvidia-smi not found" if not smi else f"nvidia-smi lists none ({gpu_line!r})")}
    else:
        code = ("import torch, json; ok = torch.cuda.is_available(); print(json.dumps({'ok': ok,"
                " 'torch': torch.__version__, 'cuda': torch.version.cuda, 'name': "
                "torch.cuda.get_device_name(0) if ok else None}))")
        try:
            done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                                  timeout=timeout_s)
            info = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 \
                else {"ok": False, "error": done.stderr.strip()[-300:]}
        except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError) as exc:
            info = {"ok": False, "error": str(exc)}
        found["gpu"] = ({"ok": True, "detail": f"{gpu_line}; torch {info['torch']} CUDA "
                                               f"{info['cuda']}"} if info["ok"] else
                        {"ok": False, "reason": f"{NO_GPU}: torch sees none "
                                                f"({info.get('error') or 'a CPU build of torch'})"})
    if cpu_stand_in and not found["gpu"]["ok"]:
        found["gpu"] = {"ok": True, "detail": "the CPU stands in for the GPU (--cpu-stand-in): "
                                              + found["gpu"]["reason"]}
    found["nvml"] = _nvml()
    has_gpu = found["gpu"]["ok"] and not cpu_stand_in
    found["triton"] = (
        {"ok": False, "reason": "Triton is not installed"} if not _has_module("triton")
        else {"ok": has_gpu, **({"detail": f"triton {_version('triton')}"} if has_gpu else
                                {"reason": "Triton kernels need a CUDA GPU"})})
    found["tensorrt"] = (
        {"ok": True, "detail": f"tensorrt {_version('tensorrt')}"} if _has_module("tensorrt")
        else {"ok": False, "reason": "TensorRT is not installed, and it cannot be carried in "
                                     "64 MiB (its libraries come from NVIDIA's index; "
                                     "benchmarks/README.md says why)"})
    found["onnxruntime-gpu"] = (
        {"ok": True, "detail": f"onnxruntime-gpu {_version('onnxruntime-gpu')}"}
        if _version("onnxruntime-gpu") else
        {"ok": False, "reason": "onnxruntime-gpu is not installed (the onnxruntime here is the "
                                "CPU build; the GPU build's wheel is about 280 MiB, over the "
                                "64 MiB carry limit)"})
    wheel_files = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    found["wheels"] = (
        {"ok": True, "detail": f"{len(wheel_files)} wheels in {wheels}"} if wheel_files else
        {"ok": False, "reason": f"no wheel folder at {wheels}: the installed edgekit and "
                                "its needs are used as they are (benchmarks/device_wheels.sh "
                                "makes the folder)"})
    return found


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvml() -> dict:
    if not _has_module("pynvml"):
        return {"ok": False, "reason": "nvidia-ml-py (pynvml) is not installed"}
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"ok": False, "reason": f"NVML could not start: {exc}"}
    try:
        count = pynvml.nvmlDeviceGetCount()
        return ({"ok": True, "detail": f"NVML driver {pynvml.nvmlSystemGetDriverVersion()}, "
                                       f"{count} GPU(s)"} if count else
                {"ok": False, "reason": "NVML sees no GPU"})
    finally:
        pynvml.nvmlShutdown()
