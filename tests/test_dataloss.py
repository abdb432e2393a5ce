"""Issue 17, data loss: no command deletes what the user kept (real files; each kind of refusal
once from a real ``edgekit`` process, the other runs in process)."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from click.testing import CliRunner
from oneline import one_line_error
from safetensors.torch import save

from edgekit import create_model
from edgekit.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from edgekit.errors import UsageError
from edgekit.fileio import atomic_directory

EXE = [sys.executable, "-m", "edgekit"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """A real ``edgekit`` process: its exit code and its stderr, one line for a refusal."""
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([*EXE, *args], capture_output=True, text=True, env=env, timeout=300)


def run_here(*args: str) -> subprocess.CompletedProcess[str]:
    """The same command in process, sparing an interpreter start (torch's import) per run."""
    from edgekit.cli import cli

    result = CliRunner().invoke(cli, list(args))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def refused(proc, *fragments):
    one_line_error(proc.returncode, proc.stderr, 2, *fragments)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# 1. -o DIR never replaces a folder edgekit did not write, nor an input

def test_export_refuses_a_folder_edgekit_did_not_write(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    proc = run("export", "mlp:small", "--to", "onnx", "-o", str(out))
    refused(proc, str(out), "--force")
    assert (out / "thesis.tex").read_text() == "years of work"
    # --force replaces anything; an artifact edgekit wrote is then replaced without it
    proc = run_here("export", "mlp:small", "-o", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert not (out / "thesis.tex").exists() and (out / "manifest.json").is_file()
    assert run_here("export", "mlp:small", "-o", str(out)).returncode == 0


def test_reexport_keeps_a_file_the_user_put_in_the_artifact(tmp_path):
    """Issue 45: only what edgekit wrote is replaced; a note beside it is refused (--force)."""
    art = tmp_path / "art"
    assert run_here("export", "mlp:small", "-o", str(art)).returncode == 0
    (art / "NOTES.md").write_text("x")
    refused(run("export", "mlp:small", "-o", str(art)), f"{art} holds NOTES.md", "--force")
    assert (art / "NOTES.md").read_text() == "x"
    (art / "NOTES.md").unlink()
    (art / "runs").mkdir()  # a folder of the user's, even an empty one
    refused(run_here("export", "mlp:small", "-o", str(art)), "holds runs/,", "--force")
    (art / "runs").rmdir()
    assert run_here("export", "mlp:small", "-o", str(art)).returncode == 0
    (art / "NOTES.md").write_text("x")
    assert run_here("export", "mlp:small", "-o", str(art), "--force").returncode == 0
    assert sorted(p.name for p in art.iterdir()) == ["manifest.json", "model.onnx",
                                                     "reference.npz"]


def test_every_folder_writer_keeps_a_file_the_user_put_in_its_folder(tmp_path):
    """The rule lives in the shared check: a ZipMoE store, a tiny checkpoint and a precision
    artifact with a file of the user's in them are refused as an export artifact is."""
    from edgekit.fileio import check_output

    tiny, store = tmp_path / "tiny", tmp_path / "store"
    assert run_here("moe", "make-tiny", str(tiny)).returncode == 0
    assert run_here("moe", "compress", str(tiny), "-o", str(store), "--no-trace").returncode == 0
    check_output(store)
    check_output(tiny)
    for folder, args in ((store, ("moe", "compress", str(tiny), "-o", str(store), "--no-trace")),
                         (tiny, ("moe", "make-tiny", str(tiny)))):
        (folder / "keep.txt").write_text("mine")
        refused(run_here(*args), f"{folder} holds keep.txt", "--force")
        assert (folder / "keep.txt").read_text() == "mine"
        (folder / "keep.txt").unlink()
        (folder / "link").symlink_to(tmp_path)
        with pytest.raises(UsageError, match="holds link, which edgekit did not write"):
            check_output(folder)
        (folder / "link").unlink()


def test_export_output_never_holds_its_input(tmp_path):
    folder = tmp_path / "work"
    ckpt = save_checkpoint(create_model("mlp:small"), folder / "m.safetensors")
    (folder / "manifest.json").write_text(json.dumps({"schema_version": 1, "format": "onnx",
                                                      "files": {}}))
    proc = run("export", str(ckpt), "-o", str(folder), "--force")
    refused(proc, "overlaps the input")
    assert ckpt.is_file()


def test_moe_compress_refuses_to_write_over_its_input(tmp_path):
    ckpt = tmp_path / "ckpt"
    assert run_here("moe", "make-tiny", str(ckpt)).returncode == 0
    before = sorted(p.name for p in ckpt.iterdir())
    proc = run("moe", "compress", str(ckpt), "-o", str(ckpt), "--no-trace")
    refused(proc, str(ckpt), "overlaps the input")
    assert sorted(p.name for p in ckpt.iterdir()) == before
    link = tmp_path / "link"
    link.symlink_to(ckpt)  # the same folder under another name
    refused(run_here("moe", "compress", str(ckpt), "-o", str(link), "--no-trace"), "overlaps")
    # a store edgekit wrote is replaced; a user's folder is not, unless --force
    store = tmp_path / "store"
    for _ in range(2):
        proc = run_here("moe", "compress", str(ckpt), "-o", str(store), "--no-trace")
        assert proc.returncode == 0, proc.stderr
    refused(run_here("moe", "compress", str(ckpt), "-o", str(tmp_path), "--no-trace"),
            "overlaps")


def test_make_tiny_replaces_its_own_folder_only(tmp_path):
    mine = tmp_path / "photos"
    mine.mkdir()
    (mine / "cat.jpg").write_bytes(b"\xff\xd8")
    refused(run("moe", "make-tiny", str(mine)), str(mine), "--force")
    assert (mine / "cat.jpg").is_file()
    tiny = tmp_path / "tiny"
    assert run_here("moe", "make-tiny", str(tiny)).returncode == 0
    assert run_here("moe", "make-tiny", str(tiny), "--seed", "3").returncode == 0
    assert run_here("moe", "make-tiny", str(mine), "--force").returncode == 0
    assert not (mine / "cat.jpg").exists()


def test_check_output_overlaps(tmp_path):
    from edgekit.fileio import check_output

    src = tmp_path / "in"
    src.mkdir()
    for out in (src, src / "sub", tmp_path):
        with pytest.raises(UsageError, match="overlaps the input"):
            check_output(out, inputs=[src], force=True)
    check_output(tmp_path / "other", inputs=[src])  # a sibling is fine
    check_output(tmp_path / "empty", inputs=[])
    (tmp_path / "empty").mkdir()
    check_output(tmp_path / "empty")  # an empty folder holds nothing to lose


def test_train_replaces_only_a_checkpoint_edgekit_wrote(tmp_path):
    """Issue 45: ``train -o`` refuses an existing file edgekit did not write (foreign weights, a
    user's file) before any work; a checkpoint edgekit wrote is replaced; --force replaces any."""
    from safetensors.torch import save_file

    from edgekit.fileio import check_output

    theirs = tmp_path / "w.safetensors"
    save_file({"w": torch.ones(3)}, str(theirs), metadata={"format": "pt"})
    before = theirs.read_bytes()
    refused(run("train", "mlp:small", "-o", str(theirs)), f"{theirs} exists", "--force")
    assert theirs.read_bytes() == before
    text = tmp_path / "notes.safetensors"
    text.write_text("not weights at all")
    refused(run_here("train", "mlp:small", "-o", str(text)), "not a file edgekit wrote")
    assert text.read_text() == "not weights at all"
    ours = save_checkpoint(create_model("mlp:small"), tmp_path / "ours.safetensors")
    check_output(ours)  # an edgekit checkpoint may be replaced
    proc = run_here("train", "mlp:small", "--epochs", "1", "-o", str(theirs), "--force")
    assert proc.returncode == 0, proc.stderr
    assert read_checkpoint(theirs).model_name == "mlp:small"
    proc = run_here("train", "mlp:small", "--epochs", "1", "-o", str(theirs))
    assert proc.returncode == 0, proc.stderr


# 2. a checkpoint is one file: no sidecar that overwrites a neighbour

def test_checkpoint_is_one_file_and_spares_a_neighbour_json(tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    path = save_checkpoint(create_model("mlp:small"), tmp_path / "notes.safetensors",
                           metrics={"accuracy": 0.5})
    assert notes.read_text() == '{"mine": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json", "notes.safetensors"]
    ckpt = read_checkpoint(path)
    assert ckpt.model_name == "mlp:small" and ckpt.metrics == {"accuracy": 0.5}
    load_checkpoint(path)


def test_checkpoint_metadata_of_a_wrong_type_is_one_line(tmp_path):
    model = create_model("mlp")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    record = {"format": "edgekit-checkpoint/2", "entry": "mlp", "variant": None,
              "config": [1, 2], "metrics": {}, "weights_sha256": "0" * 64}
    path = tmp_path / "bad.safetensors"
    path.write_bytes(save(state, metadata={"edgekit": json.dumps(record)}))
    with pytest.raises(UsageError, match=r"bad.safetensors.*field 'config' must be dict, not list"):
        read_checkpoint(path)
    path.write_bytes(save(state, metadata={"format": "pt"}))
    with pytest.raises(UsageError, match="not an edgekit checkpoint"):
        read_checkpoint(path)


def test_checkpoint_with_a_legacy_sidecar_still_loads(tmp_path):
    import hashlib

    model = create_model("mlp")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    blob = save(state, metadata={"format": "edgekit-checkpoint/1", "entry": "mlp"})
    path = tmp_path / "old.safetensors"
    path.write_bytes(blob)
    (tmp_path / "old.json").write_text(json.dumps({
        "format": "edgekit-checkpoint/1", "entry": "mlp", "variant": None,
        "config": dict(model.edgekit_cfg["config"]), "metrics": {},
        "weights_sha256": hashlib.sha256(blob).hexdigest()}))
    loaded, ckpt = load_checkpoint(path)
    assert ckpt.model_name == "mlp"


# 3. the folder swap: OUT is always the old or the new complete folder

def test_replacement_is_one_atomic_exchange(tmp_path):
    from edgekit.fileio import _exchange

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    assert _exchange(a, b), "renameat2(RENAME_EXCHANGE) should work on Linux tmp folders"
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


def test_a_run_killed_between_the_two_renames_is_undone_by_the_next(tmp_path):
    out = tmp_path / "OUT"
    # what the two-rename fallback leaves when killed between its renames: OUT gone, the old
    # copy hidden beside it under the dead run's pid
    old = tmp_path / f".OUT.{dead_pid()}-abcd1234.old"
    old.mkdir()
    (old / "good").write_text("old")
    stale = tmp_path / f".OUT.{dead_pid()}-efgh5678.partial"
    stale.mkdir()
    alive = tmp_path / f".OUT.{os.getppid()}-ijkl9012.partial"  # a live run's: never touched
    alive.mkdir()
    foreign = tmp_path / ".OUT.notes"
    foreign.mkdir()
    time.sleep(0.01)
    with pytest.raises(RuntimeError), atomic_directory(out, force=True):
        raise RuntimeError("this run fails too")
    assert (out / "good").read_text() == "old"
    assert not old.exists() and not stale.exists() and alive.exists() and foreign.exists()


WRITER = """
import sys
from pathlib import Path
from edgekit.fileio import atomic_directory
out, gen = Path(sys.argv[1]), 0
while True:
    gen += 1
    with atomic_directory(out, force=True) as staging:
        for i in range(40):
            (staging / f"f{i}").write_text(str(gen))
        (staging / "done").write_text(str(gen))
"""


def test_sigkill_at_any_time_leaves_the_old_or_the_new_folder(tmp_path):
    out = tmp_path / "OUT"
    rng = random.Random(0)
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)])
        time.sleep(0.4 + rng.random() * 0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with atomic_directory(out, force=True):  # the next run recovers and cleans up
            assert out.is_dir()
            gens = {(out / f"f{i}").read_text() for i in range(40)}
            assert gens == {(out / "done").read_text()}
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".OUT.")]
        assert leftovers == []


