"""Metadata is checked, not trusted: artifact and ZipMoE manifests, Hugging Face configs.

Every case writes real files (an ONNX export; ``edgekit moe make-tiny`` + ``compress``), tampers
with one field, and expects one error line that names the file and the field, and exit code 2.
"""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from click.testing import CliRunner
from oneline import one_line_error

from edgekit.cli import cli

DENSE = "model.layers.0.self_attn.q_proj.weight"


pytestmark = pytest.mark.usefixtures("one_compute_thread")


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _one_line_error(result, exit_code: int = 2) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    return one_line_error(result.exit_code, result.output, exit_code)


def test_schema_names_the_file_and_the_nested_field():
    from edgekit.errors import UsageError
    from edgekit.schema import INT, STR, ListOf, MapOf, Object, Optional, check

    schema = Object({"a": Object({"b": ListOf(Object({"c": INT}))}), "d": Optional(STR),
                     "m": Optional(MapOf(INT))})
    good = {"a": {"b": [{"c": 1}, {"c": 2}]}, "extra": "kept"}
    assert check(good, schema, "f.json") is good
    with pytest.raises(UsageError, match=r"^f\.json: field 'a\.b\[1\]\.c' must be an integer, "
                                         r"got str$"):
        check({"a": {"b": [{"c": 1}, {"c": "2"}]}}, schema, "f.json")
    with pytest.raises(UsageError, match=r"field 'a\.b\[0\]\.c' must be an integer, got bool"):
        check({"a": {"b": [{"c": True}]}}, schema, "f.json")
    with pytest.raises(UsageError, match=r"^f\.json: field 'a' is missing$"):
        check({}, schema, "f.json")
    with pytest.raises(UsageError, match=r"field 'm\[\"x\"\]' must be an integer, got list"):
        check({**good, "m": {"x": []}}, schema, "f.json")


# -- artifact manifest -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    from edgekit.exporters import export_onnx
    from edgekit.targets import load_model_source

    folder = tmp_path_factory.mktemp("art") / "art"
    export_onnx(load_model_source("mlp:small"), folder)
    return folder


