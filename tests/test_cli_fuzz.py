"""A seeded fuzz of the whole CLI with bad input: no traceback, no hang, never exit 0, and nothing
touched outside the test's own output folder (issues 17 and 45; the cases: ``fuzz_corpus``).

Every command that ``edgekit --help`` lists (method groups ``moe`` and ``astra`` included) gets
unknown names, wrong types, empty strings, NaN/inf/huge numbers, missing, corrupt and wrong-kind
files (a folder where a file belongs and a file where a folder belongs, random bytes as
.safetensors/.onnx/.npz/.toml/.json) and paths nobody can write. The cases run in-process with
click's CliRunner under a per-invocation time limit, so the corpus takes seconds; every input is
chosen to be refused before any training or profiling starts.

``FORMER_FAILURES`` lists, each with its own test id, the inputs this fuzz and issue 45's audit
found hanging, exiting 0, losing data, trusting metadata or failing as an internal error; they
must be refused with exit code 2.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzz_corpus import FORMER_FAILURES, build_sandbox, foreign_devices, generate

from edgekit.cli import cli

LIMIT_S = 5.0  # per invocation; anything slower counts as a hang


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so the CLI's catch-all cannot swallow it."""


def _alarm(signum, frame):
    raise _Hang()


def run_case(args: list[str], env: dict[str, str] | None = None,
             limit_s: float = LIMIT_S) -> dict[str, object]:
    """One in-process invocation under a wall-clock limit; what happened, as counts."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        result = CliRunner().invoke(cli, args, env=env or None, catch_exceptions=True)
    except _Hang:
        return {"hang": True, "traceback": False, "exit": None, "output": ""}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    return {"hang": False, "exit": result.exit_code, "output": result.output,
            "traceback": escaped or "Traceback" in result.output,
            "internal": "internal error" in result.output}


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, mtime and content hash (a link's target; a file
    nobody may read, as such)."""
    state = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            digest = os.readlink(path)
        elif path.is_file():
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except PermissionError:
                digest = "unreadable"
        else:
            digest = None
        state[str(path.relative_to(root))] = (path.is_dir(), st.st_mtime_ns, st.st_size, digest)
    return state


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """(root, files, out, foreign device names): the files every case may name, built once;
    the cases write only under ``out``, their working directory and edgekit home."""
    base = tmp_path_factory.mktemp("fuzz")
    root, out = base / "sandbox", base / "out"
    root.mkdir()
    (out / "home").mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEKIT_HOME", str(out / "home"))
        patch.chdir(out)  # default output paths (./MODEL-onnx) land here
        files = build_sandbox(root)
        yield root, files, out, foreign_devices()


def test_bad_invocations_are_refused_in_one_line(sandbox):
    root, files, out, foreign = sandbox
    cases = generate(files, out, foreign=foreign)
    assert len(cases) >= 500
    commands = {c.command.split()[0] for c in cases}
    assert {"devices", "models", "datasets", "train", "export", "validate", "profile", "compare",
            "simulate", "moe", "astra", "fleet"} <= commands
    # import every command's modules first, so the limit times each case alone
    for command in ("devices", "datasets", "train", "export", "validate", "profile", "compare",
                    "simulate", "moe", "astra", "fleet"):
        assert CliRunner().invoke(cli, [command, "--help"]).exit_code == 0
    before = _snapshot(root)
    failures, counts = [], Counter()
    for case in cases:
        outcome = run_case(case.args, case.env)
        counts["cases"] += 1
        for key in ("hang", "traceback", "internal"):
            counts[key] += bool(outcome.get(key))
        counts["exit-0"] += outcome["exit"] == 0
        if outcome["hang"] or outcome["traceback"] or outcome.get("internal") \
                or outcome["exit"] == 0:
            failures.append((case.args, case.env, outcome["exit"],
                             str(outcome["output"])[-300:]))
    changed = sorted(k for k, v in _snapshot(root).items() if before.get(k) != v)
    counts["touched"] = len(changed) + len(set(before) - set(_snapshot(root)))
    print(f"\ncli fuzz: {dict(counts)}")
    assert not changed and counts["touched"] == 0, f"a case touched {changed[:5]}"
    assert not failures, json.dumps(failures[:20], indent=1)


def _resolve(text: str, files: dict[str, str], out: Path, foreign: list[str]) -> str:
    if not (text.startswith("{") and text.endswith("}")):
        return text
    key = text[1:-1]
    if key == "foreign":
        return foreign[0] if foreign else "loihi"
    if key == "out":
        return str(out / "former")
    return files[key]


@pytest.mark.parametrize("case", FORMER_FAILURES,
                         ids=[" ".join(a[:60] for a in c.args)[:120] for c in FORMER_FAILURES])
def test_former_failures_are_refused(sandbox, case):
    root, files, out, foreign = sandbox
    args = [_resolve(a, files, out, foreign) for a in case.args]
    env = {k: _resolve(v, files, out, foreign) for k, v in case.env.items()}
    before = _snapshot(root)
    outcome = run_case(args, env, limit_s=LIMIT_S)
    assert _snapshot(root) == before
    assert not outcome["hang"] and not outcome["traceback"], outcome["output"]
    assert outcome["exit"] == 2 and "internal error" not in str(outcome["output"]), \
        outcome["output"]


def test_the_generator_is_seeded(tmp_path):
    files = {k: k for k in ("x",)}
    first = generate(files, tmp_path, 50)
    assert first == generate(files, tmp_path, 50)
    assert all(os.fspath(a) == a for case in first for a in case.args)
