"""Jetson bundles (contents, README commands that the CLI accepts), the export command's option
checks, and benchmarks/gpu_check.sh (syntax, and every edgekit command in it parses)."""
from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgekit.cli import cli
from edgekit.errors import UsageError
from edgekit.exporters import (
    EngineBuildConfig,
    export_onnx,
    load_artifact,
    load_reference,
    validate_artifact,
    write_jetson_bundle,
)
from edgekit.exporters.calibration import samples_for_artifact, samples_from_dataset
from edgekit.registry import get_entry
from edgekit.targets import load_model_source

REPO = Path(__file__).resolve().parent.parent
HAS_TRT_GPU = importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available()


def parse_command(args: list[str]) -> tuple[str, dict]:
    """Parse ``edgekit SUBCOMMAND ...`` with the real click command: unknown options, bad
    choices and wrong types raise, exactly as they would for a user."""
    assert args[0] == "edgekit", args
    name = args[1]
    command = cli.get_command(None, name)
    assert command is not None, f"no command {name}"
    ctx = command.make_context(f"edgekit {name}", list(args[2:]))
    return name, ctx.params


def readme_commands(readme: str) -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", readme, flags=re.S)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def int8_bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle") / "mlp-jetson"
    result = CliRunner().invoke(cli, [
        "export", "mlp:small", "--to", "jetson-bundle", "--precision", "int8", "--dynamic-batch",
        "--min-shape", "input:1x1x8x8", "--opt-shape", "input:4x1x8x8",
        "--max-shape", "input:16x1x8x8", "--calib-samples", "100", "--cuda-graph",
        "-o", str(folder)])
    assert result.exit_code == 0, result.output + result.stderr
    return folder, result.stdout


def test_int8_bundle_contents(int8_bundle):
    folder, stdout = int8_bundle
    art = load_artifact(folder)  # every file's SHA-256 checked
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md", "calibration.npz", "manifest.json", "model.onnx", "reference.npz"]
    assert set(art.manifest["files"]) == {"model.onnx", "reference.npz", "calibration.npz",
                                          "README.md"}
    assert art.format == "onnx" and art.manifest["validation"]["passed"]
    bundle = art.manifest["jetson_bundle"]
    assert bundle["build"]["precision"] == "int8" and bundle["dynamic"] and bundle["cuda_graph"]
    assert bundle["profile"] == [{"name": "input", "min": [1, 1, 8, 8], "opt": [4, 1, 8, 8],
                                  "max": [16, 1, 8, 8]}]
    with np.load(folder / "calibration.npz", allow_pickle=False) as npz:
        calib = npz["input.input"]
    expected = samples_from_dataset(get_entry("mlp").task, count=100).arrays["input"]
    np.testing.assert_array_equal(calib, expected)
    assert load_reference(folder / "reference.npz").outputs["logits"].shape == (3, 10)
    assert validate_artifact(folder)[1].passed  # a bundle is an artifact edgekit runs as is
    # on the device, the build calibrates with the bundled samples
    samples = samples_for_artifact(folder, art.manifest, None, 512)
    assert samples.origin == "calibration.npz (100 samples)"
    np.testing.assert_array_equal(samples.arrays["input"], expected)
    assert "copy it to the Jetson" in stdout and "edgekit validate engine" in stdout