def _tampered_artifact(artifact, tmp_path, change):
    folder = tmp_path / "bad"
    shutil.copytree(artifact, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize("change, field, what", [
    (lambda m: m.update(schema_version="1"), "schema_version", "an integer, got str"),
    (lambda m: m["inputs"][0].update(dtype=7), "inputs[0].dtype", "a string, got int"),
    (lambda m: m["files"]["model.onnx"].update(sha256=None), 'files["model.onnx"].sha256',
     "a string, got null"),
    (lambda m: m.update(validation={"outputs": [{"atol": "1e-4"}]}), "validation.outputs[0].atol",
     "a number, got str"),
    (lambda m: m.update(tensorrt={"dynamic": True, "profile": [
        {"name": "input", "min": [1, 64], "opt": "1x64", "max": [8, 64]}]}),
     "tensorrt.profile[0].opt", "a list, got str"),
])
def test_artifact_manifest_with_a_wrong_type_is_one_line(artifact, tmp_path, change, field,
                                                         what):
    bad = _tampered_artifact(artifact, tmp_path, change)
    line = _one_line_error(_run("validate", str(bad)))
    assert f"{bad / 'manifest.json'}: field '{field}' must be {what}" in line


def _resigned_artifact(artifact, tmp_path, change):
    """A copy whose manifest ``change`` edited and re-signed, as a forger would."""
    from edgekit.exporters.artifact import manifest_digest

    def resign(manifest):
        change(manifest)
        manifest["manifest_sha256"] = manifest_digest(manifest)

    return _tampered_artifact(artifact, tmp_path, resign)


def test_an_artifact_manifest_carries_its_own_digest(artifact, tmp_path):
    """Issue 45: a hand-edited manifest (here a shape) is refused without any further check."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    from edgekit.exporters.artifact import manifest_digest

    assert manifest["manifest_sha256"] == manifest_digest(manifest)
    bad = _tampered_artifact(artifact, tmp_path, lambda m: m["inputs"][0].update(shape=[7, 3, 5]))
    line = _one_line_error(_run("validate", str(bad)))
    assert "field 'manifest_sha256' does not match" in line


@pytest.mark.parametrize("change, says", [
    (lambda m: m["inputs"][0].update(shape=[7, 3, 5]), "field 'inputs' says input [7, 3, 5]"),
    (lambda m: m.update(outputs=[]), "field 'outputs' says none"),
    (lambda m: m.update(batch="eight"), "field 'batch' is 'eight'"),
    (lambda m: m.update(batch=4), "field 'batch' is 4, but model.onnx's first input"),
])
def test_a_resigned_manifest_is_checked_against_its_onnx_graph(artifact, tmp_path, change, says):
    """Issue 45: with the input shape edited to 7x3x5, no outputs or batch 'eight' (manifest
    re-signed), validate, profile and jetson-bundle exited 0, the bundle's README telling the
    device a shape the model does not have."""
    bad = _resigned_artifact(artifact, tmp_path, change)
    for args in (["validate", str(bad)],
                 ["profile", str(bad), "--backend", "onnxruntime", "--duration", "0.1"],
                 ["export", str(bad), "--to", "jetson-bundle", "-o", str(tmp_path / "b")]):
        line = _one_line_error(_run(*args))
        assert says in line, (args, line)
    assert not (tmp_path / "b").exists()


def _with_graph_of(artifact, tmp_path, other):
    """A copy of ``artifact`` holding ``other``'s model.onnx, rehashed into the manifest and the
    manifest re-signed, as a forger would."""
    from edgekit.exporters.artifact import file_record, manifest_digest

    bad = tmp_path / "bad"
    shutil.copytree(artifact, bad)
    shutil.copyfile(other / "model.onnx", bad / "model.onnx")
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["files"]["model.onnx"] = file_record(bad / "model.onnx")
    manifest["manifest_sha256"] = manifest_digest(manifest)
    (bad / "manifest.json").write_text(json.dumps(manifest))
    return bad


def test_another_graph_under_the_manifest_is_refused(artifact, tmp_path):
    """Issue 45: another export's model.onnx, rehashed into the manifest, was profiled under
    the manifest's name; one of another interface (here batch 2) no longer is."""
    from edgekit.exporters import OnnxOptions, export_onnx
    from edgekit.targets import load_model_source

    other = export_onnx(load_model_source("mlp:small"), tmp_path / "other",
                        OnnxOptions(batch=2)).folder
    bad = _with_graph_of(artifact, tmp_path, other)
    line = _one_line_error(_run("profile", str(bad), "--backend", "onnxruntime",
                                "--duration", "0.1"))
    assert "field 'inputs' says input [1, 1, 8, 8], but model.onnx has input [2, 1, 8, 8]" in line


def test_another_model_of_the_same_interface_is_refused_by_profile(artifact, tmp_path):
    """Issue 45: a graph of the very same interface from another model (other weights), rehashed
    into the manifest, passes every digest and the interface check; validate refused it (it runs
    the saved reference) but profile measured it under the manifest's name. Profile now runs the
    reference once too."""
    import torch

    from edgekit import create_model
    from edgekit.checkpoint import save_checkpoint
    from edgekit.exporters import export_onnx
    from edgekit.targets import load_model_source

    model = create_model("mlp:small")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(-1.5)
    save_checkpoint(model, tmp_path / "other.safetensors")
    other = export_onnx(load_model_source(str(tmp_path / "other.safetensors")),
                        tmp_path / "other").folder
    bad = _with_graph_of(artifact, tmp_path, other)
    assert "differ from saved PyTorch FP32 reference" in _run("validate", str(bad)).output
    line = _one_line_error(_run("profile", str(bad), "--backend", "onnxruntime",
                                "--duration", "0.1"))
    assert f"{bad}: model.onnx does not give the saved reference outputs" in line
    assert "it is not the model its manifest names" in line
    # the artifact as exported still profiles
    assert _run("profile", str(artifact), "--backend", "onnxruntime", "--duration",
                "0.1").exit_code == 0


# -- ZipMoE store ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    assert _run("moe", "make-tiny", str(root / "ckpt"), "--family", "qwen").exit_code == 0
    result = _run("moe", "compress", str(root / "ckpt"), "-o", str(root / "store"), "--no-trace")
    assert result.exit_code == 0, result.output
    return root / "store"


def _digest(manifest: dict) -> str:
    """The manifest's own hash as a store writer computes it (canonical JSON, no digest)."""
    rest = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _tampered_store(store, tmp_path, manifest_change=None, config_change=None, rehash=False):
    """A copy of ``store`` with its metadata changed; ``rehash`` also rewrites the hashes, as a
    careless tool that edits a store and "fixes" it would."""
    folder = tmp_path / "bad"
    shutil.copytree(store, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    if config_change:
        config = json.loads((folder / "config.json").read_text())
        config_change(config)
        (folder / "config.json").write_text(json.dumps(config))
    if manifest_change:
        manifest_change(manifest)
    if rehash:
        manifest["config_sha256"] = hashlib.sha256((folder / "config.json").read_bytes()
                                                   ).hexdigest()
        manifest["manifest_sha256"] = _digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_clean_store_verifies(store):
    assert _run("moe", "verify", str(store)).exit_code == 0


def test_store_manifest_with_a_wrong_type_is_one_line(store, tmp_path):
    bad = _tampered_store(store, tmp_path, lambda m: m.update(codec="zstd"))
    line = _one_line_error(_run("moe", "verify", str(bad)))
    assert f"{bad / 'manifest.json'}: field 'codec' must be an object, got str" in line


def test_store_manifest_dtype_lie_fails_its_hash(store, tmp_path):
    # bf16 -> fp16 keeps every byte count: before the manifest hash, verify and serve passed.
    bad = _tampered_store(store, tmp_path,
                          lambda m: m["tensors"][DENSE].update(dtype="float16"))
    for command in ("verify", "serve"):
        args = ["moe", command, str(bad)] + (["--prompt", "hi"] if command == "serve" else [])
        line = _one_line_error(_run(*args))
        assert f"{bad / 'manifest.json'}: field 'manifest_sha256' does not match" in line


def test_store_dtype_lie_with_fixed_hashes_is_caught_by_the_sizes(store, tmp_path):
    bad = _tampered_store(store, tmp_path,
                          lambda m: m["tensors"][DENSE].update(dtype="float32"), rehash=True)
    line = _one_line_error(_run("moe", "verify", str(bad)))
    assert f"{bad / 'manifest.json'}: field 'tensors[\"{DENSE}\"].dtype' is 'float32'" in line


def test_config_layer_lie_fails_its_hash(store, tmp_path):
    bad = _tampered_store(store, tmp_path, config_change=lambda c: c.update(num_hidden_layers=1))
    line = _one_line_error(_run("moe", "verify", str(bad)))
    assert f"{bad / 'config.json'}: SHA-256 does not match field 'config_sha256'" in line


@pytest.mark.parametrize("layers, fragment", [
    (1, "field 'num_hidden_layers' is 1, but"),
    (3, "tensor 'model.layers.2.input_layernorm.weight' is missing (config.json implies it)"),
])
def test_config_layer_lie_with_fixed_hashes(store, tmp_path, layers, fragment):
    bad = _tampered_store(store, tmp_path, config_change=lambda c: c.update(
        num_hidden_layers=layers), rehash=True)
    line = _one_line_error(_run("moe", "verify", str(bad)))
    assert fragment in line


def test_store_missing_a_dense_tensor_fails_verify_and_serve(store, tmp_path):
    bad = _tampered_store(store, tmp_path, lambda m: m["tensors"].pop(DENSE), rehash=True)
    for args in (["verify", str(bad)], ["serve", str(bad), "--prompt", "hi"]):
        line = _one_line_error(_run("moe", *args))
        assert f"{bad / 'manifest.json'}: tensor '{DENSE}' is missing" in line


def test_older_store_format_is_refused_with_a_hint(store, tmp_path):
    bad = _tampered_store(store, tmp_path, lambda m: m.update(format_version=1))
    line = _one_line_error(_run("moe", "verify", str(bad)))
    assert "format version 1 is not supported" in line and "edgekit moe compress" in line


# -- Hugging Face checkpoint ------------------------------------------------------------------

def test_checkpoint_config_and_index_with_wrong_types(tmp_path):
    ckpt = tmp_path / "ckpt"
    assert _run("moe", "make-tiny", str(ckpt), "--family", "olmoe").exit_code == 0
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": "false"}))
    line = _one_line_error(_run("moe", "compress", str(ckpt), "-o", str(tmp_path / "s")))
    assert f"{ckpt / 'config.json'}: field 'tie_word_embeddings' must be true or false, " \
           f"got str" in line
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.norm.weight": 5}}))
    line = _one_line_error(_run("moe", "compress", str(ckpt), "-o", str(tmp_path / "s")))
    assert "model.safetensors.index.json: field 'weight_map[\"model.norm.weight\"]' must be " \
           "a string, got int" in line
    assert not (tmp_path / "s").exists()
