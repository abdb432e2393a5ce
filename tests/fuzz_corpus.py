"""The bad invocations of ``tests/test_cli_fuzz.py``: a sandbox of files to name, a seeded
generator of cases, and the inputs that once got through (``FORMER_FAILURES``).

The sandbox holds junk (random bytes under every extension, empty files, folders where files
belong, deep JSON/TOML) and real things made wrong in one way each, one per class of issue 45:
a good ZipMoE store with bad checkpoints to compress over it, a real artifact with a note of the
user's in it, artifacts whose manifest was edited (and re-signed) or whose graph is another
model's, rehashed; stores with a negative extent offset, a trace of the wrong length or an
unreadable data file; saved compare reports with NaN or infinity; edgekit homes whose
calibration.json is broken; checkpoints whose record gives a width of a wrong sign or type.
Every case must be refused (exit code 1 or 2) in one line, and leave the sandbox as it was.

A case is ``(command, args, env)``; ``{name}`` in FORMER_FAILURES' args is a sandbox path.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import NamedTuple

SEED = 17
CASES = 600
UNWRITABLE = "/proc/edgekit-fuzz/out"  # not even root can create files under /proc
LONG = "x" * 300  # longer than any file system's name limit (255 bytes)


class Case(NamedTuple):
    command: str
    args: list[str]
    env: dict[str, str]


# --- the sandbox: every file a case may name, and nothing else ---------------------------------

def build_sandbox(root: Path) -> dict[str, str]:
    """Bad files of every kind under ``root``; returns {placeholder: path}."""
    rng = random.Random(SEED)
    files: dict[str, str] = {}

    def junk(name: str, data: bytes | None = None) -> None:
        path = root / name
        path.write_bytes(data if data is not None else rng.randbytes(rng.randint(1, 600)))
        files[name] = str(path)

    for ext in ("safetensors", "onnx", "npz", "toml", "json", "npy"):
        junk(f"random.{ext}")
        junk(f"empty.{ext}", b"")
    junk("zip.npz", b"PK\x03\x04" + rng.randbytes(300))
    junk("deep.toml", b"a = " + b"[" * 5000 + b"]" * 5000)
    junk("latin1.toml", b'name = "caf\xe9"\n')
    junk("deep.json", b"[" * 100_000 + b"]" * 100_000)
    junk("list.json", b"[1, 2, 3]")
    junk("text.txt", b"hello\n")
    for name in ("folder.safetensors", "folder.npz", "folder.toml", "folder.json",
                 "folder.onnx", "emptydir"):
        (root / name).mkdir()
        files[name] = str(root / name)
    # a store, an artifact and a checkpoint folder in name only
    for name, inner in (("store", "manifest.json"), ("artifact", "manifest.json"),
                        ("hfckpt", "config.json")):
        (root / name).mkdir()
        (root / name / inner).write_bytes(rng.randbytes(200))
        files[name] = str(root / name)
    # a folder of the user's own work, and metadata whose fields have the wrong types
    (root / "keep").mkdir()
    (root / "keep" / "notes.txt").write_text("mine\n")
    files["keep"] = str(root / "keep")
    junk("typed.safetensors", rng.randbytes(64))
    junk("typed.json", json.dumps({"format": "edgekit-checkpoint/1", "entry": 5, "variant": [],
                                   "config": "x", "weights_sha256": 7}).encode())
    (root / "typedstore").mkdir()
    (root / "typedstore" / "manifest.json").write_text(json.dumps(
        {"format": "edgekit-zipmoe-store", "format_version": 1, "tensors": {"a": 5},
         "codec": "zstd", "data_file": 3}))
    (root / "typedstore" / "config.json").write_text(json.dumps({"num_experts": "many"}))
    files["typedstore"] = str(root / "typedstore")
    # real checkpoints (checksums right) whose record gives a width of a wrong sign or type
    for name, hidden in (("negwidth", [-4]), ("strwidth", ["x"]), ("zerowidth", [0]),
                         ("floatwidth", [4.5]), ("nullwidth", None)):
        files[f"{name}.safetensors"] = str(_checkpoint_with(root / f"{name}.safetensors",
                                                            hidden=hidden))
    _artifacts(root, files)
    _stores(root, files)
    _reports(root, files)
    _homes(root, files)
    files["missing"] = str(root / "does-not-exist.npz")
    files["missing_dir"] = str(root / "no-such-folder")
    files["unwritable"] = UNWRITABLE
    files["unwritable_json"] = UNWRITABLE + ".json"
    files["notdir_json"] = str(root / "text.txt" / "out.json")  # a file where a folder belongs
    files["long"] = str(root / LONG)
    files["long.safetensors"] = str(root / f"{LONG}.safetensors")
    return files


def _checkpoint_with(path: Path, **config: object) -> Path:
    """An ``mlp:small`` checkpoint whose record's config says ``config``."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from edgekit import create_model
    from edgekit.checkpoint import METADATA_KEY, save_checkpoint

    save_checkpoint(create_model("mlp:small"), path)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    record = json.loads(metadata[METADATA_KEY])
    record["config"].update(config)
    save_file(load_file(str(path)), str(path),
              metadata={**metadata, METADATA_KEY: json.dumps(record)})
    return path


