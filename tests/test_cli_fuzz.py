"""A seeded fuzz of the whole CLI with bad input: no traceback, no hang, never exit 0, and nothing
touched outside the test's own output folder (issue 17).

Every command that ``edgekit --help`` lists (method groups ``moe`` and ``astra`` included) gets
unknown names, wrong types, empty strings, NaN/inf/huge numbers, missing, corrupt and wrong-kind
files (a folder where a file belongs and a file where a folder belongs, random bytes as
.safetensors/.onnx/.npz/.toml/.json) and paths nobody can write. The cases run in-process with
click's CliRunner under a per-invocation time limit, so the corpus takes seconds; every input is
chosen to be refused before any training or profiling starts.

``FORMER_FAILURES`` lists, each with its own test id, the inputs the first run of this fuzz found
hanging, exiting 0, losing data or trusting metadata (numeric options, -o over a user's folder,
wrongly typed metadata); they must be refused with exit code 2.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgekit.cli import cli

SEED = 17
CASES = 330
LIMIT_S = 5.0  # per invocation; anything slower counts as a hang
UNWRITABLE = "/proc/edgekit-fuzz/out"  # not even root can create files under /proc


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so the CLI's catch-all cannot swallow it."""


# --- the sandbox: every file a case may name, and nothing else ---------------------------------

