"""Models nobody here wrote, through every command: Hugging Face ``transformers`` architectures
(a MobileViT at 224 px, a two-input int64 DistilBERT at 128 tokens), a user's own script, an
ONNX file with external data and a ``.pt2`` file; and the one-line refusals of bad input.

The models come from ``tests/user_models/`` as a user would point edgekit at them
(``hf_models.py:mobilevit``); nothing is downloaded.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from oneline import one_line_error

import edgekit
from edgekit.cli import cli
from edgekit.errors import UsageError

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_compute_thread")

HERE = Path(__file__).parent / "user_models"
MOBILEVIT = f"{HERE / 'hf_models.py'}:mobilevit"
DISTILBERT = f"{HERE / 'hf_models.py'}:distilbert"
MY_MODEL = f"{HERE / 'my_model.py'}"
QUICK = edgekit.ProfileSettings(backend="onnxruntime", threads=1, energy="none",
                                plan=edgekit.TimingPlan(warmup_s=0, iterations=3))


def _run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _ok(*args: str):
    result = _run(*args)
    assert result.exit_code == 0, result.output
    return result


def _user_module(name: str):
    """A module of ``tests/user_models`` imported as the user's own code."""
    import importlib
    import sys

    sys.path.insert(0, str(HERE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(HERE))


def _hf():
    return _user_module("hf_models")


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


@pytest.fixture(scope="module")
def bert_art(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bert") / "art"
    _ok("export", DISTILBERT, "-o", out)
    return out


@pytest.fixture(scope="module")
def vit_onnx(tmp_path_factory) -> Path:
    """MobileViT exported by torch.onnx's TorchScript exporter (another exporter than
    edgekit's), batch symbolic, its weights then moved to an external data file with onnx's own
    tools: an ONNX file as a user brings it."""
    import onnx

    model, example = _hf().mobilevit()
    folder = tmp_path_factory.mktemp("vit")
    inline = folder / "inline.onnx"
    torch.onnx.export(model, (example["pixel_values"],), str(inline), dynamo=False,
                      input_names=["pixel_values"], output_names=["logits"],
                      dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    path = folder / "mobilevit.onnx"
    onnx.save_model(onnx.load(str(inline)), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="mobilevit.onnx.data",
                    size_threshold=1024)
    inline.unlink()
    assert (folder / "mobilevit.onnx.data").is_file()  # the weights live outside the graph
    return path


def _text_data(path: Path, n: int = 40, labels: bool = True) -> Path:
    rng = np.random.default_rng(0)
    arrays = {"input_ids": rng.integers(0, 1000, (n, 128)),
              "attention_mask": np.ones((n, 128), dtype=np.int64)}
    if labels:
        arrays["labels"] = rng.integers(0, 3, n)
    np.savez(path, **arrays)
    return path


# -- the two-input int64 text model ---------------------------------------------------------------


def test_a_text_model_exports_with_two_int64_inputs_and_the_users_provenance(bert_art):
    m = _manifest(bert_art)
    assert [(i["name"], i["dtype"], i["shape"]) for i in m["inputs"]] == [
        ("input_ids", "int64", [1, 128]), ("attention_mask", "int64", [1, 128])]
    assert [o["name"] for o in m["outputs"]] == ["logits"]
    source = m["source"]
    assert source["kind"] == "callable" and source["name"] == "hf_models:distilbert"
    assert "untrained" not in json.dumps(source)  # the user's weights are the user's
    assert source["weights"].startswith("the user's own") and len(source["weights_sha256"]) == 64
    assert source["files"][0]["path"].endswith("hf_models.py")
    ids = m["input_spec"][0]
    assert ids["dtype"] == "int64" and ids["range"][1] <= 1000  # token ids inside the vocabulary
    assert m["validation"]["passed"] and m["task"] is None


def test_a_text_model_validates_against_torch_rebuilt_from_its_callable(bert_art):
    out = _ok("validate", bert_art, "--against", "torch").output
    assert "PyTorch (FP32, run now)" in out and "[✓] logits" in out
    assert "[✓]" in _ok("validate", DISTILBERT).output


def test_a_text_model_quantises_to_int8_on_the_users_named_arrays(tmp_path, bert_art):
    data = _text_data(tmp_path / "calib.npz", labels=False)
    out = _ok("export", bert_art, "--precision", "int8", "--calib-data", data,
              "-o", tmp_path / "int8").output
    m = _manifest(tmp_path / "int8")
    assert m["precision"] == "int8" and "calib.npz (40 of 40 samples" in json.dumps(m)
    assert "DequantizeLinear" in m["quantization"]["operators"]
    assert "no test score: your own model" in out


def test_a_text_model_profiles_on_torch_and_onnxruntime(bert_art):
    for target, backend in ((DISTILBERT, "torch"), (bert_art, "onnxruntime")):
        report = edgekit.profile(str(target), edgekit.ProfileSettings(
            backend=backend, threads=1, energy="none",
            plan=edgekit.TimingPlan(warmup_s=0, iterations=3)))
        assert report["iterations"] == 3 and report["latency_ms"]["p50"] > 0
    assert report["source"]["kind"] == "callable"


def test_compare_scores_a_users_models_on_their_data_and_says_when_it_cannot(tmp_path, bert_art):
    data = _text_data(tmp_path / "test.npz")
    scored = edgekit.compare([DISTILBERT, str(bert_art)], QUICK, data=str(data))
    assert scored["metric"] == "accuracy" and scored["scored"]
    accuracies = [r["accuracy"] for r in scored["rows"]]
    assert accuracies[0] == pytest.approx(accuracies[1]) and 0 <= accuracies[0] <= 1
    arrays = np.load(data)  # the score is top-1 of the first output: computed again here
    model, _ = _hf().distilbert()
    with torch.inference_mode():
        logits = model(input_ids=torch.from_numpy(arrays["input_ids"]),
                       attention_mask=torch.from_numpy(arrays["attention_mask"])).logits
    assert accuracies[0] == pytest.approx(
        float((logits.argmax(1).numpy() == arrays["labels"]).mean()))
    unscored = _ok("compare", DISTILBERT, "--duration", "0.2", "--threads", "1", "--json",
                   tmp_path / "unscored.json").output
    assert "not scored" in unscored and "hf_models.py:distilbert" in unscored
    from edgekit.provenance import report_document

    (tmp_path / "scored.json").write_text(json.dumps(report_document("compare", scored)))
    _ok("report", tmp_path / "scored.json", tmp_path / "unscored.json", "-o",
        tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "Not scored: no --data or --evaluate" in page and "hf_models.py:distilbert" in page


def test_compare_takes_a_users_evaluate_function(tmp_path):
    script = tmp_path / "score.py"
    script.write_text(
        "import numpy as np\n"
        "def mean_logit(predict):\n"
        "    rng = np.random.default_rng(0)\n"
        "    out = predict({'input_ids': rng.integers(0, 1000, (4, 128)),\n"
        "                   'attention_mask': np.ones((4, 128), dtype=np.int64)})\n"
        "    return {'metric': 'mean_logit', 'value': float(out['logits'].mean()),\n"
        "            'higher_is_better': False}\n")
    result = edgekit.compare([DISTILBERT], QUICK, evaluate=f"{script}:mean_logit")
    row = result["rows"][0]
    assert result["metric"] == "mean_logit" and not result["higher_is_better"]
    assert np.isfinite(row["mean_logit"])


# -- the vision model, as an ONNX file with external data ---------------------------------------


def test_an_onnx_file_with_external_data_becomes_a_checked_artifact(tmp_path, vit_onnx):
    out = _ok("export", vit_onnx, "-o", tmp_path / "art").output
    assert "ONNX Runtime FP32 on CPU, graph optimisations off" in out
    m = _manifest(tmp_path / "art")
    assert set(m["files"]) == {"model.onnx", "model.onnx.data", "reference.npz"}
    assert m["batch"] == "dynamic" and m["source"]["external_data"]
    assert m["source"]["onnx_sha256"] and m["input_spec"][0]["shape"] == [1, 3, 224, 224]
    assert "[✓] logits" in _ok("validate", tmp_path / "art").output
    assert "[✓] logits" in _ok("validate", vit_onnx).output


def test_an_onnx_file_profiles_with_its_external_data_counted(vit_onnx):
    report = edgekit.profile(str(vit_onnx), QUICK)
    assert report["model_size"]["source"].endswith("with its external data")
    assert report["model_size"]["bytes"] > vit_onnx.stat().st_size


def test_an_onnx_file_goes_to_int8_fp16_and_a_jetson_bundle(tmp_path, vit_onnx):
    rng = np.random.default_rng(0)
    data = tmp_path / "calib.npz"
    np.savez(data, pixel_values=rng.random((2, 3, 224, 224), dtype=np.float32))
    _ok("export", vit_onnx, "--precision", "int8", "--calib-data", data, "-o", tmp_path / "i8")
    assert _manifest(tmp_path / "i8")["validation"]["passed"]
    _ok("export", vit_onnx, "--precision", "fp16", "-o", tmp_path / "f16")
    _ok("export", vit_onnx, "--to", "jetson-bundle", "--precision", "int8", "--calib-data", data,
        "-o", tmp_path / "bundle")
    files = _manifest(tmp_path / "bundle")["files"]
    assert {"model.onnx", "model.onnx.data", "calibration.npz"} <= set(files)


def test_a_corrupted_import_fails_its_validation(tmp_path):
    """The check can fail: a graph whose weights were zeroed after the reference was saved."""
    import onnx
    from onnx import helper, numpy_helper

    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    art = tmp_path / "art"
    _ok("export", path, "-o", art)
    model = onnx.load(art / "model.onnx")
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros((4, 3), np.float32),
                                                                 "w"))
    onnx.save(model, art / "model.onnx")
    manifest = _manifest(art)
    from edgekit.exporters.artifact import file_record, write_manifest

    manifest["files"]["model.onnx"] = file_record(art / "model.onnx")  # rehashed: not corrupt
    write_manifest(art, manifest)  # and re-signed: only the numbers can tell
    result = _run("validate", art)
    assert result.exit_code == 1 and "[x] y" in result.output


# -- a user's script and a .pt2 -------------------------------------------------------------------


def test_a_users_script_keeps_every_output_and_round_trips_through_pt2(tmp_path):
    art = tmp_path / "art"
    _ok("export", f"{MY_MODEL}:build", "-o", art)
    m = _manifest(art)
    assert [o["name"] for o in m["outputs"]] == ["scores", "embedding"]  # nothing dropped
    assert m["source"]["name"] == "my_model:build"
    module, example = _user_module("my_model").build()
    pt2 = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(module, (example,)), pt2)
    _ok("export", pt2, "-o", tmp_path / "from-pt2")
    m2 = _manifest(tmp_path / "from-pt2")
    assert m2["source"]["kind"] == "pt2" and m2["inputs"][0]["shape"] == [1, 3, 32, 32]
    assert "[✓]" in _ok("validate", tmp_path / "from-pt2", "--against", "torch").output
    report = edgekit.profile(str(pt2), edgekit.ProfileSettings(
        backend="torch", threads=1, energy="none", plan=edgekit.TimingPlan(iterations=3)))
    assert report["source"]["kind"] == "pt2"


def test_input_sets_the_shapes_of_a_module_that_came_without_examples(tmp_path):
    _ok("export", f"{MY_MODEL}:bare", "--input", "image:2x3x16x16", "-o", tmp_path / "art")
    assert _manifest(tmp_path / "art")["inputs"][0]["shape"] == [2, 3, 16, 16]


def test_the_python_api_takes_a_module_and_its_example(tmp_path):
    module, example = _user_module("my_model").build()
    result = edgekit.export((module, example), tmp_path / "art")
    assert result.manifest["source"]["kind"] == "module"
    checked = edgekit.validate(module, inputs=["image:1x3x32x32"])
    assert checked.report.passed
    bare = edgekit.export(module, tmp_path / "bare", inputs=["image:2x3x16x16"])
    assert bare.manifest["inputs"][0]["shape"] == [2, 3, 16, 16]
    with pytest.raises(UsageError, match="module object in Python"):
        edgekit.validate(str(tmp_path / "art"), against="torch")


# -- bad input: one line, exit 2, nothing written -------------------------------------------------


@pytest.mark.parametrize(("target", "args", "fragments"), [
    (f"{MY_MODEL}:broken", (), ("raised RuntimeError", "weights file is missing")),
    (f"{MY_MODEL}:not_a_module", (), ("returned a int, not an nn.Module",)),
    (f"{MY_MODEL}:nothing_here", (), ("has no callable 'nothing_here'", "build")),
    (f"{MY_MODEL}:bare", (), ("no example inputs", "--input")),
    (f"{MY_MODEL}:build", ("--input", "pixels:1x3x32x32"), ("'pixels'", "image:1x3x32x32")),
    (f"{MY_MODEL}:build", ("--input", "image:1x3x32"), ("3 dimensions", "has 4")),
    (f"{MY_MODEL}:build", ("--input", "image:1x3x32x32:int64"), ("does not run on inputs",)),
    (f"{MY_MODEL}:build", ("--input", "image:1x3xAx32"), ("integers separated by 'x'",)),
    (f"{MY_MODEL}:build", ("--input", "image:1x3x32x32:complex"), ("unknown dtype",)),
    ("missing_script.py:build", (), ("does not exist",)),
    ("no_such_package_anywhere.sub:build", (), ("cannot import 'no_such_package_anywhere.sub'",)),
    ("mlp", ("--input", "input:1x1x8x8"), ("--input applies to your own models",)),
])
def test_bad_user_models_are_one_line(tmp_path, target, args, fragments):
    out = tmp_path / "out"
    result = _run("export", target, *args, "-o", out)
    one_line_error(result.exit_code, result.output, 2, *fragments)
    assert not out.exists()


def test_a_bad_pt2_and_a_symbolic_dimension_are_one_line(tmp_path):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    result = _run("export", bad, "-o", tmp_path / "out")
    one_line_error(result.exit_code, result.output, 2, "not a loadable torch.export program")
    import onnx
    from onnx import helper

    x = helper.make_tensor_value_info("tokens", onnx.TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.INT64, ["batch", "seq"])
    graph = helper.make_graph([helper.make_node("Identity", ["tokens"], ["y"])], "g", [x], [y])
    path = tmp_path / "seq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    result = _run("profile", path, "--backend", "onnxruntime")
    one_line_error(result.exit_code, result.output, 2, "symbolic dimension 1 ('seq')",
                   "--input tokens:")
    result = _run("profile", path, "--backend", "onnxruntime", "--input", "tokens:1x8:float32",
                  "--iterations", "2")
    one_line_error(result.exit_code, result.output, 2, "dtype float32", "declares int64")
    _ok("profile", path, "--backend", "onnxruntime", "--input", "tokens:1x8", "--iterations", "2",
        "--energy", "none")


def test_bad_user_data_is_one_line(tmp_path, bert_art):
    no_labels = _text_data(tmp_path / "nolabels.npz", labels=False)
    result = _run("compare", DISTILBERT, "--data", no_labels, "--duration", "0.1")
    one_line_error(result.exit_code, result.output, 2, "no array 'labels'")
    partial = tmp_path / "partial.npz"
    np.savez(partial, input_ids=np.zeros((4, 128), np.int64), labels=np.zeros(4, np.int64))
    result = _run("compare", DISTILBERT, "--data", partial, "--duration", "0.1")
    one_line_error(result.exit_code, result.output, 2, "no array 'attention_mask'")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, input_ids=np.zeros((4, 64), np.int64),
             attention_mask=np.ones((4, 64), np.int64), labels=np.zeros(4, np.int64))
    result = _run("compare", DISTILBERT, "--data", wrong, "--duration", "0.1")
    one_line_error(result.exit_code, result.output, 2, "shape [4, 64]", "128")
    out = tmp_path / "int8"
    result = _run("export", bert_art, "--precision", "int8", "-o", out)
    one_line_error(result.exit_code, result.output, 2, "no built-in dataset to calibrate with",
                   "--calib-data")
    assert not out.exists()