def _artifacts(root: Path, files: dict[str, str]) -> None:
    """A real ``mlp:small`` artifact; a copy with the user's note in it; copies whose manifest
    was edited (re-signed, or not); one holding another model's graph of the same interface,
    rehashed into the manifest."""
    from edgekit.exporters import export_onnx
    from edgekit.exporters.artifact import file_record, manifest_digest
    from edgekit.targets import load_model_source

    art = export_onnx(load_model_source("mlp:small"), root / "art").folder
    files["art"] = str(art)

    def variant(name: str, edit=None, sign: bool = True) -> None:
        folder = root / name
        shutil.copytree(art, folder)
        if edit is not None:
            manifest = json.loads((folder / "manifest.json").read_text())
            edit(folder, manifest)
            if sign:
                manifest["manifest_sha256"] = manifest_digest(manifest)
            (folder / "manifest.json").write_text(json.dumps(manifest))
        files[name] = str(folder)

    variant("art_notes")
    (root / "art_notes" / "NOTES.md").write_text("my notes\n")
    variant("art_shape", lambda f, m: m["inputs"][0].update(shape=[7, 3, 5]))
    variant("art_outputs", lambda f, m: m.update(outputs=[]))
    variant("art_batch", lambda f, m: m.update(batch="eight"))
    variant("art_batch4", lambda f, m: m.update(batch=4))
    variant("art_unsigned", lambda f, m: m["inputs"][0].update(shape=[7, 3, 5]), sign=False)
    variant("art_nofile", lambda f, m: m["files"].pop("reference.npz"))

    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(art / "model.onnx"))  # the same interface, other weights
    for tensor in graph.graph.initializer:
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * -1.5,
                                                tensor.name))
    other = root / "other.onnx"
    onnx.save(graph, str(other))
    files["other.onnx"] = str(other)

    def foreign(folder: Path, manifest: dict) -> None:
        shutil.copyfile(other, folder / "model.onnx")
        manifest["files"]["model.onnx"] = file_record(folder / "model.onnx")

    variant("art_foreign", foreign)


def _stores(root: Path, files: dict[str, str]) -> None:
    """A tiny MoE checkpoint and its good store; checkpoints made bad in one way each (int8
    weights, a NaN expert, ``rope_theta: NaN``); stores forged in one way each."""
    from safetensors.torch import load_file, save_file

    from edgekit.methods.zipmoe.compress import compress_checkpoint
    from edgekit.methods.zipmoe.store import manifest_digest
    from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint

    tiny = make_tiny_checkpoint(root / "tiny", "qwen", seed=2)
    compress_checkpoint(tiny, root / "good.zmoe", workers=1, trace=False)  # traced: 6 s more
    files.update(tiny=str(tiny), **{"good.zmoe": str(root / "good.zmoe")})

    def bad_checkpoint(name: str, weights=None, config=None) -> None:
        folder = root / name
        shutil.copytree(tiny, folder)
        if weights is not None:
            tensors = load_file(str(folder / "model.safetensors"))
            save_file(weights(tensors), str(folder / "model.safetensors"))
        if config is not None:
            record = json.loads((folder / "config.json").read_text())
            config(record)
            (folder / "config.json").write_text(json.dumps(record))
        files[name] = str(folder)

    def nan_expert(tensors):
        tensors["model.layers.0.mlp.experts.2.up_proj.weight"][0, 0] = float("nan")
        return tensors

    bad_checkpoint("tiny_int8", weights=lambda t: {n: v.to(__import__("torch").int8)
                                                   for n, v in t.items()})
    bad_checkpoint("tiny_nan", weights=nan_expert)
    bad_checkpoint("tiny_rope", config=lambda c: c.update(rope_theta=float("nan")))
    bad_checkpoint("tiny_experts", config=lambda c: c.update(num_experts=-2))

    def forged(name: str, edit) -> Path:
        folder = root / name
        shutil.copytree(root / "good.zmoe", folder)
        manifest = json.loads((folder / "manifest.json").read_text())
        edit(manifest)
        manifest["manifest_sha256"] = manifest_digest(manifest)
        (folder / "manifest.json").write_text(json.dumps(manifest))
        files[name] = str(folder)
        return folder

    expert = "model.layers.0.mlp.experts.0.up_proj.weight"
    forged("store_negoff", lambda m: m["tensors"][expert]["raw"].update(offset=-4096))
    # a routing trace as compress records it (tokens per expert per layer), one count short or
    # two too many
    counts = [111, 176, 49, 108, 107, 129, 240, 110]
    forged("store_short", lambda m: m.update(trace={"text": "t", "tokens": 515, "counts": {
        "0": counts[:-1], "1": counts}}))
    forged("store_long", lambda m: m.update(trace={"text": "t", "tokens": 515, "counts": {
        "0": counts, "1": counts + [3, 4]}}))
    forged("store_fp16", lambda m: m["tensors"]["model.embed_tokens.weight"].update(
        dtype="float16"))
    locked = forged("store_locked", lambda m: None)
    data = locked / "weights.zmoe"
    if os.geteuid() != 0:
        data.chmod(0)
    elif os.path.exists("/proc/sys/vm/drop_caches"):  # root reads mode 000; not this file
        data.unlink()
        data.symlink_to("/proc/sys/vm/drop_caches")