def test_int8_bundle_readme_commands_parse_and_match(int8_bundle):
    folder, _ = int8_bundle
    readme = (folder / "README.md").read_text()
    commands = readme_commands(readme)
    edgekit = [parse_command(c) for c in commands if c[0] == "edgekit"]
    trtexec = [c for c in commands if c[0] == "trtexec"]
    assert [name for name, _ in edgekit] == ["export", "validate", "validate", "profile"]
    _, build = edgekit[0]
    assert build["target"] == "." and build["fmt"] == "tensorrt" and build["precision"] == "int8"
    assert (build["min_shape"], build["opt_shape"], build["max_shape"]) == (
        ("input:1x1x8x8",), ("input:4x1x8x8",), ("input:16x1x8x8",))
    assert build["calibrator"] == "entropy" and build["calib_samples"] == 100
    assert build["calib_cache"] == "calibration.cache" and build["timing_cache"] == "timing.cache"
    assert edgekit[2][1]["against"] == "onnxruntime"
    _, prof = edgekit[3]
    assert prof["backend"] == "tensorrt" and prof["batch"] == 4 and prof["cuda_graph"]
    # no cache in the bundle: no --calib (pointed at a missing file, trtexec calibrates on noise)
    assert not (folder / "calibration.cache").exists()
    assert trtexec[0] == ["trtexec", "--onnx=model.onnx", "--saveEngine=trtexec.engine", "--int8",
                          "--minShapes=input:1x1x8x8",
                          "--optShapes=input:4x1x8x8", "--maxShapes=input:16x1x8x8",
                          "--timingCacheFile=timing.cache"]
    assert trtexec[1] == ["trtexec", "--loadEngine=trtexec.engine", "--shapes=input:4x1x8x8",
                          "--warmUp=200", "--duration=3", "--useCudaGraph"]
    assert "100 INT8 calibration samples from digits" in readme
    assert "--calib=" not in readme
    assert "no calibration cache" in readme and "not calibrated" in readme
    assert "outputs are meaningless" in readme and "build with edgekit" in readme


@pytest.mark.skipif(HAS_TRT_GPU, reason="TensorRT and a GPU are present: the command would build")
def test_bundle_build_command_fails_at_once_here(int8_bundle, monkeypatch):
    folder, _ = int8_bundle
    monkeypatch.chdir(folder)
    (build,) = [c for c in readme_commands((folder / "README.md").read_text())
                if c[:2] == ["edgekit", "export"]]
    result = CliRunner().invoke(cli, build[1:])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "TensorRT is not installed here" in result.stderr or "no CUDA GPU" in result.stderr
    assert not (folder / "engine").exists()


def test_fp16_bundle_from_an_onnx_artifact(tmp_path):
    export_onnx(load_model_source("mlp:small"), tmp_path / "art")
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "art"), "--to", "jetson-bundle",
                                      "--precision", "fp16", "--workspace", "256",
                                      "-o", str(tmp_path / "b")])
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        "README.md", "manifest.json", "model.onnx", "reference.npz"]
    assert ((tmp_path / "b" / "model.onnx").read_bytes()
            == (tmp_path / "art" / "model.onnx").read_bytes())
    commands = readme_commands((tmp_path / "b" / "README.md").read_text())
    _, build = parse_command(commands[0])
    assert build["precision"] == "fp16" and build["workspace"] == 256 and build["min_shape"] == ()
    _, prof = parse_command(commands[3])
    assert prof["batch"] == 1 and not prof["cuda_graph"]
    assert commands[4] == ["trtexec", "--onnx=model.onnx", "--saveEngine=trtexec.engine", "--fp16",
                           "--memPoolSize=workspace:256M", "--timingCacheFile=timing.cache"]
    assert (commands[5][:2] == ["trtexec", "--loadEngine=trtexec.engine"]
            and "--shapes" not in " ".join(commands[5]))