# 4. SIGTERM cleans up as Ctrl-C does (issue 45)

def _sigterm_once_staging(proc: subprocess.Popen, parent, name: str, timeout_s: float = 120):
    """SIGTERM to ``proc`` as soon as its staging folder for ``name`` exists."""
    deadline = time.monotonic() + timeout_s
    while not list(parent.glob(f".{name}.*.partial")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the staging folder never appeared"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)


def test_sigterm_during_export_leaves_no_staging_folder(tmp_path):
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen([*EXE, "export", "ds-cnn", "-o", str(tmp_path / "art")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = _sigterm_once_staging(proc, tmp_path, "art")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "edgekit: terminated", err
    assert list(tmp_path.iterdir()) == [], [(p, list(p.rglob("*"))) for p in tmp_path.iterdir()]


def test_sigterm_to_any_writer_keeps_the_old_folder_and_removes_the_new(tmp_path):
    """Every writer goes through ``atomic_directory``: a SIGTERM while it writes leaves OUT as
    it was and no ``.OUT.PID-*.partial`` beside it."""
    out = tmp_path / "OUT"
    with atomic_directory(out) as staging:
        (staging / "good").write_text("old")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], stderr=subprocess.PIPE,
                            text=True)
    try:
        _, err = _sigterm_once_staging(proc, tmp_path, "OUT")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode != -signal.SIGTERM, "SIGTERM killed it before it cleaned up"
    assert [p.name for p in tmp_path.iterdir()] == ["OUT"]
    if (out / "done").is_file():  # a generation completed before the signal: whole
        assert {(out / f"f{i}").read_text() for i in range(40)} == {(out / "done").read_text()}
    else:
        assert (out / "good").read_text() == "old"
