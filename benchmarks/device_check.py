"""The GPU check for a borrowed, offline GPU machine: every measurement as a time-boxed step.

Each step is one or more commands (edgekit's CLI, the benchmark scripts with ``--device cuda``)
that run in a child process under a time box, so a hung kernel costs one step, not the lease.
Before anything runs, the requirements are probed once: a CUDA GPU that torch sees, NVML,
Triton, TensorRT, onnxruntime-gpu, the carried wheel folder. A step whose requirement is missing
is recorded as skipped with the reason; a step that fails or outruns its box is recorded as such;
neither stops the run. A global deadline (default 270 s) keeps the whole run well inside the
5 minutes a lent GPU is asked for: a step that cannot start in time is skipped, saying so, and a
running one is cut at the deadline. The steps, most telling first:

- ``profile-cli``: ``edgekit profile mlp --backend torch --provider cuda --cuda-graph``, the CLI
  as a user runs it (report rendered and written);
- ``zipmoe``: ZipMoE's GPU compute path (decoding in a CPU process) against naive offload, reads
  capped at the Jetson AGX Orin's storage bandwidth; logits bit-identical across modes;
- ``batch-sweep``: every reference model profiled at batch 1 to 256, eagerly and from a CUDA
  graph, under its own time budget (benchmarks/batch_sweep.py): where launches bind and where
  the arithmetic does;
- ``spiking-attention``: SSA and USSA up to N = 65536 tokens (the reference to 16384);
- ``wbmm``: WBMM against depthwise convolutions, torch fp32/bf16 and the autotuned Triton
  kernel, each op against its roofline on this device's profile;
- ``astra-gloo-cuda``, ``nvml-meter``; ``onnxruntime-cuda`` and ``tensorrt`` where installed.

Three files come back in ``--out`` (the device tool returns at most 8): ``device_check.json``
(the machine, the probes, every step with its status, reason, time, and the JSON each step
wrote, plus the verdicts), ``device_check.md`` (the machine, one row per step, the verdicts) and
``device_check.log`` (every command's output).

    python benchmarks/device_check.py --out DIR [--dry-run] [--cpu-stand-in] [--only STEP ...]
        [--plan]

``--dry-run`` shrinks every step (sizes, rounds, time boxes) to check the control flow;
``--cpu-stand-in`` lets the CPU stand in for the GPU in the steps that need one (NVML, Triton,
TensorRT and onnxruntime-gpu steps still skip), to check every command on a machine without a
GPU; ``--break STEP`` (or ``STEP:hang``) makes one step fail (or outrun its box) on purpose, to
see the run survive it; ``--plan`` writes ``device_check_plan.json`` (every step's commands,
needs and box, and the deadline) and runs nothing. benchmarks/device_check.sh installs the
carried wheels and calls this.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NO_GPU = "no CUDA GPU"
DEADLINE_S = 270.0  # the whole run, well inside the 5 minutes a lent GPU is asked for
SWEEP_BATCHES = (1, 8, 32, 128, 256)  # launch-bound at one end, compute-bound at the other
SWEEP_BUDGET_S = 60.0  # the sweep starts no case after this; its box leaves room to finish


@dataclass(frozen=True)
class Context:
    python: str
    out: Path  # where the three result files go
    work: Path  # per-step folders
    device: str  # "cuda", or "cpu" with --cpu-stand-in
    dry: bool
    max_box_s: float  # caps every step's time box
    wheels: Path
    site: Path


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    needs: tuple[str, ...]
    commands: Callable[[Context, Path], list[list[str]]]  # (context, step folder) -> argv list
    timeout_s: float
    dry_timeout_s: float = 60.0
    summarise: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None


@dataclass
class Outcome:
    name: str
    what: str
    status: str  # ran | failed | timed-out | skipped
    reason: str = ""
    seconds: float = 0.0
    exit_code: int | None = None
    results: dict[str, Any] = field(default_factory=dict)
    verdicts: list[dict[str, Any]] = field(default_factory=list)


# -- requirements -------------------------------------------------------------------------------

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


# -- the steps ----------------------------------------------------------------------------------

def _bench(ctx: Context, script: str, *args: str) -> list[str]:
    return [ctx.python, str(ROOT / "benchmarks" / script), *args]


def _edgekit(ctx: Context, *args: str) -> list[str]:
    """``python -P -m edgekit ...``: the steps run from the repository root, where ``-m`` would
    put the bare source folder ``./edgekit`` (without the ``exporters/``, ``kernels/`` and
    ``profiles/`` that setuptools maps into it) ahead of the installed package; -P (Python
    >= 3.11; the device has 3.12) keeps the working directory off ``sys.path``. edgekit's own
    children do the same (``edgekit.interpreter``)."""
    return [ctx.python, "-P", "-m", "edgekit", *args]


def _install(ctx: Context, folder: Path) -> list[list[str]]:
    pip = [ctx.python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
           "--target", str(ctx.site)]
    # carried wheels first (setuptools among them: edgekit builds with the newer one), then
    # edgekit itself from this working tree, so the code measured is the code in the tree
    return [[*pip, *map(str, sorted(ctx.wheels.glob("*.whl")))],
            [*pip, "--no-build-isolation", str(ROOT)]]


def _environment(ctx: Context, folder: Path) -> list[list[str]]:
    code = (
        "import importlib.metadata as m, json, platform, shutil, subprocess, sys\n"
        "names = ['torch', 'triton', 'onnx', 'onnxruntime', 'onnxruntime-gpu', 'tensorrt',"
        " 'nvidia-ml-py', 'numpy', 'spikingjelly', 'edgekit']\n"
        "v = {}\n"
        "for n in names:\n"
        "    try: v[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: v[n] = None\n"
        "smi = shutil.which('nvidia-smi')\n"
        "q = 'name,driver_version,memory.total,power.limit,clocks.max.sm'\n"
        "gpu = subprocess.run([smi, '--query-gpu=' + q, '--format=csv'], capture_output=True,"
        " text=True).stdout.strip().splitlines() if smi else []\n"
        "doc = {'python': sys.version.split()[0], 'platform': platform.platform(),"
        " 'cpu_count': __import__('os').cpu_count(), 'versions': v, 'nvidia_smi': gpu}\n"
        f"open({str(folder / 'environment.json')!r}, 'w').write(json.dumps(doc, indent=1))\n")
    return [[ctx.python, "-c", code]]


def _profile_cli(ctx: Context, folder: Path) -> list[list[str]]:
    """One ``edgekit profile`` through the CLI, as a user runs it: the report rendered and
    written (issue 47: the torch-CUDA report once died rendering), from a CUDA graph."""
    timing = (["--warmup", "0.05", "--iterations", "3"] if ctx.dry
              else ["--warmup", "0.2", "--duration", "1"])
    graph = ["--cuda-graph", "--energy", "nvml"] if ctx.device == "cuda" else ["--energy", "auto"]
    return [_edgekit(ctx, "profile", "mlp", "--backend", "torch", "--provider", ctx.device,
                     "--batch", "32", *timing, *graph,
                     "--json", str(folder / f"torch-{ctx.device}.json"))]


def _summarise_profile_cli(results: dict[str, Any]) -> list[dict[str, Any]]:
    doc = next(iter(results.values()), None)
    if doc is None:
        return []
    backend = doc["backend"]
    graph = backend.get("cuda_graph", "off")
    return [{"claim": f"edgekit profile mlp, torch on {backend.get('device')}, batch "
                      f"{doc['settings']['batch']}, CUDA graph {graph}",
             "value": f"p50 {doc['latency_ms']['p50']:.4g} ms, "
                      f"{doc['throughput']['samples_per_s']:.4g} samples/s",
             "met": graph == "on" if backend.get("device", "").startswith("cuda") else None,
             "gpu_memory": backend.get("gpu_memory"),
             "energy_per_inference_j": doc["energy"].get("energy_per_inference_j"),
             "energy_source": doc["energy"].get("source")}]


def _summarise_sweep(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's verdicts, and the cases its budget left out (a shorter sweep, not a fault)."""
    out = []
    for doc in results.values():
        out += [dict(v) for v in doc.get("verdicts", [])]
        if doc.get("left_out"):
            out.append({"claim": "batch-sweep cases left out by its time budget",
                        "value": ", ".join(doc["left_out"]), "met": None})
    return out