def _sandbox(root: Path) -> dict[str, str]:
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
    for name, hidden in (("negwidth", [-4]), ("strwidth", ["x"])):
        files[f"{name}.safetensors"] = str(_checkpoint_with(root / f"{name}.safetensors",
                                                            hidden=hidden))
    files["missing"] = str(root / "does-not-exist.npz")
    files["missing_dir"] = str(root / "no-such-folder")
    files["unwritable"] = UNWRITABLE
    files["unwritable_json"] = UNWRITABLE + ".json"
    files["notdir_json"] = str(root / "text.txt" / "out.json")  # a file where a folder belongs
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


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, mtime and content hash."""
    state = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        state[str(path.relative_to(root))] = (path.is_dir(), st.st_mtime_ns, st.st_size, digest)
    return state


# --- the generator -----------------------------------------------------------------------------

NAMES = ["nosuch", "", " ", "mlp:nosuch", "../../etc/passwd", "x" * 300, "\u2603", "-",
         "MLP", "mlp::small"]
BAD_INTS = ["abc", "", "1.5", "nan", "inf", "-1", "0", "1e999", "0x10"]
BAD_FLOATS = ["abc", "", "-1", "-inf", "1,5", "--", "1e", "0x"]
BAD_FILES = ["random.safetensors", "random.onnx", "random.npz", "random.toml", "random.json",
             "random.npy", "empty.npz", "empty.toml", "empty.json", "empty.safetensors",
             "zip.npz", "deep.toml", "latin1.toml", "deep.json", "list.json", "text.txt",
             "folder.safetensors", "folder.npz", "folder.toml", "folder.json", "missing",
             "missing_dir"]
BAD_DIRS = ["random.safetensors", "text.txt", "emptydir", "store", "artifact", "hfckpt",
            "missing_dir", "random.onnx", "folder.onnx"]
BAD_PROFILES = ["nosuch", "", "random.toml", "empty.toml", "deep.toml", "latin1.toml",
                "folder.toml", "missing", "text.txt"]


def _templates(pick):
    """(command, builder) pairs; each builder returns one bad argument list."""
    f, n, i, x = pick.file, pick.name, pick.int_, pick.float_
    return [
        ("devices", lambda: ["devices", "--show", pick.one(BAD_PROFILES + NAMES, f)]),
        ("devices", lambda: ["devices", "--json", pick.one(["", "unwritable_json",
                                                            "folder.json", "emptydir",
                                                            "notdir_json"], f)]),
        ("devices", lambda: ["devices", pick.one(["--nosuch", "extra", "--show"])]),
        ("models", lambda: ["models", "--json", pick.one(["", "unwritable_json", "emptydir"], f)]),
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
        ("export", lambda: ["export", pick.one(NAMES + BAD_FILES + BAD_DIRS, f)]),
        ("export", lambda: ["export", "mlp", "--to", pick.one(["onx", "", "ONNX", "trt"])]),
        ("export", lambda: ["export", "mlp", "--opset", pick.one(["abc", "", "1.5", "nan"])]),
        ("export", lambda: ["export", "mlp", pick.one(["--batch", "--workspace", "--dla-core",
                                                       "--calib-samples"]), i()]),
        ("export", lambda: ["export", "mlp", pick.one(["--atol", "--rtol"]), x()]),
        ("export", lambda: ["export", "mlp", "--device", pick.one(BAD_PROFILES, f)]),
        ("export", lambda: ["export", "mlp", "--precision", pick.one(["fp64", "", "int4"])]),
        ("validate", lambda: ["validate", pick.one(NAMES + BAD_FILES + BAD_DIRS, f)]),
        ("validate", lambda: ["validate", f(BAD_DIRS), "--against", pick.one(["nosuch", ""])]),
        ("validate", lambda: ["validate", f(BAD_DIRS), pick.one(["--atol", "--rtol"]), x()]),
        ("profile", lambda: ["profile", pick.one(NAMES + BAD_FILES + BAD_DIRS, f)]),
        ("profile", lambda: ["profile", "mlp", "--backend", pick.one(["nosuch", "", "TORCH"])]),
        ("profile", lambda: ["profile", "mlp", "--device", pick.one(BAD_PROFILES, f)]),
        ("profile", lambda: ["profile", "mlp", pick.one(["--batch", "--threads", "--iterations"]),
                             i()]),
        ("profile", lambda: ["profile", "mlp", pick.one(["--warmup", "--duration"]), x()]),
        ("profile", lambda: ["profile", "mlp", "--energy", pick.one(["nosuch", "", "RAPL"])]),
        ("compare", lambda: ["compare", n()]),
        ("compare", lambda: ["compare"]),
        ("compare", lambda: ["compare", "mlp", "--device", pick.one(BAD_PROFILES, f)]),
        ("compare", lambda: ["compare", "mlp", "--data", f(BAD_FILES)]),
        ("compare", lambda: ["compare", "mlp", pick.one(["--batch", "--threads"]), i()]),
        ("compare", lambda: ["compare", "mlp", "--duration", x()]),
        ("compare", lambda: ["compare", "mlp", pick.one(["--json", "--csv", "--plot"]),
                             pick.one(["", "emptydir"], f)]),
        ("simulate", lambda: ["simulate", n()]),
        ("simulate", lambda: ["simulate", "mlp"]),  # not a spiking net
        ("simulate", lambda: ["simulate", "spiking-cnn", "--checkpoint", f(BAD_FILES)]),
        ("simulate", lambda: ["simulate", "spiking-cnn", "--data", f(BAD_FILES)]),
        ("simulate", lambda: ["simulate", "spiking-cnn", pick.one(["--samples", "-T",
                                                                   "--threads"]), i()]),
        ("simulate", lambda: ["simulate", "spiking-cnn", pick.one(["--device", "--chip"]),
                              pick.one(BAD_PROFILES, f)]),
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
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS), "-o", pick.out("store")]),
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS)]),
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS), "-o", pick.out("s"),
                                  "--codec", pick.one(["nosuch", ""])]),
        ("moe compress", lambda: ["moe", "compress", f(BAD_DIRS), "-o", pick.out("s"),
                                  pick.one(["--chunks", "--workers", "--level"]), i()]),
        ("moe make-tiny", lambda: ["moe", "make-tiny", pick.out("tiny"), "--family",
                                   pick.one(["nosuch", "", "QWEN"])]),
        ("moe make-tiny", lambda: ["moe", "make-tiny", pick.out("tiny"), "--size",
                                   pick.one(["huge", ""])]),
        ("moe make-tiny", lambda: ["moe", "make-tiny", f(["unwritable", "text.txt"])]),
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
    def __init__(self, rng: random.Random, files: dict[str, str], out: Path) -> None:
        self.rng, self.files, self.folder, self.count = rng, files, out, 0

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

    def out(self, stem: str) -> str:
        self.count += 1
        return str(self.folder / f"{stem}-{self.count}")


def generate(files: dict[str, str], out: Path, count: int = CASES) -> list[tuple[str, list[str]]]:
    """``count`` distinct bad invocations, every template used, from a seeded generator."""
    rng = random.Random(SEED)
    pick = _Picker(rng, files, out)
    templates = _templates(pick)
    cases: list[tuple[str, list[str]]] = []
    seen: set[tuple[str, ...]] = set()
    attempts = 0
    while len(cases) < count and attempts < 50 * count:
        command, build = templates[attempts % len(templates)] if attempts < len(templates) \
            else rng.choice(templates)
        attempts += 1
        args = build()
        if tuple(args) not in seen and tuple(args) not in _FORMER_KEYS:
            seen.add(tuple(args))
            cases.append((command, args))
    return cases


# Inputs that hung, exited 0 or lost data before issue 17's fixes (numbers, data loss, schema).
FORMER_FAILURES: list[tuple[str, list[str]]] = [
    ("models", ["models", "--family", "nosuch"]),
    ("train", ["train", "ds-cnn:"]),
    ("train", ["train", "mlp:"]),
    ("train", ["train", "mlp", "--epochs", "1", "--seconds", "inf"]),
    ("profile", ["profile", "mlp", "--warmup", "nan"]),
    ("profile", ["profile", "mlp", "--duration", "inf"]),
    ("profile", ["profile", "mlp", "--duration", "1e308"]),
    ("compare", ["compare", "mlp", "--duration", "nan"]),
    ("astra model", ["astra", "model", "--gflops", "nan"]),
    ("astra model", ["astra", "model", "--single-s", "nan"]),
    ("export", ["export", "mlp", "--atol", "nan"]),
    ("profile", ["profile", "mlp", "--batch", "99999999999999999999"]),
    ("simulate", ["simulate", "spiking-cnn", "--samples", "99999999999999999999"]),
    # data loss: a folder of the user's own files given as an output folder
    ("moe make-tiny", ["moe", "make-tiny", "{keep}"]),
    # metadata of the right format with fields of the wrong type
    ("export", ["export", "{typed.safetensors}"]),
    # issue 45: train -o over weights or a file edgekit did not write
    ("train", ["train", "mlp", "-o", "{random.safetensors}"]),
    ("train", ["train", "mlp", "-o", "{typed.safetensors}"]),
    # issue 45: a record with a negative or a string width (internal errors before)
    ("export", ["export", "{negwidth.safetensors}"]),
    ("export", ["export", "{strwidth.safetensors}"]),
    ("profile", ["profile", "{negwidth.safetensors}", "--duration", "0.1"]),
    ("profile", ["profile", "{strwidth.safetensors}", "--duration", "0.1"]),
]
_FORMER_KEYS = {tuple(args) for _, args in FORMER_FAILURES}


# --- running -----------------------------------------------------------------------------------

def _alarm(signum, frame):
    raise _Hang()


def run_case(args: list[str], limit_s: float = LIMIT_S) -> dict[str, object]:
    """One in-process invocation under a wall-clock limit; what happened, as counts."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        result = CliRunner().invoke(cli, args, catch_exceptions=True)
    except _Hang:
        return {"hang": True, "traceback": False, "exit": None, "output": ""}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    return {"hang": False, "exit": result.exit_code, "output": result.output,
            "traceback": escaped or "Traceback" in result.output,
            "internal": "internal error" in result.output}


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    root = tmp_path / "sandbox"
    root.mkdir()
    out = tmp_path / "out"  # the only place a case may write
    (out / "home").mkdir(parents=True)
    monkeypatch.setenv("EDGEKIT_HOME", str(out / "home"))
    monkeypatch.chdir(out)  # default output paths (./MODEL-onnx) land here
    return root, _sandbox(root), out


