"""Issue 17: numbers that hang a command (nan, inf), numbers the machine cannot hold, and inputs
that were accepted when they should be refused. Every refusal is one line and exit code 2,
before any work.

The option cases use a target that does not exist where a command takes one: on the old code a
value that got past the parser then failed on the target with another message, so the check
that the message names the option tells the two apart without running anything.
"""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from edgekit.cli import cli
from edgekit.errors import UsageError

NAN_INF = ("nan", "inf", "-inf")
HUGE_FLOAT = "1e300"
HUGE_INT = str(10**12)

# (command line before the option, option, values it must refuse)
FLOAT_OPTIONS = [
    (["profile", "no-such-model"], "--duration", (*NAN_INF, HUGE_FLOAT)),
    (["profile", "no-such-model"], "--warmup", (*NAN_INF, HUGE_FLOAT)),
    (["compare", "no-such-model"], "--duration", (*NAN_INF, HUGE_FLOAT)),
    (["simulate", "no-such-model"], "--duration", (*NAN_INF, HUGE_FLOAT)),
    (["train", "no-such-model"], "--seconds", (*NAN_INF, HUGE_FLOAT)),
    (["train", "no-such-model"], "--validation", (*NAN_INF, HUGE_FLOAT, "0", "1")),
    (["export", "no-such-model"], "--atol", NAN_INF),
    (["export", "no-such-model"], "--rtol", NAN_INF),
    (["validate", "no-such-artifact"], "--atol", NAN_INF),
    (["validate", "no-such-artifact"], "--rtol", NAN_INF),
    (["moe", "serve", "no-such-store", "--prompt", "x"], "--bandwidth", (*NAN_INF, HUGE_FLOAT)),
    (["moe", "serve", "no-such-store", "--prompt", "x"], "--full-ratio", NAN_INF),
    (["astra", "run", "--fault", "bogus"], "--latency-ms", ("nan", HUGE_FLOAT)),
    (["astra", "run", "--fault", "bogus"], "--budget-s", (*NAN_INF, HUGE_FLOAT)),
    (["astra", "run", "--fault", "bogus"], "--timeout", (*NAN_INF, HUGE_FLOAT)),
    (["astra", "bench", "--bandwidth", "bogus"], "--budget-s", (*NAN_INF, HUGE_FLOAT)),
    (["astra", "model"], "--gflops", (*NAN_INF, HUGE_FLOAT)),
    (["astra", "model"], "--single-s", (*NAN_INF, HUGE_FLOAT)),
    (["astra", "model"], "--latency-ms", ("nan", HUGE_FLOAT)),
    (["astra", "model"], "--loss", ("nan",)),
]
INT_OPTIONS = [
    (["profile", "no-such-model"], "--batch", (HUGE_INT,)),
    (["train", "no-such-model"], "--validate-every", (HUGE_INT, "0")),
    (["profile", "no-such-model"], "--threads", (str(2**40),)),
    (["profile", "no-such-model"], "--iterations", (str(2**63),)),
    (["compare", "no-such-model"], "--batch", (HUGE_INT,)),
    (["compare", "no-such-model"], "--threads", (str(2**40),)),
    (["simulate", "no-such-model"], "-T", (str(10**9),)),
    (["simulate", "no-such-model"], "--samples", (HUGE_INT,)),
    (["simulate", "no-such-model"], "--threads", (str(2**40),)),
    (["train", "no-such-model"], "--seed", (str(2**32), "-1", str(2**64))),
    (["export", "no-such-model"], "--batch", ("0", HUGE_INT)),
    (["moe", "serve", "no-such-store", "--prompt", "x"], "--threads", (str(2**40),)),
    (["moe", "serve", "no-such-store", "--prompt", "x"], "--workers", (str(2**40),)),
    (["moe", "serve", "no-such-store", "--prompt", "x"], "--max-new-tokens", (HUGE_INT,)),
    (["astra", "run", "--fault", "bogus"], "--world-size", (str(10**6),)),
    (["astra", "run", "--fault", "bogus"], "--threads", (str(2**40),)),
    (["astra", "run", "--fault", "bogus"], "--seed", (str(2**32),)),
    (["astra", "run", "--fault", "bogus"], "--tokens", (HUGE_INT,)),
    (["astra", "model"], "--world-size", (HUGE_INT,)),
    (["astra", "model"], "--groups", ("0",)),
]
CASES = [pytest.param(head, option, value, id=f"{' '.join(head[:2])} {option} {value}")
         for head, option, values in FLOAT_OPTIONS + INT_OPTIONS for value in values]