def _reports(root: Path, files: dict[str, str]) -> None:
    """Saved compare reports as ``compare --json`` writes them: a good one, and ones holding
    NaN or infinity (as Python's json writes them, which JSON is not) or a wrong type."""
    def report(name: str, **row: object) -> None:
        doc = {"kind": "compare", "metric": "accuracy", "higher_is_better": True,
               "backend": "onnxruntime", "device": {"profile": "cpu", "display_name": "CPU"},
               "rows": [{"name": "mlp:small", "family": "mlp", "metric": "accuracy",
                         "dataset": "digits", "params": 100, "flops_per_sample": 200.0,
                         "latency_p50_ms": 0.1, "latency_p99_ms": 0.2,
                         "throughput_per_s": 1e4, "energy_per_inference_j": 1e-4,
                         "energy_source": "estimated: tdp", "peak_rss_mib": 300.0,
                         "accuracy": 0.9, **row}]}
        (root / name).write_text(json.dumps(doc))
        files[name] = str(root / name)

    report("report_good.json")
    report("report_nan.json", accuracy=float("nan"))
    report("report_inf.json", latency_p99_ms=float("inf"))
    report("report_neginf.json", energy_per_inference_j=float("-inf"))
    report("report_str.json", latency_p50_ms="fast")


CALIBRATIONS = {
    "home_empty_peak": {"profiles": {"generic-x86-64-cpu": {"date": "d", "peak_flops": {}}}},
    "home_neg_peak": {"profiles": {"generic-x86-64-cpu": {"date": "d",
                                                          "peak_flops": {"fp32": -1}}}},
    "home_str_peak": {"profiles": {"generic-x86-64-cpu": {"date": "d",
                                                          "peak_flops": {"fp32": "lots"}}}},
    "home_list": {"profiles": []},
}


def _homes(root: Path, files: dict[str, str]) -> None:
    """edgekit homes whose calibration.json is wrong in one way each."""
    for name, document in CALIBRATIONS.items():
        (root / name).mkdir()
        (root / name / "calibration.json").write_text(json.dumps(document))
        files[name] = str(root / name)
    (root / "home_badjson").mkdir()
    (root / "home_badjson" / "calibration.json").write_text("{not json")
    files["home_badjson"] = str(root / "home_badjson")


def foreign_devices() -> list[str]:
    """Device profiles this machine is not (checked as ``--device`` checks them), so a run
    claiming one must be refused wherever the suite runs."""
    from edgekit.profiles import load_profile
    from edgekit.profiles.claim import mismatch

    names = ["jetson-nano", "jetson-xavier-nx", "jetson-orin-nano-8gb", "jetson-orin-nx-16gb",
             "nvidia-h100-sxm", "nvidia-h200", "generic-arm64-cpu", "generic-x86-64-cpu"]
    return [n for n in names if mismatch(load_profile(n)) is not None]


# --- the generator -----------------------------------------------------------------------------

NAMES = ["nosuch", "", " ", "mlp:nosuch", "../../etc/passwd", LONG, "\u2603", "-",
         "MLP", "mlp::small", f"spiking-cnn:{LONG}", f"{LONG}.safetensors"]
