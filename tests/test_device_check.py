"""benchmarks/device_check.py, the GPU check for a borrowed offline GPU machine, dry-run on this
CPU machine: every step is recorded as ran or skipped with its reason, a broken step fails alone,
a hung step is cut at its time box, and the three result files are written."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DRIVER = REPO / "benchmarks" / "device_check.py"


def _step_names() -> list[str]:
    """The names of STEPS, read from the source (importing it would not check the file)."""
    tree = ast.parse(DRIVER.read_text())
    names = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "Step" and isinstance(n.args[0], ast.Constant)]
    return names + [f"profile-{m}" for m in ("mlp", "ds-cnn", "spiking-cnn", "spikingresformer",
                                             "wbmm", "wifi-mamba", "astra-vit")]


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