def _batch_sweep(ctx: Context, folder: Path) -> list[list[str]]:
    sizes = (["--models", "mlp", "--batches", "1", "2", "--warmup", "0", "--duration", "0.02"]
             if ctx.dry else
             ["--batches", *map(str, SWEEP_BATCHES), "--warmup", "0.1", "--duration", "0.2",
              "--budget-s", str(SWEEP_BUDGET_S)])
    return [_bench(ctx, "batch_sweep.py", "--device", ctx.device, *sizes)]


def _summarise_claims(key: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    def summarise(results: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for doc in results.values():
            out += [dict(v) for v in doc.get(key, [])]
        return out
    return summarise


def _summarise_zipmoe(results: dict[str, Any]) -> list[dict[str, Any]]:
    doc = next(iter(results.values()), None)
    if doc is None:
        return []
    serving = doc["serving"]
    out = []
    for name, s in serving["models"].items():
        out += [{"claim": f"ZipMoE >= 2x naive offload tokens/s ({name} model, 25 % budget, "
                          "storage cap)",
                 "value": round(s["speedup_vs_naive"], 2), "met": s["target_met"],
                 "device": serving.get("device")},
                {"claim": f"logits bit-identical in every mode and round ({name} model)",
                 "value": s["logits_identical"], "met": s["logits_identical"]}]
    return out


def _wbmm(ctx: Context, folder: Path) -> list[list[str]]:
    sizes = (["--shapes", "128x56", "--batches", "1", "--dtypes", "fp32", "--rounds", "1",
              "--min-time", "0.01", "--min-iters", "1"] if ctx.dry else
             ["--batches", "1", "64", "--dtypes", "fp32", "bf16", "--rounds", "3",
              "--min-time", "0.03"])
    return [_bench(ctx, "wbmm.py", "--device", ctx.device, *sizes)]


def _summarise_wbmm(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's claims, then the roofline's verdict on each (what the kernel could reach)."""
    return [dict(v) for doc in results.values()
            for v in (*doc.get("claims", []), *doc.get("roofline", []))]


def _attention(ctx: Context, folder: Path) -> list[list[str]]:
    """SSA and USSA up to N = 65536; the O(N^2) reference up to 16384 (its N x N maps at 65536
    would take 17 GB per time step)."""
    sizes = (["--sizes", "64", "256", "--rounds", "1", "--min-time", "0.01"] if ctx.dry else
             ["--sizes", "1024", "4096", "16384", "65536", "--reference-up-to", "16384",
              "--rounds", "3", "--min-time", "0.05"])
    return [_bench(ctx, "spiking_attention.py", "--device", ctx.device, "--no-ort", *sizes)]


def _zipmoe(ctx: Context, folder: Path) -> list[list[str]]:
    """The random-weight model only (training the other would take minutes of the lease):
    compute on the GPU, decoding in a CPU process, storage reads capped at the Jetson AGX Orin
    profile's bandwidth, against naive offload under the same cap and budget."""
    sizes = ["--rounds", "1", "--new-tokens", "2"] if ctx.dry else ["--rounds", "2"]
    return [_bench(ctx, "zipmoe.py", "--device", ctx.device, "--no-codec", "--models", "random",
                   *sizes)]


def _astra(ctx: Context, folder: Path) -> list[list[str]]:
    """Two ranks on the one GPU over gloo (NCCL needs a GPU per rank), then on the CPU."""
    size = (["--model", "digits", "--reps", "1", "--warmup", "0"] if ctx.dry else
            ["--model", "vit-s", "--tokens", "256", "--reps", "3", "--bandwidth", "1Gbps"])
    run = _edgekit(ctx, "astra", "run", "--world-size", "2", "--mode", "astra", "--mode", "sp",
                   "--keep-logits", "--timeout", "60", *size)
    return [[*run, "--device", ctx.device, "--json", str(folder / "astra-gpu.json")],
            [*run, "--device", "cpu", "--json", str(folder / "astra-cpu.json")]]


def _summarise_astra(results: dict[str, Any]) -> list[dict[str, Any]]:
    gpu, cpu = results.get("astra-gpu.json"), results.get("astra-cpu.json")
    if gpu is None or cpu is None:
        return []
    out = []
    for mode, cases in gpu["summary"].items():
        a = gpu["result"]["modes"][mode]["logits"]
        b = cpu["result"]["modes"][mode]["logits"]
        diff = max(abs(x - y) for x, y in zip(_flat(a), _flat(b), strict=True))
        ratio = cpu["summary"][mode][0]["latency_s"] / cases[0]["latency_s"]
        out.append({"claim": f"ASTRA {mode}: 2 ranks on {gpu['result']['device']} over "
                             f"{gpu['result']['backend']}"
                             f"{' via host memory' if gpu['result']['exchange_via_host'] else ''}"
                             " vs 2 ranks on the CPU",
                    "value": f"{ratio:.3g}x latency speed-up, logits max abs diff {diff:.2g}",
                    "met": diff < 1e-3, "latency_s": cases[0]["latency_s"],
                    "cpu_latency_s": cpu["summary"][mode][0]["latency_s"]})
    return out


def _flat(value: Any) -> list[float]:
    return [x for v in value for x in _flat(v)] if isinstance(value, list) else [value]


def _devices(ctx: Context, folder: Path) -> list[list[str]]:
    return [_edgekit(ctx, "devices", "--json", str(folder / "devices.json"))]


def _nvml_check(ctx: Context, folder: Path) -> list[list[str]]:
    return [_bench(ctx, "nvml_check.py", *(["--busy-s", "1.2"] if ctx.dry else []))]


def _ort_cuda(ctx: Context, folder: Path) -> list[list[str]]:
    return [_edgekit(ctx, "profile", "ds-cnn", "--backend", "onnxruntime", "--provider", "cuda",
                     "--energy", "nvml", "--batch", "32",
                     "--json", str(folder / "onnxruntime-cuda.json"))]


def _tensorrt(ctx: Context, folder: Path) -> list[list[str]]:
    return [_edgekit(ctx, "export", "ds-cnn", "--to", "tensorrt", "--precision", "fp16",
                     "-o", str(folder / "ds-cnn-trt")),
            _edgekit(ctx, "profile", str(folder / "ds-cnn-trt"), "--backend", "tensorrt",
                     "--energy", "nvml", "--batch", "8",
                     "--json", str(folder / "tensorrt-fp16.json"))]


# Most telling first: where the deadline bites, it cuts what an earlier run already measured.
# Full-run boxes (seconds) beside the dry run's; the deadline caps their sum.
STEPS: tuple[Step, ...] = (
    Step("install", "carried wheels and edgekit from this tree, with no index", ("wheels",),
         _install, 45, 120),
    Step("environment", "versions, GPU, driver", (), _environment, 15, 30),
    Step("devices", "the device profile edgekit detects here (edgekit devices)", (), _devices,
         20, 30),
    Step("profile-cli", "edgekit profile mlp on the GPU from a CUDA graph, through the CLI",
         ("gpu",), _profile_cli, 30, 60, _summarise_profile_cli),
    Step("zipmoe", "ZipMoE compute on the GPU, decode in a CPU process, vs naive offload at the "
         "AGX Orin storage cap", ("gpu",), _zipmoe, 60, 240, _summarise_zipmoe),
    Step("batch-sweep", "edgekit profile of every reference model, batch 1-256, eager and from "
         "a CUDA graph: launch-bound vs compute-bound", ("gpu",), _batch_sweep,
         SWEEP_BUDGET_S + 25, 120, _summarise_sweep),
    Step("spiking-attention", "SSA and USSA vs reference attention, N = 1024 ... 65536",
         ("gpu",), _attention, 60, 120, _summarise_claims("verdicts")),
    Step("wbmm", "WBMM-14 vs DW5/DW27, window 7 vs 14; torch and the autotuned Triton kernel; "
         "the roofline", ("gpu",), _wbmm, 45, 120, _summarise_wbmm),
    Step("astra-gloo-cuda", "ASTRA: 2 ranks sharing one GPU over gloo (CUDA tensors, exchange "
         "through host memory) vs 2 ranks on the CPU", ("gpu",), _astra, 40, 120,
         _summarise_astra),
    Step("nvml-meter", "NVML meter vs the counter by hand; instant power on windows < 1 s",
         ("gpu", "nvml"), _nvml_check, 20, 20, _summarise_claims("checks")),
    Step("onnxruntime-cuda", "ONNX Runtime's CUDA provider", ("gpu", "onnxruntime-gpu"),
         _ort_cuda, 45),
    Step("tensorrt", "a TensorRT fp16 engine, built and profiled", ("gpu", "tensorrt"),
         _tensorrt, 90),
)


# -- running ------------------------------------------------------------------------------------

def run_step(step: Step, ctx: Context, found: dict[str, dict], deadline: float,
             sabotage: str | None, log: Any) -> Outcome:
    outcome = Outcome(step.name, step.what, "skipped")
    missing = [n for n in step.needs if not found[n]["ok"]]
    if missing:
        outcome.reason = "; ".join(found[n]["reason"] for n in missing)
        return outcome
    box = min(step.dry_timeout_s if ctx.dry else step.timeout_s, ctx.max_box_s)
    left = deadline - time.monotonic()
    if left < min(box, 10.0) and left < box:
        outcome.reason = f"out of time: {left:.0f} s left before the run's deadline"
        return outcome
    box = min(box, left)
    folder = ctx.work / step.name
    folder.mkdir(parents=True, exist_ok=True)
    commands = step.commands(ctx, folder)
    if sabotage == "fail":
        commands = [[ctx.python, "-c", "raise SystemExit('broken on purpose (--break)')"]]
    elif sabotage == "hang":
        commands = [[ctx.python, "-c", "import time; time.sleep(3600)"]]
    t0 = time.monotonic()
    for argv in commands:
        env = _environment_of(ctx, folder)
        log.write(f"\n=== {step.name}: {' '.join(argv)[:400]}\n")
        log.flush()
        try:
            done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  timeout=max(1.0, box - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            outcome.status, outcome.reason = "timed-out", f"outran its {box:.0f} s box"
            break
        outcome.exit_code = done.returncode
        if done.returncode != 0:
            outcome.status = "failed"
            outcome.reason = f"exit code {done.returncode} from {_shown(argv)}"
            break
    else:
        outcome.status = "ran"
    outcome.seconds = round(time.monotonic() - t0, 2)
    for path in sorted(folder.glob("*.json")):
        try:
            outcome.results[path.name] = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            outcome.results[path.name] = {"unreadable": str(exc)}
    if step.summarise is not None and outcome.status == "ran":
        try:
            outcome.verdicts = step.summarise(outcome.results)
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            outcome.status, outcome.reason = "failed", f"its results did not read back: {exc!r}"
    return outcome


def _shown(argv: list[str]) -> str:
    """What a command runs, for a one-line reason: ``edgekit profile``, ``zipmoe.py``."""
    if "-m" in argv:
        return " ".join(argv[argv.index("-m") + 1:][:2])
    return Path(argv[1]).name


def _environment_of(ctx: Context, folder: Path) -> dict[str, str]:
    """The child's environment: results into the step's folder, the installed site first (once
    the install made it: its second command builds edgekit with the carried setuptools)."""
    env = {**os.environ, "EDGEKIT_BENCH_RESULTS": str(folder), "PYTHONUNBUFFERED": "1",
           "EDGEKIT_HOME": str(ctx.work / "home")}
    if ctx.site.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ctx.site),
                                                          os.environ.get("PYTHONPATH")]))
    return env