def _refused(args: list[str]) -> str:
    """Run the real CLI in-process; assert one error line and exit code 2; return the line."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (args, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgekit: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(("head", "option", "value"), CASES)
def test_bad_numbers_are_refused_by_the_parser(head, option, value):
    # --opt=value, so that "-inf" is not read as an option
    given = [f"{option}={value}"] if option.startswith("--") else [option, value]
    line = _refused([*head, *given])
    assert option in line, line


@pytest.mark.parametrize("args", [
    ["profile", "mlp", "--duration", "nan"],
    ["compare", "mlp", "--duration", "inf"],
], ids=lambda a: " ".join(a))
def test_options_that_hung_fail_at_once(args):
    """These hung before (``nan <= 0`` is false); a regression fails here instead of hanging."""
    proc = subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("edgekit: error: ") and "finite" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kwargs", [{"duration_s": math.nan}, {"duration_s": math.inf},
                                    {"warmup_s": math.nan}, {"warmup_s": math.inf}])
def test_timing_plan_refuses_non_finite_seconds(kwargs):
    from edgekit.profiler.timing import TimingPlan

    with pytest.raises(UsageError, match="finite"):
        TimingPlan(**kwargs)


@pytest.mark.parametrize("kwargs", [{"budget_s": math.nan}, {"timeout_s": math.inf}])
def test_astra_run_spec_refuses_non_finite_seconds(kwargs):
    from edgekit.methods.astra.runtime.spec import RunSpec

    with pytest.raises(UsageError):
        RunSpec(modes=("single",), **kwargs)


@pytest.mark.parametrize("atol", [math.nan, math.inf, -1.0])
def test_tolerance_check_refuses_non_finite(atol):
    from edgekit.exporters.validate import check_tolerances

    with pytest.raises(UsageError, match="--atol"):
        check_tolerances(atol, 0.0)


@pytest.mark.parametrize("text", ["9" * 400, "9" * 400 + "MiB", "2PiB", "1e6TB", "1e400"])
def test_memory_budget_beyond_the_machine_is_refused(text):
    from edgekit.methods.zipmoe.engine import parse_size

    with pytest.raises(UsageError):
        parse_size(text, total_expert_bytes=2**20)


def test_memory_budget_of_400_digits_is_one_line_on_the_cli(tmp_path):
    """parse_size made inf of it and ``int(inf)`` raised OverflowError (a traceback)."""
    store = tmp_path / "store"
    assert CliRunner().invoke(cli, ["moe", "make-tiny", str(tmp_path / "ckpt")]).exit_code == 0
    assert CliRunner().invoke(cli, ["moe", "compress", str(tmp_path / "ckpt"), "-o",
                                    str(store)]).exit_code == 0
    line = _refused(["moe", "serve", str(store), "--prompt", "x",
                     "--memory-budget", "9" * 400])
    assert "size" in line


# Accepted when it should be refused --------------------------------------------------------


def _npz(path, x, y, **more):
    np.savez(path, x=x, y=y, **more)
    return str(path)


def test_training_data_with_nan_is_refused_naming_file_and_array(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((40, 1, 8, 8), dtype=np.float32)
    x[3, 0, 2, 2] = np.nan
    data = _npz(tmp_path / "bad.npz", x, rng.integers(0, 10, 40))
    out = tmp_path / "m.safetensors"
    line = _refused(["train", "mlp:small", "--data", data, "-o", str(out), "--seconds", "5"])
    assert "bad.npz" in line and "array x" in line and "non-finite" in line
    assert not out.exists()


def test_test_split_with_inf_is_refused(tmp_path):
    from edgekit.data import load_npz
    from edgekit.registry import get_entry

    x = np.zeros((20, 1, 8, 8), np.float64)
    x_test = x.copy()
    x_test[0, 0, 0, 0] = 1e300  # finite as float64, inf as the model's float32
    path = _npz(tmp_path / "d.npz", x, np.zeros(20, int), x_test=x_test, y_test=np.zeros(20, int))
    with pytest.raises(UsageError, match="array x_test"):
        load_npz(path, get_entry("mlp").task)


def test_empty_training_split_is_refused(tmp_path):
    x = np.zeros((0, 1, 8, 8), np.float32)
    data = _npz(tmp_path / "empty.npz", x, np.zeros(0, int),
                x_test=np.zeros((10, 1, 8, 8), np.float32), y_test=np.zeros(10, int))
    out = tmp_path / "m.safetensors"
    line = _refused(["train", "mlp:small", "--data", data, "-o", str(out), "--seconds", "5"])
    assert "training split" in line and "empty" in line
    assert not out.exists()


def test_export_with_infinite_atol_is_refused_before_any_work(tmp_path):
    out = tmp_path / "onnx"
    line = _refused(["export", "mlp:small", "--atol", "inf", "-o", str(out)])
    assert "--atol" in line and not out.exists()


def test_empty_variant_is_refused_listing_the_valid_names():
    line = _refused(["train", "ds-cnn:"])
    assert "unknown model 'ds-cnn:'" in line and "ds-cnn:wide" in line


def test_unknown_family_is_refused_listing_the_valid_ones():
    line = _refused(["models", "--family", "nosuch"])
    assert "unknown model family 'nosuch'" in line and "reference" in line


def test_astra_model_refuses_groups_that_do_not_divide_dim():
    line = _refused(["astra", "model", "--groups", "5"])
    assert "divisor" in line


@pytest.mark.parametrize("rewrite_hash", [False, True], ids=["bytes", "bytes-and-hash"])
def test_jetson_bundle_of_a_corrupt_model_fails(tmp_path, rewrite_hash):
    import json

    from edgekit.exporters.artifact import file_record, manifest_digest

    art = tmp_path / "art"
    assert CliRunner().invoke(cli, ["export", "mlp:small", "-o", str(art)]).exit_code == 0
    (art / "model.onnx").write_bytes(np.random.default_rng(0).bytes(4096))
    if rewrite_hash:
        manifest = json.loads((art / "manifest.json").read_text())
        manifest["files"]["model.onnx"] = file_record(art / "model.onnx")
        manifest["manifest_sha256"] = manifest_digest(manifest)
        (art / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "bundle"
    line = _refused(["export", str(art), "--to", "jetson-bundle", "--precision", "fp16",
                     "-o", str(out)])
    assert "model.onnx" in line and not out.exists()