BAD_INTS = ["abc", "", "1.5", "nan", "inf", "-1", "0", "1e999", "0x10"]
BAD_FLOATS = ["abc", "", "-1", "-inf", "1,5", "--", "1e", "0x"]
BAD_FILES = ["random.safetensors", "random.onnx", "random.npz", "random.toml", "random.json",
             "random.npy", "empty.npz", "empty.toml", "empty.json", "empty.safetensors",
             "zip.npz", "deep.toml", "latin1.toml", "deep.json", "list.json", "text.txt",
             "folder.safetensors", "folder.npz", "folder.toml", "folder.json", "missing",
             "missing_dir", "long", "long.safetensors"]
BAD_DIRS = ["random.safetensors", "text.txt", "emptydir", "store", "artifact", "hfckpt",
            "missing_dir", "random.onnx", "folder.onnx", "long"]
BAD_PROFILES = ["nosuch", "", "random.toml", "empty.toml", "deep.toml", "latin1.toml",
                "folder.toml", "missing", "text.txt", "long"]
BAD_WIDTHS = ["negwidth.safetensors", "strwidth.safetensors", "zerowidth.safetensors",
              "floatwidth.safetensors", "nullwidth.safetensors"]
EDITED_ARTIFACTS = ["art_shape", "art_outputs", "art_batch", "art_batch4", "art_unsigned",
                    "art_nofile", "art_foreign"]
BAD_MOE_INPUTS = ["tiny_int8", "tiny_nan", "tiny_rope", "tiny_experts", "hfckpt", "typedstore",
                  "emptydir", "text.txt"]
FORGED_STORES = ["store_negoff", "store_short", "store_long", "store_fp16", "store_locked"]
# outputs edgekit must not replace: the user's files and folders (an edgekit output such as
# ``art``, ``tiny`` or ``good.zmoe`` may be replaced by design, so none is named here)
NOT_EDGEKITS = ["keep", "art_notes", "text.txt", "random.safetensors", "typed.safetensors",
                "hfckpt"]
BAD_REPORTS = ["report_nan.json", "report_inf.json", "report_neginf.json", "report_str.json",
               "missing", "random.json", "empty.json", "list.json", "deep.json", "text.txt",
               "emptydir", "art"]
HOMES = [*CALIBRATIONS, "home_badjson"]
SERVE = ["--prompt", "hi", "--max-new-tokens", "1"]


ISSUE_45_WEIGHT = 3  # issue 45's classes are drawn this many times as often as the others


def _weighted(command, build):
    return [(command, build)] * ISSUE_45_WEIGHT