def machine(outcomes: list[Outcome]) -> dict[str, Any]:
    """What the run measured on: the environment step's record and the profile edgekit
    detected (empty where those steps did not run)."""
    found = {o.name: o.results for o in outcomes}
    env = dict(found.get("environment", {}).get("environment.json", {}))
    detected = found.get("devices", {}).get("devices.json", {}).get("detected")
    return {**env, **({"detected_profile": detected} if detected else {})}


def summary_markdown(outcomes: list[Outcome], found: dict[str, dict], mode: str) -> str:
    lines = [f"# edgekit device check ({mode})", "", "## Machine", ""]
    described = machine(outcomes)
    lines += [f"- GPU: {'; '.join(described['nvidia_smi'][1:]) or 'none'} "
              f"({described['nvidia_smi'][0] if described['nvidia_smi'] else 'nvidia-smi'})"
              if "nvidia_smi" in described else "- GPU: not recorded"]
    versions = described.get("versions", {})
    lines += [f"- Python {described.get('python', '?')} on {described.get('platform', '?')}, "
              f"{described.get('cpu_count', '?')} CPUs; "
              + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
              f"- device profile detected: {described.get('detected_profile', 'not recorded')}"]
    lines += ["", "## Requirements", "",
              "| requirement | present | detail |", "|---|---|---|"]
    lines += [f"| {n} | {'yes' if r['ok'] else 'no'} | {r.get('detail') or r.get('reason')} |"
              for n, r in found.items()]
    lines += ["", "## Steps", "", "| step | status | seconds | reason / what |",
              "|---|---|---|---|"]
    lines += [f"| {o.name} | {o.status} | {o.seconds:g} | {o.reason or o.what} |"
              for o in outcomes]
    verdicts = [(o.name, v) for o in outcomes for v in o.verdicts]
    if verdicts:
        lines += ["", "## Verdicts", "", "| step | claim | value | met |", "|---|---|---|---|"]
        lines += [f"| {name} | {v.get('claim') or v.get('target')} | "
                  f"{v.get('value', v.get('held_in', ''))} | "
                  f"{_met(v)} |" for name, v in verdicts]
    return "\n".join(lines) + "\n"