def test_bad_invocations_are_refused_in_one_line(sandbox):
    root, files, out = sandbox
    cases = generate(files, out)
    assert len(cases) >= 300
    commands = {c.split()[0] for c, _ in cases}
    assert {"devices", "models", "datasets", "train", "export", "validate", "profile", "compare",
            "simulate", "moe", "astra"} <= commands
    # import every command's modules first (seconds, once), so the limit times each case alone
    assert CliRunner().invoke(cli, ["models", "--json", str(out / "warm.json")]).exit_code == 0
    before = _snapshot(root)
    failures, counts = [], Counter()
    for _command, args in cases:
        outcome = run_case(args)
        counts["cases"] += 1
        for key in ("hang", "traceback", "internal"):
            counts[key] += bool(outcome.get(key))
        counts["exit-0"] += outcome["exit"] == 0
        if outcome["hang"] or outcome["traceback"] or outcome.get("internal") \
                or outcome["exit"] == 0:
            failures.append((args, outcome["exit"], str(outcome["output"])[-300:]))
    print(f"\ncli fuzz: {dict(counts)}")
    assert _snapshot(root) == before, "a case touched a file outside its output folder"
    assert not failures, json.dumps(failures[:20], indent=1)


@pytest.mark.parametrize("command,args", FORMER_FAILURES,
                         ids=[" ".join(a) for _, a in FORMER_FAILURES])
def test_former_failures_are_refused(sandbox, command, args):
    root, files, out = sandbox
    args = [files.get(a[1:-1], a) if a.startswith("{") else a for a in args]
    before = _snapshot(root)
    outcome = run_case(args, limit_s=2.0)
    assert _snapshot(root) == before
    assert not outcome["hang"] and not outcome["traceback"], outcome["output"]
    assert outcome["exit"] == 2 and "internal error" not in str(outcome["output"]), \
        outcome["output"]


def test_the_generator_is_seeded(tmp_path):
    files = {k: k for k in ("x",)}
    first = generate(files, tmp_path, 50)
    assert first == generate(files, tmp_path, 50)
    assert all(os.fspath(a) == a for _, args in first for a in args)
