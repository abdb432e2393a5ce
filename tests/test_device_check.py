"""benchmarks/device_check.py, the GPU check for a borrowed offline GPU machine, dry-run on this
CPU machine: every step is recorded as ran or skipped with its reason, a broken step fails alone,
a hung step is cut at its time box, and the three result files are written. Its plan (what a GPU
run would start, under which boxes and deadline) and its verdicts (from results as the scripts
write them) are checked here too, since only a GPU runs the steps themselves."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
DRIVER = REPO / "benchmarks" / "device_check.py"
CATALOGUE = REPO / "benchmarks" / "devcheck" / "steps.py"  # the driver's STEPS, in order


def _step_names() -> list[str]:
    """The names of STEPS, read from the source (importing it would not check the file)."""
    tree = ast.parse(CATALOGUE.read_text())
    names = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "Step" and isinstance(n.args[0], ast.Constant)]
    return names


def run_driver(tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    out = tmp_path / "out"
    bare = tmp_path / "bin"  # a PATH without nvidia-smi: the machine has no GPU, whatever it has
    bare.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, str(DRIVER), "--out", str(out), "--dry-run", "--python", sys.executable,
         "--wheels", str(tmp_path / "no-wheels"), "--site", str(tmp_path / "site"),
         "--work", str(tmp_path / "work"), *extra],
        capture_output=True, text=True, timeout=60, env={"PATH": str(bare)}, cwd=REPO)
    assert (out / "device_check.log").exists()
    return (done.returncode, json.loads((out / "device_check.json").read_text()),
            (out / "device_check.md").read_text())


def test_dry_run_records_every_step_with_a_reason(tmp_path):
    code, doc, summary = run_driver(tmp_path)
    steps = {s["name"]: s for s in doc["steps"]}
    assert code == 0 and doc["failed_steps"] == []
    assert sorted(steps) == sorted(_step_names())
    assert steps["environment"]["status"] == "ran"
    env = steps["environment"]["results"]["environment.json"]
    assert env["python"] == sys.version.split()[0] and env["nvidia_smi"] == []
    assert steps["install"]["status"] == "skipped"
    assert "no wheel folder" in steps["install"]["reason"]
    assert steps["devices"]["status"] == "ran"  # python -P -m edgekit devices, from the repo root
    assert steps["devices"]["results"]["devices.json"]["detected"] == "generic-x86-64-cpu"
    for name, step in steps.items():
        if name not in ("install", "environment", "devices"):
            assert step["status"] == "skipped", name
            assert "no CUDA GPU: nvidia-smi not found" in step["reason"], name
    assert "TensorRT is not installed" in steps["tensorrt"]["reason"]
    assert "onnxruntime-gpu is not installed" in steps["onnxruntime-cuda"]["reason"]
    for name, step in steps.items():  # one summary row per step, its status and reason
        assert f"| {name} | {step['status']} |" in summary
        assert step["reason"] or step["status"] == "ran"
    assert "| gpu | no | no CUDA GPU" in summary


@pytest.mark.parametrize("how, status, reason", [
    ("environment", "failed", "exit code 1"),
    ("environment:hang", "timed-out", "outran its 1 s box"),
])
def test_a_broken_step_fails_alone(tmp_path, how, status, reason):
    code, doc, summary = run_driver(tmp_path, "--break", how, "--max-box-s", "1",
                                    "--only", "environment")
    steps = {s["name"]: s for s in doc["steps"]}
    assert code == 1 and doc["failed_steps"] == ["environment"]
    assert steps["environment"]["status"] == status
    assert reason in steps["environment"]["reason"]
    assert sorted(steps) == sorted(_step_names())  # the run went on past it
    assert f"| environment | {status} |" in summary


def test_bad_break_is_one_line_usage_error(tmp_path):
    done = subprocess.run([sys.executable, str(DRIVER), "--out", str(tmp_path), "--break", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--break takes STEP" in done.stderr


def _module(name: str) -> ModuleType:
    """A script of benchmarks/ as a module (they import ``common`` from their own folder)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks"
                                                      / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