def test_bundle_with_a_calibration_cache(tmp_path):
    export_onnx(load_model_source("mlp:small"), tmp_path / "art")
    art = load_artifact(tmp_path / "art")
    samples = samples_from_dataset(get_entry("mlp").task, count=16)
    cache = tmp_path / "mine.cache"
    cache.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")
    build = EngineBuildConfig(precision="int8", calib_cache=cache)
    result = write_jetson_bundle(art, tmp_path / "b", build, calibration=samples)
    assert (tmp_path / "b" / "calibration.cache").read_bytes() == cache.read_bytes()
    assert "calibration.cache" in result.manifest["files"]
    assert "--calib=calibration.cache" in result.commands["trtexec"][0]
    assert "`calibration.cache`" in result.readme
    assert "--calib=calibration.cache" in result.readme  # the file it names is in the bundle
    assert "same INT8 scales" in result.readme and "not calibrated" not in result.readme
    with pytest.raises(UsageError, match="does not exist"):
        write_jetson_bundle(art, tmp_path / "c", EngineBuildConfig(
            precision="int8", calib_cache=tmp_path / "nope.cache"), calibration=samples)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("args, fragment", [
    (["mlp:small", "--workspace", "256"], "apply to --to tensorrt and --to jetson-bundle"),
    (["mlp:small", "--to", "nir", "--precision", "fp16"], "--precision applies to --to onnx"),
    (["mlp:small", "--to", "jetson-bundle", "--calibrator", "minmax"], "apply to --precision int8"),
    (["mlp:small", "--to", "tensorrt", "--cuda-graph"],
     "--cuda-graph applies to --to jetson-bundle"),
    (["mlp:small", "--to", "jetson-bundle", "--timing-cache", "t.cache"], "--timing-cache applies"),
    (["mlp:small", "--to", "jetson-bundle", "--min-shape", "input:1x1x8x8"], "together"),
    (["mlp:small", "--to", "jetson-bundle", "--opt-shape", "input:4x1x8x8"], "fixed at 1"),
    (["mlp:small", "--to", "jetson-bundle", "--precision", "fp32", "--dla-core", "0"], "DLA"),
    (["mlp:small", "--dynamic-batch", "--batch", "4"], "exclude each other"),
])
def test_export_option_errors(args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["export", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0]
    leftovers = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert leftovers == []


def test_options_for_a_model_are_refused_for_an_artifact(tmp_path):
    export_onnx(load_model_source("mlp:small"), tmp_path / "art")
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "art"), "--to", "jetson-bundle",
                                      "--batch", "2"])
    assert result.exit_code == 2 and "already an ONNX artifact" in result.stderr


# -- benchmarks/gpu_check.sh --------------------------------------------------------------------

GPU_CHECK = REPO / "benchmarks" / "gpu_check.sh"
SCRIPT_VARIABLES = {"m": "ds-cnn", "p": "fp16", "first": "ds-cnn", "WORK": "/tmp/w",
                    "RESULTS": "/tmp/r", "BATCH": "8", "DURATION": "2"}


def _logical_lines(text: str) -> list[str]:
    return re.sub(r"\\\n\s*", " ", text).splitlines()


def test_gpu_check_script_is_valid_bash():
    proc = subprocess.run(["bash", "-n", str(GPU_CHECK)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_gpu_check_edgekit_commands_parse():
    commands = []
    for line in _logical_lines(GPU_CHECK.read_text()):
        stripped = line.strip()
        if not stripped.startswith("step ") or " ek " not in f" {stripped} ":
            continue
        # the script's variables, with the values of one loop iteration; an unknown one fails
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda mt: SCRIPT_VARIABLES[mt.group(1)], stripped)
        tokens = shlex.split(expanded)
        assert tokens[2] == "ek", tokens
        commands.append(parse_command(["edgekit", *tokens[3:]]))
    names = [name for name, _ in commands]
    assert {"train", "export", "validate", "profile", "devices"} <= set(names)
    profiles = [(p["backend"], p["provider"]) for name, p in commands if name == "profile"]
    assert {("tensorrt", None), ("onnxruntime", "cuda"), ("onnxruntime", "tensorrt"),
            ("torch", "cuda")} <= set(profiles)
    assert all(p["energy"] == "nvml" for name, p in commands if name == "profile")
    formats = {p["fmt"] for name, p in commands if name == "export"}
    assert formats == {"onnx", "tensorrt", "jetson-bundle"}
    assert any(p.get("cuda_graph") for name, p in commands if name == "profile")
    text = GPU_CHECK.read_text()
    assert "for p in fp32 fp16 int8" in text and '"${OUT:-benchmarks/results/gpu_check}"' in text
