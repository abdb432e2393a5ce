"""The TensorRT path without TensorRT: build configuration, trtexec commands, the builder calls
(against a stand-in tensorrt module), INT8 calibration batching and its cache, the runner's
binding checks, ONNX Runtime providers and the one-line errors where TensorRT or a GPU is
missing. The tests marked ``gpu`` build and run real engines and skip elsewhere."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgekit.backends import execution_providers
from edgekit.backends.base import Runner
from edgekit.backends.tensorrt_runner import (
    IOSpec,
    require_cuda_gpu,
    require_tensorrt,
    resolve_input_shapes,
)
from edgekit.cli import cli
from edgekit.errors import MissingDependencyError, UnknownNameError, UsageError
from edgekit.exporters.calibration import (
    CalibrationBatcher,
    CalibrationSamples,
    cache_calibrator,
    default_cache_path,
    make_trt_calibrator,
    read_calibration_cache,
    samples_from_dataset,
    select_samples,
    write_calibration_cache,
)
from edgekit.exporters.tensorrt import (
    EngineBuildConfig,
    ShapeRange,
    calibration_shapes,
    configure_builder,
    network_flags,
    parse_shape,
    parse_shapes,
    resolve_profile,
    shape_ranges,
    trtexec_build_args,
    trtexec_run_args,
)
from edgekit.profiler.run import ProfileSettings

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
HAS_GPU = torch.cuda.is_available()
gpu = pytest.mark.skipif(not (HAS_TENSORRT and HAS_GPU),
                         reason="needs TensorRT and a CUDA GPU"
                                f" (tensorrt {'found' if HAS_TENSORRT else 'missing'}, "
                                f"CUDA {'available' if HAS_GPU else 'unavailable'})")
no_trt_here = pytest.mark.skipif(HAS_TENSORRT and HAS_GPU,
                                 reason="TensorRT and a GPU are present: the command would build")

DYNAMIC_INPUT = [{"name": "input", "shape": ["batch", 1, 8, 8], "dtype": "float32"}]
STATIC_INPUT = [{"name": "input", "shape": [1, 1, 8, 8], "dtype": "float32"}]


# -- shapes and the build config ------------------------------------------------------------------


def test_parse_shapes_trtexec_syntax():
    assert parse_shape("input:1x1x8x8") == ("input", (1, 1, 8, 8))
    assert parse_shape("'in:0':2X3") == ("in:0", (2, 3))
    assert parse_shapes(["a:1x3,b:2x5", "c:7"], "--opt-shape") == {
        "a": (1, 3), "b": (2, 5), "c": (7,)}
    for bad, fragment in (("input", "NAME:DIMS"), ("input:1xax8", "integers"),
                          ("input:0x1", "at least 1"), (":1x2", "NAME:DIMS")):
        with pytest.raises(UsageError, match=fragment):
            parse_shape(bad)
    with pytest.raises(UsageError, match="twice"):
        parse_shapes(["a:1", "a:2"], "--min-shape")


def test_shape_ranges_need_all_three_or_opt_alone():
    (r,) = shape_ranges(["input:1x1x8x8"], ["input:8x1x8x8"], ["input:32x1x8x8"])
    assert (r.min, r.opt, r.max) == ((1, 1, 8, 8), (8, 1, 8, 8), (32, 1, 8, 8))
    (fixed,) = shape_ranges(opt_shapes=["input:4x1x8x8"])
    assert fixed.fixed and fixed.min == fixed.max == (4, 1, 8, 8)
    with pytest.raises(UsageError, match="together, or --opt-shape alone"):
        shape_ranges(["input:1x1x8x8"], [], ["input:32x1x8x8"])
    with pytest.raises(UsageError, match="min <= opt <= max"):
        shape_ranges(["input:8x1x8x8"], ["input:1x1x8x8"], ["input:32x1x8x8"])
    with pytest.raises(UsageError, match="different numbers of dimensions"):
        ShapeRange("input", (1, 1), (1, 1, 1), (1, 1, 1))


def test_build_config_validation():
    with pytest.raises(UnknownNameError, match="fp32, fp16, int8|fp16, fp32, int8"):
        EngineBuildConfig(precision="bf16")
    with pytest.raises(UsageError, match="--workspace"):
        EngineBuildConfig(workspace_mib=0)
    with pytest.raises(UsageError, match="DLA runs fp16 or int8"):
        EngineBuildConfig(dla_core=0)
    with pytest.raises(UnknownNameError, match="entropy"):
        EngineBuildConfig(precision="int8", calibrator="percentile")
    with pytest.raises(UsageError, match="--calib-samples"):
        EngineBuildConfig(precision="int8", calib_samples=0)
    config = EngineBuildConfig.from_options(
        precision="int8", workspace=256, min_shapes=["input:1x1x8x8"],
        opt_shapes=["input:8x1x8x8"], max_shapes=["input:32x1x8x8"], calibrator="minmax")
    doc = config.to_dict()
    assert doc["precision"] == "int8" and doc["calibrator"] == "minmax"
    assert doc["shapes"][0]["opt"] == [8, 1, 8, 8]
    assert Path(doc["timing_cache"]).parts[-2:] == ("tensorrt", "timing.cache")


def test_resolve_profile_against_the_onnx_inputs():
    (default,) = resolve_profile((), DYNAMIC_INPUT)
    assert (default.min, default.opt, default.max) == ((1, 1, 8, 8), (1, 1, 8, 8), (32, 1, 8, 8))
    (static,) = resolve_profile((), STATIC_INPUT)
    assert static.fixed and static.opt == (1, 1, 8, 8)
    given = shape_ranges(["input:2x1x8x8"], ["input:4x1x8x8"], ["input:16x1x8x8"])
    assert resolve_profile(given, DYNAMIC_INPUT) == given
    with pytest.raises(UsageError, match="fixed at 1 .* --dynamic-batch"):
        resolve_profile(given, STATIC_INPUT)
    with pytest.raises(UnknownNameError, match="valid: input"):
        resolve_profile(shape_ranges(opt_shapes=["image:1x3"]), DYNAMIC_INPUT)
    with pytest.raises(UsageError, match="4 dimensions"):
        resolve_profile(shape_ranges(opt_shapes=["input:1x64"]), DYNAMIC_INPUT)


def _samples(n=10, shape=(1, 8, 8)):
    x = np.arange(n * int(np.prod(shape)), dtype=np.float32).reshape(n, *shape)
    return CalibrationSamples({"input": x}, "test")


def test_calibration_shapes_follow_the_model_batch():
    samples = _samples()
    assert calibration_shapes(resolve_profile((), STATIC_INPUT), STATIC_INPUT, samples, None) == (
        1, {"input": (1, 1, 8, 8)})
    assert calibration_shapes(resolve_profile((), DYNAMIC_INPUT), DYNAMIC_INPUT, samples,
                              None)[0] == 32
    assert calibration_shapes(resolve_profile((), DYNAMIC_INPUT), DYNAMIC_INPUT, samples, 4) == (
        4, {"input": (4, 1, 8, 8)})
    with pytest.raises(UsageError, match="fixed batch of 1"):
        calibration_shapes(resolve_profile((), STATIC_INPUT), STATIC_INPUT, samples, 8)
    with pytest.raises(UsageError, match="have shape 3x8x8"):
        calibration_shapes((), STATIC_INPUT, _samples(shape=(3, 8, 8)), None)


# -- trtexec --------------------------------------------------------------------------------------


def test_trtexec_commands_match_the_config():
    ranges = shape_ranges(["input:1x1x8x8"], ["input:8x1x8x8"], ["input:32x1x8x8"])
    int8 = EngineBuildConfig(precision="int8", workspace_mib=512, shapes=ranges)
    assert trtexec_build_args(int8, ranges, True, calib_cache="calibration.cache",
                              timing_cache="timing.cache") == [
        "trtexec", "--onnx=model.onnx", "--saveEngine=model.engine", "--int8",
        "--calib=calibration.cache", "--minShapes=input:1x1x8x8", "--optShapes=input:8x1x8x8",
        "--maxShapes=input:32x1x8x8", "--memPoolSize=workspace:512M",
        "--timingCacheFile=timing.cache"]
    assert trtexec_build_args(EngineBuildConfig(), resolve_profile((), STATIC_INPUT), False) == [
        "trtexec", "--onnx=model.onnx", "--saveEngine=model.engine", "--noTF32"]
    dla = EngineBuildConfig(precision="fp16", dla_core=1)
    assert trtexec_build_args(dla)[3:] == ["--fp16", "--useDLACore=1", "--allowGPUFallback"]
    assert trtexec_run_args("e.engine", ranges, True, cuda_graph=True) == [
        "trtexec", "--loadEngine=e.engine", "--shapes=input:8x1x8x8", "--warmUp=200",
        "--duration=3", "--useCudaGraph"]


# -- builder calls, against a stand-in tensorrt module --------------------------------------------


class _Profile:
    def __init__(self):
        self.shapes = {}

    def set_shape(self, name, lo, opt, hi):
        self.shapes[name] = (tuple(lo), tuple(opt), tuple(hi))


class _Builder:
    def __init__(self, dla_cores=2):
        self.num_DLA_cores = dla_cores
        self.profiles = []

    def create_optimization_profile(self):
        self.profiles.append(_Profile())
        return self.profiles[-1]


class _Config:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):  # every builder-config method records its call
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs)) or ("cache", args)


class _CalibratorBase:
    def __init__(self):
        self.base_init = True


def _fake_trt(version="10.3.0"):
    flags = SimpleNamespace(FP16="FP16", INT8="INT8", TF32="TF32", GPU_FALLBACK="GPU_FALLBACK")
    return SimpleNamespace(
        __version__=version, BuilderFlag=flags, MemoryPoolType=SimpleNamespace(WORKSPACE="WS"),
        DeviceType=SimpleNamespace(DLA="DLA", GPU="GPU"),
        NetworkDefinitionCreationFlag=SimpleNamespace(EXPLICIT_BATCH=0),
        IInt8EntropyCalibrator2=type("IInt8EntropyCalibrator2", (_CalibratorBase,), {}),
        IInt8MinMaxCalibrator=type("IInt8MinMaxCalibrator", (_CalibratorBase,), {}))


def _names(config):
    return [(name, args) for name, args, _ in config.calls]


def test_configure_builder_fp16_dynamic_workspace():
    trt, builder, config = _fake_trt(), _Builder(), _Config()
    ranges = shape_ranges(["input:1x1x8x8"], ["input:8x1x8x8"], ["input:32x1x8x8"])
    build = EngineBuildConfig(precision="fp16", workspace_mib=64, shapes=ranges)
    applied = configure_builder(trt, builder, config, build, ranges, True, timing_cache=b"abc")
    calls = _names(config)
    assert ("set_memory_pool_limit", ("WS", 64 << 20)) in calls
    assert ("set_flag", ("FP16",)) in calls and ("set_flag", ("INT8",)) not in calls
    assert ("add_optimization_profile", (builder.profiles[0],)) in calls
    assert builder.profiles[0].shapes == {"input": ((1, 1, 8, 8), (8, 1, 8, 8), (32, 1, 8, 8))}
    assert ("create_timing_cache", (b"abc",)) in calls
    assert applied["timing_cache_loaded_bytes"] == 3 and applied["workspace_bytes"] == 64 << 20


def test_configure_builder_fp32_is_true_fp32_and_static_needs_no_profile():
    trt, builder, config = _fake_trt(), _Builder(), _Config()
    configure_builder(trt, builder, config, EngineBuildConfig(), resolve_profile((), STATIC_INPUT),
                      False)
    calls = _names(config)
    assert ("clear_flag", ("TF32",)) in calls
    assert not builder.profiles and not any(n == "set_flag" for n, _ in calls)


def test_configure_builder_int8_with_calibration_profile():
    trt, builder, config = _fake_trt(), _Builder(), _Config()
    ranges = resolve_profile((), DYNAMIC_INPUT)
    build = EngineBuildConfig(precision="int8")
    calibrator = object()
    applied = configure_builder(trt, builder, config, build, ranges, True, calibrator=calibrator,
                                calib_shapes={"input": (32, 1, 8, 8)})
    assert config.int8_calibrator is calibrator
    assert ("set_flag", ("INT8",)) in _names(config)
    cal = builder.profiles[1]
    assert cal.shapes == {"input": ((32, 1, 8, 8),) * 3}
    assert ("set_calibration_profile", (cal,)) in _names(config)
    assert applied["calibrator"] == "entropy"


def test_configure_builder_dla_and_version_limits():
    trt, config = _fake_trt(), _Config()
    configure_builder(trt, _Builder(2), config, EngineBuildConfig(precision="fp16", dla_core=1),
                      (), False)
    assert config.default_device_type == "DLA" and config.DLA_core == 1
    assert ("set_flag", ("GPU_FALLBACK",)) in _names(config)
    with pytest.raises(UsageError, match="has 0 DLA cores.*Orin"):
        configure_builder(trt, _Builder(0), _Config(),
                          EngineBuildConfig(precision="int8", dla_core=0), (), False)
    with pytest.raises(UsageError, match="TensorRT 11.0.0 builds strongly typed.*tensorrt>=10,<11"):
        configure_builder(_fake_trt("11.0.0"), _Builder(), _Config(),
                          EngineBuildConfig(precision="fp16"), (), False)
    configure_builder(_fake_trt("11.4.0"), _Builder(), _Config(), EngineBuildConfig(), (), False)
    assert network_flags(_fake_trt("10.3.0")) == 0 and network_flags(_fake_trt("8.6.1")) == 1


# -- INT8 calibration: samples, batches, the cache, the calibrator --------------------------------


def test_select_samples_is_deterministic():
    x = np.arange(100).reshape(100, 1)
    a, b = select_samples(x, 10), select_samples(x, 10)
    assert np.array_equal(a, b) and len(np.unique(a)) == 10 and np.all(np.diff(a[:, 0]) > 0)
    assert not np.array_equal(a, x[:10])  # a permutation, not the first ten
    assert len(select_samples(x, 1000)) == 100
    with pytest.raises(UsageError):
        select_samples(x, 0)


def test_samples_from_the_entry_dataset():
    from edgekit.registry import get_entry

    samples = samples_from_dataset(get_entry("mlp").task, count=100)
    x = samples.arrays["input"]
    assert x.shape == (100, 1, 8, 8) and x.dtype == np.float32 and 0 <= x.min() <= x.max() <= 1
    assert samples.origin.startswith("digits (train split, 100 of 1437")
    assert samples.digest == samples_from_dataset(get_entry("mlp").task, count=100).digest


def test_batcher_pads_or_drops_the_last_partial_batch():
    samples = _samples(10, (2,))
    rows = samples.arrays["input"]
    pad = CalibrationBatcher(samples, 4)
    assert len(pad) == 3 and pad.padded == 2
    batches = list(pad)
    assert all(b["input"].shape == (4, 2) for b in batches)
    np.testing.assert_array_equal(batches[2]["input"], rows[[8, 9, 0, 1]])
    assert [pad.next_batch() is None for _ in range(4)] == [False, False, False, True]
    pad.reset()
    np.testing.assert_array_equal(pad.next_batch()["input"], rows[:4])
    drop = CalibrationBatcher(samples, 4, last="drop")
    assert len(drop) == 2 and drop.dropped == 2 and drop.record()["batches"] == 2
    with pytest.raises(UsageError, match="do not fill one batch"):
        CalibrationBatcher(samples, 16, last="drop")
    with pytest.raises(UsageError, match="--calib-batch"):
        CalibrationBatcher(samples, 0)


def test_calibration_cache_round_trip(tmp_path, edgekit_home):
    path = tmp_path / "sub" / "c.cache"
    assert read_calibration_cache(path) is None and read_calibration_cache(None) is None
    data = b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n"
    write_calibration_cache(path, data)
    assert read_calibration_cache(path) == data
    assert cache_calibrator(data) == "entropy"
    assert cache_calibrator(b"TRT-8601-MinMaxCalibration\n") == "minmax"
    assert cache_calibrator(b"garbage") is None
    key = default_cache_path("ab" * 32, "entropy", _samples(), 32)
    assert key.is_relative_to(edgekit_home) and key.name.endswith("-entropy-"
                                                                  f"{_samples().digest}-b32.cache")


def test_trt_calibrator_feeds_batches_and_the_cache(tmp_path):
    batcher = CalibrationBatcher(_samples(6, (2,)), 4)
    held = []

    def to_device(array):
        held.append(array)
        return SimpleNamespace(data_ptr=lambda: 1000 + len(held))

    cache = tmp_path / "c.cache"
    cal = make_trt_calibrator(_fake_trt(), "minmax", batcher, cache, to_device=to_device)
    assert type(cal).__mro__[1].__name__ == "IInt8MinMaxCalibrator" and cal.base_init
    assert cal.get_batch_size() == 1  # explicit batch: the batch is in the buffers' shape
    assert cal.read_calibration_cache() is None
    assert cal.get_batch(["input"]) == [1001] and cal.get_batch(["input"]) == [1002]
    assert cal.get_batch(["input"]) is None and cal.batches_served == 2
    np.testing.assert_array_equal(held[1], batcher.batch(1)["input"])
    cal.write_calibration_cache(memoryview(b"TRT-100300-MinMaxCalibration\n"))
    again = make_trt_calibrator(_fake_trt(), "minmax", CalibrationBatcher(_samples(), 4), cache,
                                to_device=to_device)
    assert again.read_calibration_cache() == b"TRT-100300-MinMaxCalibration\n" and again.cache_read
    with pytest.raises(UsageError, match="no input image"):
        make_trt_calibrator(_fake_trt(), "entropy", CalibrationBatcher(_samples(), 4), None,
                            to_device=to_device).get_batch(["image"])
    with pytest.raises(UnknownNameError):
        make_trt_calibrator(_fake_trt(), "percentile", batcher, None)


# -- the runner's bindings -------------------------------------------------------------------------


def test_resolve_input_shapes_checks_the_engine_profile():
    specs = [IOSpec("input", True, np.dtype(np.float32), (-1, 1, 8, 8), (1, 1, 8, 8),
                    (32, 1, 8, 8)),
             IOSpec("logits", False, np.dtype(np.float32), (-1, 10))]
    x = np.zeros((4, 1, 8, 8), np.float32)
    assert resolve_input_shapes(specs, {"input": x}) == {"input": (4, 1, 8, 8)}
    with pytest.raises(UsageError, match=r"1x8x8 \(1x1x8x8 \.\. 32x1x8x8\).*--max-shape"):
        resolve_input_shapes(specs, {"input": np.zeros((64, 1, 8, 8), np.float32)})
    with pytest.raises(UsageError, match="not given"):
        resolve_input_shapes(specs, {})
    with pytest.raises(UsageError, match="no input"):
        resolve_input_shapes(specs, {"input": x, "extra": x})
    with pytest.raises(UsageError, match="4 dimensions"):
        resolve_input_shapes(specs, {"input": np.zeros((4, 64), np.float32)})
    static = [IOSpec("ids", True, np.dtype(np.int32), (1, 5))]
    with pytest.raises(UsageError, match="takes 1x5"):
        resolve_input_shapes(static, {"ids": np.zeros((2, 5), np.int32)})
    with pytest.raises(UsageError, match="float32; the engine takes int32"):
        resolve_input_shapes(static, {"ids": np.zeros((1, 5), np.float32)})


# -- where TensorRT, a GPU or a provider is missing ---------------------------------------------


def test_missing_tensorrt_and_gpu_are_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(MissingDependencyError, match="TensorRT is not installed here") as info:
        require_tensorrt()
    assert "--to jetson-bundle" in str(info.value) and "\n" not in str(info.value)
    monkeypatch.setitem(sys.modules, "tensorrt", SimpleNamespace(__version__="8.2.1"))
    with pytest.raises(MissingDependencyError, match="8.2.1 is too old"):
        require_tensorrt()
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(MissingDependencyError, match="CPU-only build"):
        require_cuda_gpu()
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MissingDependencyError, match="no CUDA GPU is visible"):
        require_cuda_gpu()


@no_trt_here
def test_export_to_tensorrt_fails_at_once_without_tensorrt(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["export", "mlp:small", "--to", "tensorrt",
                                      "--precision", "fp16"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgekit: error: ")
    assert "build on the device" in lines[0] and "--to jetson-bundle" in lines[0]
    assert list(tmp_path.iterdir()) == []  # failed before exporting anything
    prof = CliRunner().invoke(cli, ["profile", "mlp:small", "--backend", "tensorrt"])
    assert prof.exit_code == 2 and prof.stderr.count("\n") == 1


def test_export_with_tensorrt_but_no_gpu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "tensorrt", SimpleNamespace(__version__="10.3.0"))
    monkeypatch.setattr(torch.version, "cuda", None)
    result = CliRunner().invoke(cli, ["export", "mlp:small", "--to", "tensorrt"])
    assert result.exit_code == 2 and "no CUDA GPU here" in result.stderr
    assert result.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_onnxruntime_providers():
    assert execution_providers("cpu", ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    with pytest.raises(UsageError,
                       match="no CUDAExecutionProvider.*available: CPUExecutionProvider"):
        execution_providers("cuda", ["CPUExecutionProvider"])
    with pytest.raises(UnknownNameError, match="cpu, cuda, tensorrt"):
        execution_providers("rocm", ["CPUExecutionProvider"])
    chain = execution_providers("tensorrt", ["TensorrtExecutionProvider", "CUDAExecutionProvider",
                                             "CPUExecutionProvider"], precision="fp16")
    (name, options), (cuda, _), cpu = chain
    assert (name, cuda, cpu) == ("TensorrtExecutionProvider", "CUDAExecutionProvider",
                                 "CPUExecutionProvider")
    assert options["trt_engine_cache_enable"] and options["trt_fp16_enable"]
    assert Path(options["trt_engine_cache_path"]).parts[-2:] == ("onnxruntime", "tensorrt")
    here = execution_providers("cpu")  # this machine's own list
    assert here == ["CPUExecutionProvider"]


def test_profile_settings_check_backend_options():
    with pytest.raises(UsageError, match="--provider cuda does not apply to --backend tensorrt"):
        ProfileSettings(backend="tensorrt", provider="cuda")
    with pytest.raises(UsageError, match="does not apply to --backend torch"):
        ProfileSettings(backend="torch", provider="tensorrt")
    with pytest.raises(UsageError, match="--cuda-graph applies to --backend tensorrt"):
        ProfileSettings(backend="onnxruntime", cuda_graph=True)
    with pytest.raises(UnknownNameError):
        ProfileSettings(backend="onnxruntime", provider="rocm")


# -- per-phase timing in the profiler (any runner that records phases) ---------------------------


class _PhasedRunner(Runner):
    """Records fixed phase times on every synchronize, as the TensorRT runner does."""

    name = "phased"

    def _activate_impl(self):
        self.calls = 0

    def _prepare_impl(self, feed):
        return feed

    def _run_impl(self, prepared):
        self.calls += 1
        return prepared

    def synchronize(self):
        for phase, ms in (("h2d", 0.1), ("compute", 0.5), ("d2h", 0.2), ("end_to_end", 0.8)):
            self.record_phase(phase, ms / 1e3)

    def _to_host(self, out):
        return out


def test_profiler_reports_phases_of_the_timed_iterations():
    from rich.console import Console

    from edgekit.cli.profile_table import render_profile
    from edgekit.profiler import run as run_module
    from edgekit.profiler.timing import TimingPlan
    from edgekit.targets import ArtifactTarget

    runner = _PhasedRunner()
    prepared = run_module._Prepared(runner=runner, feed={"x": np.zeros(1)}, name="fake",
                                    source_record={}, flops_per_sample=None, params=None,
                                    size_bytes=1, size_source="test")
    plan = TimingPlan(warmup_s=0.0, min_warmup_iterations=3, iterations=12)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "_prepare", lambda *a, **k: prepared)
        report = run_module.profile(ArtifactTarget(Path("fake")),  # resolved: _prepare is patched
                                    ProfileSettings(plan=plan, energy="none"))
    phases = report["phases_ms"]
    assert set(phases) == {"h2d", "compute", "d2h", "end_to_end"}
    assert runner.calls == 1 + 3 + 12  # first inference, warm-up, timed
    assert all(p["count"] == 12 for p in phases.values())  # warm-up phases are not counted
    assert phases["compute"]["p50"] == pytest.approx(0.5)
    assert phases["end_to_end"]["max"] == pytest.approx(0.8)
    console = Console(width=200, record=True)
    console.print(render_profile(report))
    text = console.export_text()
    assert "compute (ms)" in text and "end-to-end (ms)" in text
    plain = run_module.profile("mlp:small", ProfileSettings(plan=plan, energy="none", threads=1))
    assert "phases_ms" not in plain


# -- on a GPU with TensorRT ----------------------------------------------------------------------


@pytest.mark.gpu
@gpu
def test_engine_build_validate_profile_on_gpu(tmp_path):
    from edgekit.exporters import (
        OnnxOptions,
        export_onnx,
        export_tensorrt,
        load_artifact,
        validate_artifact,
    )
    from edgekit.exporters.calibration import samples_for_artifact
    from edgekit.profiler.run import profile
    from edgekit.profiler.timing import TimingPlan
    from edgekit.targets import load_model_source

    export_onnx(load_model_source("ds-cnn:tiny"), tmp_path / "onnx",
                OnnxOptions(dynamic_batch=True))
    onnx = load_artifact(tmp_path / "onnx")
    ranges = shape_ranges(["input:1x1x8x8"], ["input:4x1x8x8"], ["input:16x1x8x8"])
    for precision in ("fp32", "fp16", "int8"):
        build = EngineBuildConfig(precision=precision, shapes=ranges, calib_samples=64,
                                  calib_cache=tmp_path / "calib.cache")
        samples = (samples_for_artifact(onnx.folder, onnx.manifest, None, 64)
                   if precision == "int8" else None)
        result = export_tensorrt(onnx, tmp_path / precision, build, calibration=samples)
        assert result.validation is not None and result.validation.passed
        m = result.manifest
        assert m["format"] == "tensorrt" and m["tensorrt"]["precision"] == precision
        assert m["built_on"]["gpu"] and m["tensorrt"]["build_s"] > 0
        _, report, _ = validate_artifact(tmp_path / precision, "onnxruntime")
        assert report.outputs[0].elements > 0
    assert ((tmp_path / "calib.cache").is_file()
            and (tmp_path / "int8" / "calibration.cache").is_file())
    plan = TimingPlan(warmup_s=0.0, iterations=20)
    for graph in (False, True):
        report = profile(str(tmp_path / "fp16"),
                         ProfileSettings(backend="tensorrt", batch=4, plan=plan, energy="none",
                                         cuda_graph=graph))
        assert report["phases_ms"]["compute"]["count"] == 20
        assert report["backend"]["cuda_graph"] == ("on" if graph else "off")
        assert report["backend"]["gpu_memory"]["io_buffers_bytes"] > 0