def _templates(pick):
    """(command, builder) pairs; each builder returns one bad argument list, or (args, env)."""
    f, n, i, x, o, some = pick.file, pick.name, pick.int_, pick.float_, pick.out, pick.some
    foreign = pick.foreign
    return [
        ("devices", lambda: ["devices", "--show", pick.one(BAD_PROFILES + NAMES, f)]),
        ("devices", lambda: ["devices", "--json", pick.one(["", "unwritable_json",
                                                            "folder.json", "emptydir",
                                                            "notdir_json"], f)]),
        ("devices", lambda: ["devices", pick.one(["--nosuch", "extra", "--show"])]),
        # --json to a path under /proc is left out: models builds every entry before writing
        ("models", lambda: ["models", "--json", pick.one(["", "emptydir", "notdir_json"], f)]),
        ("models", lambda: ["models", pick.one(["--nosuch", "extra", "--family"])]),
        ("datasets", lambda: ["datasets", "--json", pick.one(["", "unwritable_json",
                                                              "emptydir"], f)]),
        ("datasets", lambda: ["datasets", pick.one(["--nosuch", "extra", "--json"])]),
        ("train", lambda: ["train", n()]),
        ("train", lambda: ["train", "mlp", "--epochs", i()]),
        ("train", lambda: ["train", "mlp", "--seconds", pick.one(BAD_FLOATS + ["0"])]),
        ("train", lambda: ["train", "mlp", "--data", f(BAD_FILES)]),
        ("train", lambda: ["train", "mlp", "--seed", pick.one(["abc", "", "1.5", "nan"])]),
        ("train", lambda: ["train", "wifi-petr", "--validation", pick.one(BAD_FLOATS + ["1"])]),
        ("train", lambda: ["train", pick.one(["mlp", "wifi-mamba"]), "--validate-every", i()]),
        ("train", lambda: ["train", "mlp", "--json", "", "-o", f(["unwritable"])]),
        # issue 45: train -o over a file edgekit did not write (foreign weights, a folder)
        *_weighted("train", lambda: ["train", pick.one(["mlp", "mlp:small", "ds-cnn"]), "-o",
                           f(NOT_EDGEKITS),
                           *some(["--epochs", "1"], ["--seconds", "1"], ["--seed", "3"])]),
        ("train", lambda: ["train", "mlp", "-o", o(LONG + ".safetensors")]),
        ("export", lambda: ["export", pick.one(NAMES + BAD_FILES + BAD_DIRS, f)]),
        ("export", lambda: ["export", "mlp", "--to", pick.one(["onx", "", "ONNX", "trt"])]),
        ("export", lambda: ["export", "mlp", "--opset", pick.one(["abc", "", "1.5", "nan"])]),
        ("export", lambda: ["export", "mlp", pick.one(["--batch", "--workspace",
                                                       "--calib-samples"]), i()]),
        ("export", lambda: ["export", "mlp", "--dla-core",  # core 0 exists
                            pick.one([v for v in BAD_INTS if v != "0"])]),
        ("export", lambda: ["export", "mlp", pick.one(["--atol", "--rtol"]), x()]),
        ("export", lambda: ["export", "mlp", "--device", pick.one(BAD_PROFILES, f)]),
        ("export", lambda: ["export", "mlp", "--precision", pick.one(["fp64", "", "int4"])]),
        # issue 45: re-export over a folder holding the user's files; a long output name
        *_weighted("export", lambda: ["export", pick.one(["mlp", "mlp:small", "art"], f), "-o",
                            f(NOT_EDGEKITS),
                            *some(["--batch", "1"], ["--opset", "17"], ["--to", "onnx"])]),
        ("export", lambda: ["export", "mlp", "-o", o(LONG)]),
        ("export", lambda: ["export", "mlp", "--device", "loihi", "-o", o("loihi")]),
        # issue 45: edited or forged manifests, bundled for a device
        *_weighted("export", lambda: ["export", f(EDITED_ARTIFACTS), "--to", "jetson-bundle",
                                      "-o", o("bundle")]),
        *_weighted("export", lambda: ["export", f(BAD_WIDTHS),
                                      *some(["-o", o("w")], ["--batch", "2"])]),
        ("validate", lambda: ["validate", pick.one(NAMES + BAD_FILES + BAD_DIRS, f)]),
        ("validate", lambda: ["validate", f(BAD_DIRS), "--against", pick.one(["nosuch", ""])]),
        ("validate", lambda: ["validate", f(BAD_DIRS), pick.one(["--atol", "--rtol"]), x()]),
        *_weighted("validate", lambda: ["validate", f(EDITED_ARTIFACTS),
                              *some(["--against", "reference"], ["--atol", "1e-3"],
                                    ["--json", o("v.json")])]),
        ("validate", lambda: ["validate", f(BAD_WIDTHS)]),
        ("profile", lambda: ["profile", pick.one(NAMES + BAD_FILES + BAD_DIRS, f)]),
        ("profile", lambda: ["profile", "mlp", "--backend", pick.one(["nosuch", "", "TORCH"])]),
        ("profile", lambda: ["profile", "mlp", "--device", pick.one(BAD_PROFILES, f)]),
        ("profile", lambda: ["profile", "mlp", pick.one(["--batch", "--threads", "--iterations"]),
                             i()]),
        ("profile", lambda: ["profile", "mlp", pick.one(["--warmup", "--duration"]), x()]),
        ("profile", lambda: ["profile", "mlp", "--energy", pick.one(["nosuch", "", "RAPL"])]),
        # issue 45: measuring here under another device's profile; edited manifests; widths
        *_weighted("profile", lambda: ["profile", pick.one(["mlp", "mlp:small", "art"], f),
                                       "--device",
                             foreign(), *some(["--duration", "0.1"], ["--backend", "torch"],
                                              ["--energy", "estimate"])]),
        *_weighted("profile", lambda: ["profile", f(EDITED_ARTIFACTS),
                             *some(["--backend", "onnxruntime"], ["--duration", "0.1"],
                                   ["--batch", "1"])]),
        *_weighted("profile", lambda: ["profile", f(BAD_WIDTHS), "--duration", "0.1"]),
        ("fleet worker", lambda: ["fleet", "worker", "127.0.0.1:1",
                                  pick.one(["--device", "--as-device"]),
                                  pick.one([foreign(), "loihi", "nosuch"])]),
        ("fleet worker", lambda: ["fleet", "worker", "127.0.0.1:1", "--device", foreign(),
                                  "--as-device", foreign()]),
        ("compare", lambda: ["compare", n()]),
        ("compare", lambda: ["compare"]),
        ("compare", lambda: ["compare", "mlp", "--device", pick.one(BAD_PROFILES, f)]),
        ("compare", lambda: ["compare", "mlp", "--data", f(BAD_FILES)]),
        ("compare", lambda: ["compare", "mlp", pick.one(["--batch", "--threads"]), i()]),
        ("compare", lambda: ["compare", "mlp", "--duration", x()]),
        ("compare", lambda: ["compare", "mlp", pick.one(["--json", "--csv", "--plot"]),
                             pick.one(["", "emptydir"], f)]),
        # issue 45: saved reports with NaN, infinity or a wrong type, a missing file
        *_weighted("compare", lambda: ["compare", "--from", f(BAD_REPORTS),
                             *some(["--from", f(["report_good.json"])],
                                   ["--json", o("merged.json")])]),
        ("compare", lambda: ["compare", f(BAD_WIDTHS), "--duration", "0.1"]),
        ("simulate", lambda: ["simulate", n()]),
        ("simulate", lambda: ["simulate", "mlp"]),  # not a spiking net
        ("simulate", lambda: ["simulate", "spiking-cnn", "--checkpoint", f(BAD_FILES)]),
        ("simulate", lambda: ["simulate", "spiking-cnn", "--data", f(BAD_FILES)]),
        ("simulate", lambda: ["simulate", "spiking-cnn", pick.one(["--samples", "-T",
                                                                   "--threads"]), i()]),
        ("simulate", lambda: ["simulate", "spiking-cnn", pick.one(["--device", "--chip"]),
                              pick.one(BAD_PROFILES, f)]),
        ("simulate", lambda: ["simulate", f(BAD_WIDTHS)]),
        # issue 45: a broken calibration.json in the edgekit home
        *_weighted("devices", lambda: (["devices", *some(["--show", "generic-x86-64-cpu"],
                                               ["--json", o("d.json")])],
                             {"EDGEKIT_HOME": f(HOMES)})),
        ("moe", lambda: ["moe", pick.one(["nosuch", "", "BENCH"])]),
        ("moe bench", lambda: ["moe", "bench", f(BAD_DIRS)]),
        ("moe bench", lambda: ["moe", "bench", f(BAD_DIRS), "--modes",
                               pick.one([",", "", "nosuch", " , "])]),
        ("moe bench", lambda: ["moe", "bench", f(BAD_DIRS), pick.one(["--max-new-tokens",
                                                                      "--workers",
                                                                      "--threads"]), i()]),
        ("moe bench", lambda: ["moe", "bench", f(BAD_DIRS), "--memory-budget",
                               pick.one(["", "lots", "-1GB", "1XB"])]),
        ("moe serve", lambda: ["moe", "serve", f(BAD_DIRS)]),
        ("moe serve", lambda: ["moe", "serve", f(BAD_DIRS), "--mode", pick.one(["nosuch", ""])]),
        ("moe serve", lambda: ["moe", "serve", f(BAD_DIRS), "--policy", pick.one(["nosuch", ""])]),
        ("moe serve", lambda: ["moe", "serve", f(BAD_DIRS), pick.one(["--full-ratio",
                                                                      "--bandwidth"]), x()]),
        ("moe verify", lambda: ["moe", "verify", f(BAD_DIRS)]),
        # issue 45: forged stores (negative offset, trace of the wrong length, a dtype lie, an
        # unreadable data file)
        *_weighted("moe verify", lambda: ["moe", "verify", f(FORGED_STORES)]),
        *_weighted("moe serve", lambda: ["moe", "serve", f(FORGED_STORES), *SERVE,
                               *some(["--no-prefetch"], ["--policy", "lru"])]),
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS), "-o", o("store")]),
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS)]),
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS), "-o", o("s"),
                                  "--codec", pick.one(["nosuch", ""])]),
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS), "-o", o("s"),
                                  pick.one(["--chunks", "--workers", "--level"]), i()]),
        # issue 45: a bad checkpoint compressed over a good store; a good one over the user's
        *_weighted("moe compress", lambda: ["moe", "compress", f(BAD_MOE_INPUTS), "-o",
                                            f(["good.zmoe"]),
                                  *some(["--no-trace"], ["--level", "3"], ["--chunks", "2"],
                                        ["--workers", "1"])]),
        *_weighted("moe compress", lambda: ["moe", "compress", f(["tiny"]), "-o",
                                  f([*NOT_EDGEKITS, "tiny"])]),  # tiny: its own input
        ("moe make-tiny", lambda: ["moe", "make-tiny", o("tiny"), "--family",
                                   pick.one(["nosuch", "", "QWEN"])]),
        ("moe make-tiny", lambda: ["moe", "make-tiny", o("tiny"), "--size",
                                   pick.one(["huge", ""])]),
        ("moe make-tiny", lambda: ["moe", "make-tiny", f(["unwritable", "text.txt", "keep",
                                                          "art_notes"])]),
        ("astra", lambda: ["astra", pick.one(["nosuch", "", "RUN"])]),
        ("astra run", lambda: ["astra", "run", "--mode", pick.one(["nosuch", "", "ASTRA"])]),
        ("astra run", lambda: ["astra", "run", "--model", pick.one(["nosuch", "", "vit-x"])]),
        ("astra run", lambda: ["astra", "run", pick.one(["--world-size", "--tokens", "--groups",
                                                         "--batch", "--reps", "--threads",
                                                         "--bp-blocks", "--astra-groups"]),
                               i()]),
        ("astra run", lambda: ["astra", "run", pick.one(["--latency-ms", "--loss", "--budget-s",
                                                         "--timeout"]), x()]),
        ("astra run", lambda: ["astra", "run", "--bandwidth", pick.one(["", "fast", "10MB",
                                                                        "-5Mbps", "1e999Gbps"])]),
        ("astra run", lambda: ["astra", "run", "--fault", pick.one(["", "x", "1:explode", "9:crash",
                                                                    "-1:hang", "1:"])]),
        ("astra run", lambda: ["astra", "run", "--mode", "single"]),  # needs --world-size 1
        ("astra run", lambda: ["astra", "run", "--json", pick.one(["", "emptydir",
                                                                   "notdir_json"], f)]),
        ("astra bench", lambda: ["astra", "bench", "--model", pick.one(["nosuch", ""])]),
        ("astra bench", lambda: ["astra", "bench", pick.one(["--tokens", "--world-size", "--reps",
                                                             "--threads", "--extra-groups"]),
                                 i()]),
        ("astra bench", lambda: ["astra", "bench", "--bandwidth", pick.one(["", "fast", "10MB"])]),
        ("astra bench", lambda: ["astra", "bench", pick.one(["--latency-ms", "--loss",
                                                             "--budget-s"]), x()]),
        ("astra model", lambda: ["astra", "model", "--model", pick.one(["nosuch", ""])]),
        ("astra model", lambda: ["astra", "model", pick.one(["--tokens", "--groups",
                                                             "--world-size"]), i()]),
        ("astra model", lambda: ["astra", "model", pick.one(["--latency-ms", "--loss", "--gflops",
                                                             "--single-s"]), x()]),
        ("astra model", lambda: ["astra", "model", "--profile", pick.one(BAD_PROFILES, f)]),
        ("astra model", lambda: ["astra", "model", "--bandwidth", pick.one(["", "10MB", "slow"])]),
        ("astra model", lambda: ["astra", "model", "--json", pick.one(["", "emptydir"], f)]),
        ("(group)", lambda: [pick.one(["nosuch", "", "--nosuch", "DEVICES", "-x"])]),
    ]


