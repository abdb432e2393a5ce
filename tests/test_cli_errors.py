"""Every failure the CLI can meet is one line and an exit code, never a traceback (issue 17).

Bad inputs (undecodable or absurdly nested profiles, EDGEKIT_HOME a file, ``--json ''``, .npy or
corrupt .npz data, tiny datasets, an empty mode list, unreadable files) exit 2; a bug in edgekit
exits 1 with ``internal error``; an interrupt at any point, start-up included, exits 130. A
user's broken profile is left out of the listings with one warning line, and an error only where
it is asked for by name.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgekit.cli import cli


def _one_line(result, code: int, *fragments: str) -> str:
    """The run exited ``code`` with a single ``edgekit: ...`` line holding ``fragments``."""
    assert result.exit_code == code, result.output
    assert not (result.exception and not isinstance(result.exception, SystemExit)), \
        result.exc_info
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgekit: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


not_root = pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")


# --- device profiles ---------------------------------------------------------------------------

def test_a_profile_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_bytes(b'name = "\xff\xfe"\n')
    _one_line(_run("devices", "--show", str(path)), 2, "bad.toml", "not UTF-8")


def test_a_profile_nested_5000_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    _one_line(_run("devices", "--show", str(path)), 2, "deep.toml", "nested too deeply")


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", b"x = " + b"{a = " * 5000])
def test_a_bad_user_profile_is_one_warning_line_and_one_error_when_named(edgekit_home, content):
    (edgekit_home / "profiles").mkdir()
    (edgekit_home / "profiles" / "mine.toml").write_bytes(content)
    listed = _run("devices")  # left out: the other profiles and detection still work
    assert listed.exit_code == 0, listed.output
    (warning,) = listed.stderr.strip().splitlines()
    assert warning.startswith("edgekit: warning: ") and "mine.toml" in warning
    assert "invalid TOML" in warning and "* detected:" in listed.stdout
    _one_line(_run("devices", "--show", "mine"), 2, "mine.toml", "invalid TOML")


def test_edgekit_home_pointing_at_a_file_is_one_line(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a folder")
    monkeypatch.setenv("EDGEKIT_HOME", str(home))
    _one_line(_run("devices"), 2, "EDGEKIT_HOME", "is not a folder")


# --- --json ------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["models"], ["devices"], ["compare", "mlp"],
                                     ["astra", "model"], ["moe", "bench", "nosuch-store"]])
def test_an_empty_json_path_is_refused_before_any_work(command):
    _one_line(_run(*command, "--json", ""), 2, "--json", "empty")


def test_a_json_path_that_is_a_folder_is_refused(tmp_path):
    _one_line(_run("models", "--json", str(tmp_path)), 2, "--json")


# --- user data ---------------------------------------------------------------------------------

def _train_data(path) -> object:
    return _run("train", "mlp", "--data", str(path), "-o", str(path.parent / "out.safetensors"))


def test_npy_instead_of_npz_is_one_line(tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.zeros((20, 1, 8, 8), np.float32))
    _one_line(_train_data(path), 2, "data.npy", ".npz")


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04" + bytes(range(256)) * 2,
                                     bytes(np.random.default_rng(0).integers(0, 256, 500,
                                                                             dtype=np.uint8))])
def test_an_empty_or_corrupt_npz_is_one_line(tmp_path, content):
    path = tmp_path / "data.npz"
    path.write_bytes(content)
    _one_line(_train_data(path), 2, "data.npz", "not a readable .npz")


@pytest.mark.parametrize("n", [10, 20, 30, 49])
def test_a_small_dataset_splits_without_a_traceback(n):
    from edgekit.data import DIGITS, _split

    y = np.arange(n) % 10
    x = np.zeros((n, *DIGITS.task.input_shape), np.float32)
    x_train, x_test, y_train, y_test = _split(x, y)
    assert len(x_train) + len(x_test) == n and len(y_test) == len(x_test) > 0


def test_a_small_npz_trains_from_the_cli(tmp_path):
    path = tmp_path / "small.npz"
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.random((20, 1, 8, 8), dtype=np.float32), y=np.arange(20) % 10)
    result = _run("train", "mlp", "--data", str(path), "--epochs", "1",
                  "-o", str(tmp_path / "m.safetensors"))
    assert result.exit_code == 0, result.output


# --- other refusals ----------------------------------------------------------------------------

def test_moe_bench_with_no_modes_is_one_line(tmp_path):
    store = tmp_path / "store"
    assert _run("moe", "make-tiny", str(tmp_path / "ckpt")).exit_code == 0
    assert _run("moe", "compress", str(tmp_path / "ckpt"), "-o", str(store)).exit_code == 0
    _one_line(_run("moe", "bench", str(store), "--modes", ","), 2, "--modes", "names no mode")


@not_root
def test_an_unreadable_checkpoint_is_one_line(tmp_path):
    ckpt = tmp_path / "m.safetensors"
    assert _run("train", "mlp", "--epochs", "1", "-o", str(ckpt)).exit_code == 0
    ckpt.chmod(0)
    _one_line(_run("export", str(ckpt), "-o", str(tmp_path / "art")), 2, "cannot read")


@not_root
def test_an_unreadable_store_is_one_line(tmp_path):
    store = tmp_path / "store"
    assert _run("moe", "make-tiny", str(tmp_path / "ckpt")).exit_code == 0
    assert _run("moe", "compress", str(tmp_path / "ckpt"), "-o", str(store)).exit_code == 0
    for path in store.iterdir():
        path.chmod(0)
    _one_line(_run("moe", "verify", str(store)), 2, str(store))


@not_root
def test_an_unreadable_user_profile_is_one_line(edgekit_home):
    (edgekit_home / "profiles").mkdir()
    (edgekit_home / "profiles" / "mine.toml").write_text('name = "mine"\n')
    (edgekit_home / "profiles" / "mine.toml").chmod(0)
    _one_line(_run("devices", "--show", "mine"), 2, "mine.toml", "cannot read")


# --- bugs and interrupts -----------------------------------------------------------------------

@pytest.fixture
def broken_entry(monkeypatch):
    """A model whose builder raises: what a bug in a model looks like to the CLI."""
    from edgekit.data import DIGITS
    from edgekit.registry import _REGISTRY, ModelEntry

    def builder(**config):
        raise RuntimeError("builder exploded")

    entry = ModelEntry(name="broken-for-test", family="test", builder=builder, config={},
                       task=DIGITS.task, description="raises in its builder")
    _REGISTRY.names()  # load the built-ins first, so they do not land after the fixture's undo
    monkeypatch.setitem(_REGISTRY._entries, entry.name, entry)
    return entry.name


def test_an_unexpected_exception_is_one_line_exit_1(broken_entry, tmp_path):
    result = _run("export", broken_entry, "-o", str(tmp_path / "art"))
    line = _one_line(result, 1, "internal error: RuntimeError: builder exploded", "--debug")
    assert line.startswith("edgekit: error: internal error:")
    assert not (tmp_path / "art").exists()


def test_debug_shows_the_traceback_of_an_unexpected_exception(broken_entry, tmp_path):
    result = _run("--debug", "export", broken_entry, "-o", str(tmp_path / "art"))
    assert result.exit_code == 1
    assert "Traceback" in result.output and "builder exploded" in result.output


def test_an_interrupt_while_listing_commands_exits_130(monkeypatch):
    import edgekit.cli as cli_module

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "_method_commands", interrupted)
    _one_line(_run("--help"), 130, "edgekit: interrupted")


def test_sigint_during_start_up_is_one_line_exit_130():
    """A real SIGINT while --help imports the methods to list their commands (before any command
    runs): the entry point itself reports it."""
    # a parent that ignores SIGINT (a background job, some CI runners) passes that on, and Python
    # then installs no KeyboardInterrupt handler: restore Python's own, as in a terminal
    code = ("import os, signal, sys; sys.argv = ['edgekit', '--help'];"
            "signal.signal(signal.SIGINT, signal.default_int_handler);"
            "from edgekit.cli import main;"
            "import edgekit.cli as c; orig = c._method_commands.__wrapped__;"
            "c._method_commands = lambda: (os.kill(os.getpid(), signal.SIGINT), orig())[1];"
            "main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "edgekit: interrupted", proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_torch_stays_importable():  # the fixture above must not leave a half-registered model
    from edgekit.registry import all_names

    assert "broken-for-test" not in all_names() and torch.__version__
