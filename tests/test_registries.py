"""Properties every registered extension must have, generated from each registry (as timm's
tests run over ``list_models()``): datasets, backends, energy meters, precisions, device profiles.
A new entry is tested for free."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.backends import get_backend, list_backends
from edgekit.backends.registry import register_backend
from edgekit.data import get_dataset, list_datasets, load_dataset, register_dataset
from edgekit.energy.registry import get_meter, list_meters, register_meter
from edgekit.errors import (
    MissingDependencyError,
    ProfileError,
    ProfileWarning,
    SensorError,
    UnknownNameError,
    UsageError,
)
from edgekit.precisions import (
    all_names,
    get_precision,
    list_precisions,
    register_precision,
    tensorrt_names,
)
from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.timing import TimingPlan
from edgekit.profiles import (
    detect_profile,
    list_profiles,
    load_profile,
    profile_names,
    profile_source,
    user_profile_dir,
)
from edgekit.profiles.device_profile import SENSOR_KINDS
from edgekit.profiles.loader import PROFILE_DIR
from edgekit.registry import get_entry, list_models, register_model

DATASETS = list_datasets()


@pytest.mark.parametrize("entry", DATASETS, ids=lambda e: e.name)
def test_every_dataset_loads_in_the_shape_of_the_task_it_owns(entry, request):
    if entry.name == "wifi-pose-sim":  # simulated once per test run, not once more here
        request.getfixturevalue("wifi_pose_sim")
    task = entry.task
    data = load_dataset(task)
    assert data.name == entry.name == task.dataset
    for x, y in ((data.x_train, data.y_train), (data.x_test, data.y_test)):
        assert len(x) == len(y) > 0
        assert x.shape[1:] == task.input_shape
        assert x.dtype == np.dtype(task.input_dtype)
        if task.num_classes:  # classification: integer labels covering every class
            assert y.dtype.kind == "i" and y.min() >= 0 and y.max() < task.num_classes
    if task.num_classes:
        assert set(np.unique(data.y_train)) == set(range(task.num_classes))


@pytest.mark.parametrize("entry", list_models(), ids=lambda e: e.name)
def test_every_model_takes_its_task_from_the_dataset_that_owns_it(entry):
    assert entry.task is get_dataset(entry.task.dataset).task


@pytest.mark.parametrize("precision", list_precisions(), ids=lambda p: p.name)
def test_every_precision_is_known_to_the_profile_schema_and_calibration(precision):
    from edgekit.profiles.calibrate import _skip_reason

    assert precision.name in all_names()
    if precision.torch_dtype is None:  # no GEMM to time: calibration says why it skips it
        assert "kernel of its own" in _skip_reason(precision.name, "cpu")
    else:
        assert isinstance(getattr(torch, precision.torch_dtype), torch.dtype)
        assert _skip_reason(precision.name, "cuda") is None


def test_a_precision_registered_after_import_reaches_every_reader(tmp_path):
    """The name lists are read when asked: a precision a plugin registers after the profile
    loader, the engine config and the trtexec command lines were imported is known to all of
    them (in a process of its own: the registry cannot forget a name)."""
    board = tmp_path / "fp6-board.toml"
    board.write_text((PROFILE_DIR / "nvidia-h200.toml").read_text()
                     .replace('name = "nvidia-h200"', 'name = "fp6-board"')
                     .replace("[peak]\n", "[peak]\nfp6 = 1.5\n")
                     .replace("[sources]\n", '[sources]\n"peak.fp6" = "a test figure"\n'))
    code = textwrap.dedent(f"""
        from edgekit.exporters.tensorrt import EngineBuildConfig, trtexec_build_args
        from edgekit.precisions import (Precision, all_names, calibrated_names, onnx_names,
                                        register_precision, tensorrt_names)
        from edgekit.profiles import load_profile

        register_precision(Precision(name="fp6", torch_dtype=None, roundoff=2.0**-3, onnx=True,
                                     calibrate=True, trtexec_flag="--fp6", builder_flag="FP6"))
        for names in (all_names, calibrated_names, onnx_names, tensorrt_names):
            assert "fp6" in names(), names
        assert "--fp6" in trtexec_build_args(EngineBuildConfig(precision="fp6"))
        assert load_profile({str(board)!r}).peak_flops["fp6"] == 1.5e12
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.parametrize("name", tensorrt_names())
def test_every_engine_precision_is_a_cli_choice_with_its_own_switches(name):
    from edgekit.cli.export import export
    from edgekit.exporters.tensorrt import EngineBuildConfig, trtexec_build_args

    choices = next(p for p in export.params if p.name == "precision").type.choices
    assert name in choices
    args = trtexec_build_args(EngineBuildConfig(precision=name))
    others = [trtexec_build_args(EngineBuildConfig(precision=p))
              for p in tensorrt_names() if p != name]
    assert all(a != args for a in others)  # trtexec builds each precision differently
    builder_flags = [get_precision(p).builder_flag for p in tensorrt_names()]
    assert builder_flags.count(get_precision(name).builder_flag) == 1  # so does the builder