class _Picker:
    def __init__(self, rng: random.Random, files: dict[str, str], out: Path,
                 foreign: list[str]) -> None:
        self.rng, self.files, self.folder, self.count = rng, files, out, 0
        self.foreign_names = foreign or ["loihi"]

    def one(self, choices, resolve=None):
        value = self.rng.choice(choices)
        return resolve([value]) if resolve is not None else value

    def file(self, choices) -> str:
        value = self.rng.choice(choices)
        return self.files.get(value, value)

    def name(self) -> str:
        return self.rng.choice(NAMES)

    def int_(self) -> str:
        return self.rng.choice(BAD_INTS)

    def float_(self) -> str:
        return self.rng.choice(BAD_FLOATS)

    def foreign(self) -> str:
        return self.rng.choice(self.foreign_names)

    def some(self, *options: list[str]) -> list[str]:
        """None, one or two of ``options``, flattened (distinct cases of one class)."""
        chosen = self.rng.sample(options, self.rng.randint(0, min(2, len(options))))
        return [word for option in chosen for word in option]

    def out(self, stem: str) -> str:
        self.count += 1
        return str(self.folder / f"{stem}-{self.count}")


def generate(files: dict[str, str], out: Path, count: int = CASES,
             foreign: list[str] | None = None) -> list[Case]:
    """``count`` distinct bad invocations, every template used, from a seeded generator."""
    rng = random.Random(SEED)
    pick = _Picker(rng, files, out, foreign or [])
    templates = _templates(pick)
    cases: list[Case] = []
    seen: set[tuple[str, ...]] = set()
    former = {tuple(c.args) for c in FORMER_FAILURES}
    attempts = 0
    while len(cases) < count and attempts < 50 * count:
        command, build = templates[attempts % len(templates)] if attempts < len(templates) \
            else rng.choice(templates)
        attempts += 1
        built = build()
        args, env = built if isinstance(built, tuple) else (built, {})
        key = (*args, *sorted(env.items()))
        if key not in seen and tuple(args) not in former:
            seen.add(key)
            cases.append(Case(command, args, env))
    return cases