# -- a spiking module of the user's own -----------------------------------------------------------


def test_a_users_spiking_module_exports_to_nir_and_simulates(tmp_path):
    out = _ok("export", f"{MY_MODEL}:spiking", "--to", "nir", "-o", tmp_path / "nir").output
    assert "[✓] output" in out
    m = _manifest(tmp_path / "nir")
    assert m["inputs"][0]["shape"] == [4, "batch", 1, 12, 12] and m["task"] is None
    assert m["spiking"]["weights"] == "the user's own"  # never recalibrated
    rng = np.random.default_rng(0)
    data = tmp_path / "events.npz"
    np.savez(data, x=rng.random((12, 1, 12, 12), dtype=np.float32),
             labels=rng.integers(0, 4, 12))
    report = tmp_path / "sim.json"
    _ok("simulate", f"{MY_MODEL}:spiking", "--data", data, "--samples", "8", "--no-profile",
        "--json", report)
    doc = json.loads(report.read_text())
    assert doc["samples"] == 8 and doc["inputs"].startswith("events.npz")
    assert 0 <= doc["accuracy"] <= 1 and doc["totals"]["spikes"] > 0 and doc["totals"]["acs"] > 0
    result = _run("simulate", f"{MY_MODEL}:build", "--no-profile")
    one_line_error(result.exit_code, result.output, 2, "not a spiking net edgekit can simulate")
    result = _run("export", f"{MY_MODEL}:build", "--to", "nir", "-o", tmp_path / "no")
    one_line_error(result.exit_code, result.output, 2, "is not a spiking net")


def test_a_package_modules_callable_is_a_target(tmp_path, monkeypatch):
    package = tmp_path / "site" / "acme_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "vision.py").write_text(
        "import torch\n"
        "def tiny():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)),"
        " torch.rand(2, 3, 4)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # as if installed
    _ok("export", "acme_models.vision:tiny", "-o", tmp_path / "art")
    m = _manifest(tmp_path / "art")
    assert m["source"]["name"] == "acme_models.vision:tiny" and m["batch"] == 2
    assert m["source"]["files"][0]["path"].endswith("vision.py")