def _choices(command, option: str) -> list[str]:
    return list(next(p for p in command.params if p.name == option).type.choices)


@pytest.mark.parametrize("spec", list_backends(), ids=lambda s: s.name)
def test_every_backend_is_a_cli_choice_with_the_settings_it_declares(spec):
    from edgekit.cli.compare import compare
    from edgekit.cli.profile import profile as profile_cmd

    assert spec.name in _choices(profile_cmd, "backend")
    backends = next(p for p in compare.params if p.name == "backends")  # a comma list
    assert backends.type.convert(spec.name, backends, None) == (spec.name,)
    assert set(spec.providers) <= set(_choices(profile_cmd, "provider"))
    for provider in spec.providers:
        ProfileSettings(backend=spec.name, provider=provider)
    for provider in set(_choices(profile_cmd, "provider")) - set(spec.providers):
        with pytest.raises(UsageError, match=f"does not apply to --backend {spec.name}"):
            ProfileSettings(backend=spec.name, provider=provider)
    if "cuda_graph" in spec.options:
        ProfileSettings(backend=spec.name, cuda_graph=True)
    else:
        with pytest.raises(UsageError, match="--cuda-graph applies to"):
            ProfileSettings(backend=spec.name, cuda_graph=True)


def test_every_backend_only_option_of_the_cli_is_honoured_by_a_backend():
    from edgekit.cli.profile import profile as profile_cmd

    honoured = {option for s in list_backends() for option in s.options}
    assert "cuda_graph" in {p.name for p in profile_cmd.params} and "cuda_graph" in honoured


@pytest.mark.parametrize("spec", list_backends(), ids=lambda s: s.name)
def test_every_backend_profiles_a_registry_model_where_it_can_run(spec):
    """The profiler needs nothing but the spec: opening, feeding and timing go through it."""
    try:
        spec.check(None)
    except MissingDependencyError as exc:
        pytest.skip(f"{spec.name} cannot run here: {exc}")
    plan = TimingPlan(warmup_s=0.0, min_warmup_iterations=1, iterations=3)
    report = profile("mlp:small", ProfileSettings(backend=spec.name, plan=plan, energy="none"))
    assert report["backend"]["backend"] == spec.name
    assert report["iterations"] == 3 and report["model_size"]["bytes"] > 0


@pytest.mark.parametrize("spec", list_meters(), ids=lambda s: s.name)
def test_every_meter_has_a_probe_and_opens_only_where_it_finds_its_sensor(spec, tmp_path):
    from edgekit.cli.compare import compare
    from edgekit.cli.profile import profile as profile_cmd

    assert spec.name in _choices(profile_cmd, "energy") and spec.name in _choices(compare, "energy")
    present = spec.probe(tmp_path)  # an empty filesystem root: no sysfs sensor lives here
    assert isinstance(present, bool)
    if not spec.sensor:  # an estimate or no figure: never shown as a measurement
        meter = spec.open(load_profile("jetson-orin-nano-8gb"), tmp_path, {})
        meter.begin()
        assert not meter.end().measured
    else:  # the probe and a trial read agree on whether the sensor is here
        try:
            spec.open(None, tmp_path, {}).close()
        except (SensorError, MissingDependencyError):
            assert not present, f"{spec.name}'s probe finds a sensor that does not open"
        else:
            assert present, f"{spec.name} opens a sensor its probe does not find"


def test_the_sensor_meters_are_the_sensor_kinds_a_profile_may_name():
    assert {s.name for s in list_meters() if s.sensor} == set(SENSOR_KINDS) - {"none"}


def _user_copy(packaged: str, name: str) -> Path:
    """A user profile: a packaged file under another name, in $EDGEKIT_HOME/profiles."""
    text = (PROFILE_DIR / f"{packaged}.toml").read_text()
    path = user_profile_dir() / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(f'name = "{packaged}"', f'name = "{name}"', 1))
    return path