def test_the_plan_fits_five_minutes_and_measures_what_the_gpu_is_for(tmp_path):
    done = subprocess.run([sys.executable, str(DRIVER), "--out", str(tmp_path), "--plan"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plan = json.loads((tmp_path / "device_check_plan.json").read_text())
    steps = {s["name"]: s for s in plan["steps"]}
    assert sorted(steps) == sorted(_step_names())
    assert plan["deadline_s"] <= 270  # the run, probes and files well inside 300 s
    assert all(s["box_s"] <= plan["deadline_s"] for s in steps.values())
    commands = [c for s in steps.values() for c in s["commands"]]
    for argv in commands:  # every edgekit child imports the installed package (issue 47)
        if "-m" in argv and argv[argv.index("-m") + 1] == "edgekit":
            assert argv[argv.index("-m") - 1] == "-P", argv
    (cli,) = steps["profile-cli"]["commands"]
    assert {"--provider", "cuda", "--cuda-graph"} <= set(cli)
    (sweep,) = steps["batch-sweep"]["commands"]
    batches = sweep[sweep.index("--batches") + 1:sweep.index("--warmup")]
    assert batches[0] == "1" and batches[-1] == "256" and len(batches) >= 4
    assert float(sweep[sweep.index("--budget-s") + 1]) < steps["batch-sweep"]["box_s"]
    (ssa,) = steps["spiking-attention"]["commands"]
    assert "65536" in ssa and ssa[ssa.index("--reference-up-to") + 1] == "16384"
    (wbmm,) = steps["wbmm"]["commands"]
    assert "bf16" in wbmm
    (zipmoe,) = steps["zipmoe"]["commands"]
    assert zipmoe[zipmoe.index("--device") + 1] == "cuda"


def test_the_sweep_finds_the_launch_bound_range_and_the_graphs_gain():
    sweep = _module("batch_sweep")

    def row(model, batch, p50, graph=False, status="off"):
        return {"model": model, "batch": batch, "p50_ms": p50, "samples_per_s": batch / p50,
                "graph": graph, "cuda_graph": status}

    rows = [row("mlp", 1, 0.10), row("mlp", 8, 0.12), row("mlp", 256, 2.0),
            row("mlp", 1, 0.04, True, "on"), row("mlp", 256, 2.0, True, "on"),
            row("snn", 1, 1.0), row("snn", 256, 200.0),
            row("snn", 1, 1.0, True, "off (capture failed: operation not permitted)")]
    found = {v["claim"]: v for v in sweep.verdicts(rows)}
    assert found["mlp: largest batch still launch-bound (p50 within 1.5x of batch 1)"][
        "value"] == 8
    assert found["mlp: samples/s at batch 256 over batch 1 (ideal 256x)"]["value"] == 12.8
    assert found["mlp: CUDA graph p50 speed-up at batch 1"]["value"] == 2.5
    assert found["mlp: CUDA graph p50 speed-up at batch 256"]["met"]
    assert found["snn: largest batch still launch-bound (p50 within 1.5x of batch 1)"][
        "value"] == 1
    failed = found["snn: CUDA graph at batch 1"]
    assert failed["met"] is False and "capture failed" in failed["value"]
    assert sweep.order(["a", "b"], [1, 8, 256]) == [("a", 1), ("b", 1), ("a", 256), ("b", 256),
                                                      ("a", 8), ("b", 8)]


def test_the_roofline_says_when_wbmm14_cannot_beat_dw5():
    """WBMM-14 does 2d = 392 FLOPs per output value: in fp32 on an H200 (ridge 67 TFLOP/s /
    4.8 TB/s = 14 FLOP/byte) it is compute-bound while DW5 is memory-bound, so it cannot be as
    fast whatever its kernel; in bf16 (ridge 206) both are memory-bound and it can."""
    from edgekit.profiles import load_profile

    wbmm = _module("wbmm")
    h200 = load_profile("nvidia-h200")
    records = [{"backend": f"torch {label}", "channels": 128, "side": 56, "batch": 64,
                "threads": 1,
                "ops": {name: {"flops": wbmm.op_flops(name, 128, 56, 64), "latency_ms": 1.0}
                        for name in ("wbmm14", "wbmm14-triton", "dw5")}}
               for label in ("fp32", "bf16")]
    fp32, bf16 = wbmm.roofline(records, h200.peak_flops, h200.memory_bandwidth_bytes_s)
    ops32 = records[0]["ops"]
    assert ops32["wbmm14"]["roofline"]["bound"] == "compute"
    assert ops32["dw5"]["roofline"]["bound"] == "memory"
    assert ops32["wbmm14"]["roofline"]["flop_per_byte"] > 45
    assert not fp32["met"] and fp32["least_time_ratio"] > 3
    assert bf16["met"] and records[1]["ops"]["wbmm14"]["roofline"]["bound"] == "memory"
    assert "wbmm14-triton" in fp32["value"]


def _part(name: str) -> ModuleType:
    """A part of the device check (benchmarks/devcheck/NAME.py), imported as the driver does."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return importlib.import_module(f"devcheck.{name}")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_the_verdicts_read_the_results_as_the_steps_write_them():
    gpu, methods = _part("gpu_steps"), _part("method_steps")
    base, results = _part("base"), _part("results")
    profile_doc = {"backend": {"backend": "torch", "device": "cuda:0", "cuda_graph": "on",
                               "gpu_memory": {"peak_allocated_bytes": 1}},
                   "settings": {"batch": 32}, "latency_ms": {"p50": 0.05},
                   "throughput": {"samples_per_s": 640000.0},
                   "energy": {"energy_per_inference_j": 1e-4, "source": "measured: nvml"}}
    (cli,) = gpu.summarise_profile_cli({"torch-cuda.json": profile_doc})
    assert cli["met"] and "CUDA graph on" in cli["claim"] and "p50 0.05 ms" in cli["value"]
    zipmoe = {"serving": {"device": "NVIDIA H200", "models": {"random": {
        "speedup_vs_naive": 2.31, "target_met": True, "logits_identical": True}}}}
    speed, exact = methods.summarise_zipmoe({"zipmoe_cuda.json": zipmoe})
    assert speed["value"] == 2.31 and speed["met"] and exact["met"]
    sweep = {"verdicts": [{"claim": "mlp: CUDA graph p50 speed-up at batch 1", "value": 2.5,
                           "met": True}], "left_out": ["astra-vit batch 128"]}
    graph, left = gpu.summarise_sweep({"batch_sweep_cuda.json": sweep})
    assert graph["met"] and left["met"] is None and left["value"] == "astra-vit batch 128"
    claims = methods.summarise_wbmm({"wbmm_cuda.json": {"claims": [{"claim": "a"}],
                                                        "roofline": [{"claim": "b"}]}})
    assert [c["claim"] for c in claims] == ["a", "b"]
    env = {"python": "3.12.3", "platform": "Linux", "cpu_count": 16,
           "versions": {"torch": "2.11.0+cu130", "onnxruntime-gpu": None},
           "nvidia_smi": ["name, driver_version", "NVIDIA H200, 580.159.04"]}
    outcomes = [base.Outcome("environment", "", "ran", results={"environment.json": env}),
                base.Outcome("devices", "", "ran",
                              results={"devices.json": {"detected": "nvidia-h200"}}),
                base.Outcome("profile-cli", "", "ran", verdicts=[cli])]
    assert results.machine(outcomes)["detected_profile"] == "nvidia-h200"
    summary = results.summary_markdown(outcomes, {}, "full run")
    assert "- GPU: NVIDIA H200, 580.159.04 (name, driver_version)" in summary
    assert "torch 2.11.0+cu130" in summary and "onnxruntime-gpu" not in summary
    assert "device profile detected: nvidia-h200" in summary
    assert f"| profile-cli | {cli['claim']} | {cli['value']} | yes |" in summary
