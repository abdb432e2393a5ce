"""The command line as a user meets it: one-line errors, exit codes, files written. The commands
run in-process through click's runner (stdout and stderr apart, the working folder and
``EDGEKIT_HOME`` as given); the tests marked "a real process" start ``python -m edgekit``."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import chdir
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner
from oneline import one_line_error

from edgekit.cli import cli
from edgekit.profiles import load_profile

EXE = [sys.executable, "-m", "edgekit"]


@dataclass
class Ran:
    """What a command left: the fields of ``subprocess.CompletedProcess`` the tests read."""

    returncode: int
    stdout: str
    stderr: str


def run(*args, cwd=None, env_home=None) -> Ran:
    env = {"COLUMNS": "200"}
    if env_home is not None:
        env["EDGEKIT_HOME"] = str(env_home)
    with chdir(cwd or os.getcwd()):
        result = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: the test shows it whole
    return Ran(result.exit_code, result.stdout, result.stderr)


def run_process(*args, cwd=None, **env: str) -> subprocess.CompletedProcess:
    """A real process, for what only one can show (the entry point, a process-wide setting)."""
    return subprocess.run([*EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env=dict(os.environ, COLUMNS="200", **env))


def assert_one_line_error(proc, code, *fragments):
    one_line_error(proc.returncode, proc.stderr, code, *fragments)


def test_unknown_model_lists_valid_names(tmp_path):  # a real process
    assert_one_line_error(run_process("export", "resnet9000", cwd=tmp_path), 2, "unknown model",
                          "ds-cnn:wide")
    assert os.listdir(tmp_path) == []


def test_unknown_device_lists_valid_names(tmp_path):
    proc = run("profile", "mlp", "--device", "toaster", cwd=tmp_path)
    assert_one_line_error(proc, 2, "unknown device profile", "jetson-orin-nano-8gb")


def test_neuromorphic_profile_shows_its_costs_and_is_no_profiling_target(tmp_path):
    shown = run("devices", "--show", "loihi")
    assert shown.returncode == 0, shown.stderr
    assert "energy.synaptic_op_pj" in shown.stdout and "23.6 pJ per event" in shown.stdout
    assert shown.stdout.count("Table 2") >= 6  # every cost cites its source
    proc = run("profile", "mlp", "--device", "loihi", cwd=tmp_path)
    assert_one_line_error(proc, 2, "neuromorphic cost table", "edgekit simulate MODEL --chip loihi")
    assert os.listdir(tmp_path) == []


def test_another_devices_profile_is_refused_unless_said_plainly(tmp_path):
    """An x86 VM measured under jetson-nano would report its own timings as a Nano's, beside
    the Nano's peaks and power: refused, unless --as-device says so, and then every figure is
    this machine's and says it."""
    proc = run("profile", "mlp:small", "--device", "jetson-nano", cwd=tmp_path)
    assert_one_line_error(proc, 2, "this machine is not a jetson-nano (jetson)",
                          "no Jetson device tree", "--as-device jetson-nano")
    for argv in (["compare", "mlp:small", "--device", "nvidia-h100-sxm"],
                 ["simulate", "spiking-cnn", "--device", "jetson-xavier-nx"]):
        assert_one_line_error(run(*argv, env_home=tmp_path), 2, "this machine is not a")
    assert_one_line_error(run("profile", "mlp:small", "--device", "jetson-nano", "--as-device",
                              "jetson-nano"), 2, "give --device or --as-device, not both")
    out = tmp_path / "p.json"
    proc = run("profile", "mlp:small", "--as-device", "jetson-nano", "--warmup", "0",
               "--iterations", "20", "--energy", "estimate", "--json", str(out), cwd=tmp_path,
               env_home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "jetson-nano (measured on generic-x86-64-cpu)" in proc.stdout
    report = json.loads(out.read_text())
    device, energy = report["device"], report["energy"]
    assert device["profile"] == "jetson-nano" and device["measured_on"] == "generic-x86-64-cpu"
    assert "not a jetson-nano" in device["note"]
    assert "MAXN" not in energy["note"]  # this machine's budget, not the Nano's power mode
    assert report["compute"].get("peak_source") != load_profile("jetson-nano").sources.get(
        "peak.fp32")


def test_a_claimed_jetson_is_checked_on_the_rebuilt_device_tree(tmp_path):
    """Under $EDGEKIT_SYSFS_ROOT (a host's filesystem mounted elsewhere) the machine is the
    one whose sensors are read: a Nano's device tree there makes --device jetson-nano hold."""
    (tmp_path / "root/proc/device-tree").mkdir(parents=True)
    (tmp_path / "root/proc/device-tree/model").write_text("NVIDIA Jetson Nano Developer Kit\x00")
    out = tmp_path / "p.json"
    proc = run_process("profile", "mlp:small", "--device", "jetson-nano", "--warmup", "0",
                       "--iterations", "20", "--energy", "estimate", "--json", str(out),
                       EDGEKIT_SYSFS_ROOT=str(tmp_path / "root"))  # a real process
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["device"]["profile"] == "jetson-nano" and "measured_on" not in report["device"]


def test_export_records_no_target_that_profile_refuses(tmp_path):
    proc = run("export", "mlp:small", "--device", "loihi", "-o", str(tmp_path / "a"))
    assert_one_line_error(proc, 2, "loihi is a neuromorphic cost table")
    assert not (tmp_path / "a").exists()


def test_compare_refuses_models_of_different_tasks(tmp_path):
    proc = run("compare", "mlp", "wifi-mamba", env_home=tmp_path)
    assert_one_line_error(proc, 2, "one dataset and metric", "mlp: accuracy on digits",
                          "wifi-mamba: mpjpe_mm on wifi-pose-sim")
    assert not (tmp_path / "checkpoints").exists()  # refused before any training


def test_pose_models_refuse_classification_npz(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((20, 2, 270, 20), np.float32), y=np.zeros(20, np.int64))
    proc = run("train", "wifi-petr", "--data", str(tmp_path / "d.npz"), cwd=tmp_path)
    assert_one_line_error(proc, 2, "scored by mpjpe_mm", "built-in dataset")


def test_missing_and_corrupt_onnx(tmp_path):
    assert_one_line_error(run("profile", str(tmp_path / "x.onnx"), "--backend", "onnxruntime"),
                          2, "does not exist")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    assert_one_line_error(run("profile", str(bad), "--backend", "onnxruntime"), 2,
                          "not a valid ONNX model")


def test_wrong_data_shape(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((30, 3, 8, 8), np.float32), y=np.zeros(30, np.int64))
    proc = run("train", "mlp", "--data", str(tmp_path / "d.npz"),
               "-o", str(tmp_path / "m.safetensors"))
    assert_one_line_error(proc, 2, "(3, 8, 8)", "(1, 8, 8)")
    assert not (tmp_path / "m.safetensors").exists()


def test_unwritable_output(tmp_path):
    (tmp_path / "file").write_text("x")
    proc = run("export", "mlp:small", "-o", str(tmp_path / "file" / "art"))
    assert_one_line_error(proc, 2, "cannot create folder")


def test_unreadable_sensor_requested(tmp_path):
    proc = run("profile", "mlp:small", "--device", "generic-x86-64-cpu", "--energy", "ina3221",
               "--iterations", "3")
    assert_one_line_error(proc, 2)


def test_debug_shows_traceback(tmp_path):
    proc = run("--debug", "export", "resnet9000")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_train_export_profile_round_trip(tmp_path):
    ckpt = tmp_path / "mlp.safetensors"
    proc = run("train", "mlp:small", "--epochs", "5", "-o", str(ckpt), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "accuracy on the test split" in proc.stdout
    from edgekit.checkpoint import read_checkpoint

    sidecar = read_checkpoint(ckpt).info  # the record in the file's own metadata
    assert sidecar["entry"] == "mlp" and sidecar["variant"] == "small"
    assert sidecar["metrics"]["accuracy"] > 0.5

    proc = run("export", str(ckpt), "--to", "onnx", "--dynamic-batch", "-o", str(tmp_path / "art"))
    assert proc.returncode == 0, proc.stderr
    assert "[✓] logits: max abs" in proc.stdout
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["source"]["checkpoint_sha256"] == sidecar["weights_sha256"]

    out = tmp_path / "p.json"
    proc = run("profile", str(tmp_path / "art"), "--backend", "onnxruntime", "--batch", "4",
               "--iterations", "20", "--warmup", "0", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["kind"] == "profile" and report["schema_version"] == 1
    assert report["iterations"] == 20 and report["settings"]["batch"] == 4
    assert "p99" in proc.stdout and report["energy"]["source"] in proc.stdout


def test_datasets_lists_datasets_and_their_variants(tmp_path):
    proc = run("datasets", "--json", str(tmp_path / "d.json"))
    assert proc.returncode == 0, proc.stderr
    assert "wifi-pose-sim:station" in proc.stdout and "limb pose is observable" in proc.stdout
    rows = {r["name"]: r for r in json.loads((tmp_path / "d.json").read_text())["datasets"]}
    assert rows["digits"]["variants"] == {} and rows["digits"]["input_shape"] == [1, 8, 8]
    assert "limb pose is observable" in rows["wifi-pose-sim"]["variants"]["station"]


def test_models_lists_entries():
    proc = run("models")
    assert proc.returncode == 0
    for name in ("ds-cnn", "ds-cnn:wide", "mlp:large"):
        assert name in proc.stdout


@pytest.mark.slow
def test_compare_writes_table_plot_csv_json(tmp_path, trained_home):
    shutil.copytree(trained_home, tmp_path / "home")  # mlp:small trained once per session
    proc = run("compare", "mlp:small", "ds-cnn:tiny", "--duration", "0.2",
               "--plot", str(tmp_path / "c.png"), "--csv", str(tmp_path / "c.csv"),
               "--json", str(tmp_path / "c.json"), env_home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv_lines = (tmp_path / "c.csv").read_text().splitlines()
    assert csv_lines[0].startswith("name,family,accuracy") and len(csv_lines) == 3
    doc = json.loads((tmp_path / "c.json").read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    assert set(rows) == {"mlp:small", "ds-cnn:tiny"}
    assert all(r["accuracy"] > 0.8 for r in rows.values())
    assert any(r["pareto_latency"] for r in rows.values())
    # the second run reuses the cached checkpoints instead of training again
    again = run("compare", "mlp:small", "--duration", "0.1", env_home=tmp_path / "home")
    assert again.returncode == 0 and "training" not in again.stderr


def test_nir_export_from_the_cli(tmp_path):
    proc = run("export", "spiking-cnn", "--to", "nir", "-o", str(tmp_path / "nir"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "nir" / "model.nir").is_file()
    assert json.loads((tmp_path / "nir" / "manifest.json").read_text())["format"] == "nir"
    refused = run("export", "spikingresformer", "--to", "nir", "-o", str(tmp_path / "no"))
    assert_one_line_error(refused, 2, "cannot be exported to NIR")
    assert not (tmp_path / "no").exists()



def test_data_names_a_variant_of_the_models_own_dataset(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    proc = run("train", "wifi-petr", "--data", "wifi-pose-sim:nope", cwd=work, env_home=home)
    assert_one_line_error(proc, 2, "has no variant 'nope'", "variants: wifi-pose-sim:station (one "
                          "person acting on a mark", "edgekit datasets lists them")
    proc = run("train", "mlp", "--data", "digits:station", cwd=work, env_home=home)
    assert_one_line_error(proc, 2, "has no variant 'station'", "variants: none")
    # a file of that very name is the user's file, read as one (here: labels a pose model refuses)
    np.savez(work / "d.npz", x=np.zeros((20, 2, 270, 20), np.float32), y=np.zeros(20, np.int64))
    (work / "d.npz").rename(work / "wifi-pose-sim:station")
    proc = run("train", "wifi-petr", "--data", "wifi-pose-sim:station", cwd=work, env_home=home)
    assert_one_line_error(proc, 2, "scored by mpjpe_mm", "--data wifi-pose-sim:station")
    assert os.listdir(work) == ["wifi-pose-sim:station"] and not home.exists()  # nothing written