def _former(command: str, args: list[str], env: dict[str, str] | None = None) -> Case:
    return Case(command, args, env or {})


# Inputs that hung, exited 0, lost data or crashed before the fixes of issues 17 and 45.
FORMER_FAILURES: list[Case] = [
    _former("models", ["models", "--family", "nosuch"]),
    _former("train", ["train", "ds-cnn:"]),
    _former("train", ["train", "mlp:"]),
    _former("train", ["train", "mlp", "--epochs", "1", "--seconds", "inf"]),
    _former("profile", ["profile", "mlp", "--warmup", "nan"]),
    _former("profile", ["profile", "mlp", "--duration", "inf"]),
    _former("profile", ["profile", "mlp", "--duration", "1e308"]),
    _former("compare", ["compare", "mlp", "--duration", "nan"]),
    _former("astra model", ["astra", "model", "--gflops", "nan"]),
    _former("astra model", ["astra", "model", "--single-s", "nan"]),
    _former("export", ["export", "mlp", "--atol", "nan"]),
    _former("profile", ["profile", "mlp", "--batch", "99999999999999999999"]),
    _former("simulate", ["simulate", "spiking-cnn", "--samples", "99999999999999999999"]),
    # data loss: a folder of the user's own files given as an output folder
    _former("moe make-tiny", ["moe", "make-tiny", "{keep}"]),
    # metadata of the right format with fields of the wrong type
    _former("export", ["export", "{typed.safetensors}"]),
    # issue 45: train -o over weights or a file edgekit did not write
    _former("train", ["train", "mlp", "-o", "{random.safetensors}"]),
    _former("train", ["train", "mlp", "-o", "{typed.safetensors}"]),
    # issue 45: a record with a negative or a string width (internal errors before)
    _former("export", ["export", "{negwidth.safetensors}"]),
    _former("export", ["export", "{strwidth.safetensors}"]),
    _former("profile", ["profile", "{negwidth.safetensors}", "--duration", "0.1"]),
    _former("profile", ["profile", "{strwidth.safetensors}", "--duration", "0.1"]),
    # issue 45: a failing compress replaced the good store; re-export deleted the user's note
    _former("moe compress", ["moe", "compress", "{tiny_int8}", "-o", "{good.zmoe}"]),
    _former("moe compress", ["moe", "compress", "{tiny_nan}", "-o", "{good.zmoe}"]),
    _former("export", ["export", "mlp:small", "-o", "{art_notes}"]),
    # issue 45: x86 timings labelled as another device's
    _former("profile", ["profile", "mlp:small", "--device", "{foreign}"]),
    # issue 45: edited manifests passed; another model's graph was profiled under the name
    _former("validate", ["validate", "{art_shape}"]),
    _former("profile", ["profile", "{art_outputs}", "--duration", "0.1"]),
    _former("export", ["export", "{art_batch}", "--to", "jetson-bundle", "-o", "{out}"]),
    _former("profile", ["profile", "{art_foreign}", "--duration", "0.1"]),
    _former("profile", ["profile", "{art_nofile}", "--duration", "0.1"]),  # found by this fuzz
    _former("export", ["export", "{art_foreign}", "--to", "jetson-bundle", "-o", "{out}"]),
    # issue 45: internal errors on a forged store, a wrong-length trace, an unreadable file
    _former("moe verify", ["moe", "verify", "{store_negoff}"]),
    _former("moe serve", ["moe", "serve", "{store_short}", *SERVE]),
    _former("moe verify", ["moe", "verify", "{store_locked}"]),
    # issue 45: NaN in a saved report merged; a missing one was 'not valid JSON'
    _former("compare", ["compare", "--from", "{report_nan.json}"]),
    _former("compare", ["compare", "--from", "{missing}"]),
    # issue 45: a calibration.json without figures was shown as "figures: measured"
    _former("devices", ["devices"], {"EDGEKIT_HOME": "{home_empty_peak}"}),
    # a model name too long for a file name was an internal error (OSError ENAMETOOLONG)
    _former("simulate", ["simulate", LONG]),
    _former("simulate", ["simulate", f"{LONG}.safetensors"]),
    _former("train", ["train", "mlp", "-o", f"{LONG}.safetensors"]),
]