def _met(v: dict[str, Any]) -> str:
    if "met" in v:  # None: a measurement with no target
        return "-" if v["met"] is None else "yes" if v["met"] else "no"
    return str(v.get("verdict", "-"))


def _write(path: Path, text: str) -> None:
    """Atomic: a reader (or a run cut off by its limit) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _provenance(ctx: Context) -> dict[str, Any]:
    sys.path[:0] = [p for p in (str(ctx.site),) if ctx.site.is_dir()]
    try:
        from edgekit.provenance import provenance
        return provenance()
    except Exception as exc:  # edgekit missing or broken: the run's results still come back
        return {"error": f"edgekit.provenance unavailable: {exc!r}"}


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """Every step as it would run on a GPU (or dry, with --dry-run): needs, box, commands."""
    ctx = Context(python=args.python, out=args.out, work=Path("<work>"), device="cuda",
                  dry=args.dry_run, max_box_s=args.max_box_s, wheels=args.wheels,
                  site=args.site)
    return {"deadline_s": args.deadline_s, "dry_run": args.dry_run,
            "steps": [{"name": s.name, "what": s.what, "needs": list(s.needs),
                       "box_s": min(s.dry_timeout_s if args.dry_run else s.timeout_s,
                                    args.max_box_s),
                       "commands": s.commands(ctx, ctx.work / s.name)} for s in STEPS]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl")
    parser.add_argument("--site", type=Path, default=Path("/tmp/edgekit-site"))
    parser.add_argument("--work", type=Path, default=None,
                        help="the steps' own files (default: a new folder under /tmp)")
    parser.add_argument("--deadline-s", type=float, default=DEADLINE_S)
    parser.add_argument("--max-box-s", type=float, default=600.0,
                        help="cap every step's time box (seconds)")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--no-install", action="store_true",
                        help="use this environment's edgekit; carry and install nothing")
    parser.add_argument("--cpu-stand-in", action="store_true")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in STEPS])
    parser.add_argument("--break", dest="sabotage", default=None, metavar="STEP[:hang]")
    parser.add_argument("--plan", action="store_true",
                        help="write device_check_plan.json (the steps, their commands and "
                             "boxes, as on a GPU) and run nothing")
    args = parser.parse_args(argv)
    names = {s.name for s in STEPS}
    broken, _, how = (args.sabotage or "").partition(":")
    if args.sabotage and (broken not in names or how not in ("", "hang")):
        parser.error(f"--break takes STEP or STEP:hang with STEP one of {', '.join(sorted(names))}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.plan:
        _write(args.out / "device_check_plan.json", json.dumps(plan(args), indent=1) + "\n")
        return 0
    started = time.monotonic()
    deadline = started + args.deadline_s
    work = args.work or Path(tempfile.mkdtemp(prefix="edgekit-device-check-"))
    work.mkdir(parents=True, exist_ok=True)
    found = probe(args.python, args.wheels, args.cpu_stand_in, 60.0)
    if args.no_install:
        found["wheels"] = {"ok": False, "reason": "--no-install: this environment's edgekit is "
                                                  "used as it is"}
    ctx = Context(python=args.python, out=args.out, work=work,
                  device="cpu" if args.cpu_stand_in and "--cpu-stand-in" in
                  found["gpu"].get("detail", "") else "cuda",
                  dry=args.dry_run, max_box_s=args.max_box_s, wheels=args.wheels,
                  site=args.site)
    mode = ", ".join(m for m, on in (("dry run", args.dry_run), ("CPU stands in for the GPU",
                                     ctx.device == "cpu")) if on) or "full run"
    outcomes: list[Outcome] = []
    with (args.out / "device_check.log").open("w") as log:
        for step in STEPS:
            if args.only and step.name not in args.only and step.name != "install":
                outcomes.append(Outcome(step.name, step.what, "skipped",
                                        reason="not among --only"))
                continue
            sabotage = ("hang" if how else "fail") if step.name == broken else None
            outcome = run_step(step, ctx, found, deadline, sabotage, log)
            if step.name == "install" and outcome.status != "ran" and ctx.site.is_dir():
                shutil.rmtree(ctx.site)  # half an install must not shadow the system's packages
            outcomes.append(outcome)
            print(f"[device_check] {outcome.name}: {outcome.status}"
                  + (f" ({outcome.reason})" if outcome.reason else "")
                  + (f" in {outcome.seconds:g} s" if outcome.status != "skipped" else ""),
                  flush=True)
    failed = [o.name for o in outcomes if o.status in ("failed", "timed-out")]
    doc = {"schema_version": 1, "kind": "benchmark/device_check", "mode": mode,
           "deadline_s": args.deadline_s, "seconds": round(time.monotonic() - started, 1),
           "machine": machine(outcomes), "provenance": _provenance(ctx),
           "requirements": found, "failed_steps": failed,
           "steps": [o.__dict__ for o in outcomes]}
    _write(args.out / "device_check.json", json.dumps(doc, indent=1, default=str) + "\n")
    markdown = summary_markdown(outcomes, found, mode)
    _write(args.out / "device_check.md", markdown)
    print(markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