def _edgekit(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")  # EDGEKIT_HOME: the test's, from conftest
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.parametrize("packaged", profile_names())
def test_every_packaged_profile_loads_the_same_as_a_user_profile(packaged):
    path = _user_copy(packaged, f"my-{packaged}")
    mine = load_profile(f"my-{packaged}")
    assert mine.path == path and profile_source(mine) == "user"
    assert profile_source(load_profile(packaged)) == "packaged"
    assert replace(mine, name=packaged, path=None) == replace(load_profile(packaged), path=None)
    assert f"my-{packaged}" in [p.name for p in list_profiles()]


def test_a_user_profile_is_listed_with_its_source_by_edgekit_devices(tmp_path):
    _user_copy("jetson-nano", "lab-nano")
    proc = _edgekit("devices", "--json", str(tmp_path / "d.json"))
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if " lab-nano " in line)
    assert row.split()[-1] == "user"
    profiles = json.loads((tmp_path / "d.json").read_text())["profiles"]
    sources = {p["name"]: p["source"] for p in profiles}
    assert sources["lab-nano"] == "user" and sources["jetson-nano"] == "packaged"


@pytest.mark.parametrize(("text", "problem"), [
    ("name = [unclosed", "invalid TOML"),
    ('name = "broken"\nkind = "jetson"\ncolour = "red"\n', "colour"),
])
def test_a_malformed_user_profile_is_left_out_with_a_warning_naming_it(text, problem):
    path = user_profile_dir() / "broken.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    _user_copy("jetson-nano", "lab-nano")  # a good user profile beside it still counts
    with pytest.warns(ProfileWarning, match=problem) as caught:
        names = [p.name for p in list_profiles()]
    assert "broken" not in names and {"lab-nano", "jetson-nano"} <= set(names)
    (warning,) = caught
    assert str(path) in str(warning.message) and "\n" not in str(warning.message)
    with pytest.warns(ProfileWarning):
        detect_profile()  # detection goes on without it
    with pytest.raises(ProfileError, match=problem):  # asked for by name, it is an error
        load_profile("broken")


def test_a_malformed_user_profile_is_one_warning_line_from_the_cli():
    path = user_profile_dir() / "broken.toml"
    path.parent.mkdir(parents=True)
    path.write_text("name = [unclosed")
    proc = _edgekit("devices")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("edgekit: warning:") and str(path) in lines[0]
    assert "invalid TOML" in lines[0] and "* detected:" in proc.stdout
    proc = _edgekit("devices", "--show", "broken")
    assert proc.returncode == 2 and str(path) in proc.stderr


def test_a_user_profile_may_not_shadow_a_packaged_one():
    path = _user_copy("jetson-nano", "jetson-nano")
    with pytest.raises(ProfileError, match="would shadow") as info:
        load_profile("jetson-nano")
    assert str(path) in str(info.value)
    assert str(PROFILE_DIR / "jetson-nano.toml") in str(info.value)
    with pytest.warns(ProfileWarning, match="would shadow"):  # listed: the packaged one
        listed = [p for p in list_profiles() if p.name == "jetson-nano"]
    assert [p.path for p in listed] == [PROFILE_DIR / "jetson-nano.toml"]


# --- the one registry type behind them all ----------------------------------------------------

REGISTER_AGAIN = {
    "model": lambda: register_model(get_entry("mlp")),
    "dataset": lambda: register_dataset(get_dataset("digits")),
    "backend": lambda: register_backend(get_backend("torch")),
    "energy meter": lambda: register_meter(get_meter("rapl")),
    "precision": lambda: register_precision(get_precision("fp32")),
}


@pytest.mark.parametrize("kind", REGISTER_AGAIN)
def test_every_kind_refuses_a_name_registered_twice(kind):
    with pytest.raises(ValueError, match=f"{kind} '.*' is registered twice"):
        REGISTER_AGAIN[kind]()


@pytest.mark.parametrize(("get", "kind", "known"), [
    (get_entry, "model", "mlp"), (get_dataset, "dataset", "digits"),
    (get_backend, "backend", "onnxruntime"), (get_meter, "energy meter", "auto"),
    (get_precision, "precision", "int8")])
def test_an_unknown_name_lists_the_valid_ones(get, kind, known):
    with pytest.raises(UnknownNameError, match=f"unknown {kind} 'nosuch'.*{known}"):
        get("nosuch")
