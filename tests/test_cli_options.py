"""The CLI's surface: whole summaries in every help, defaults, range checks as one-line errors,
and ``edgekit models`` reading its figures from the cache."""
from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from edgekit.cli import cli


def _groups() -> list[list[str]]:
    """The top-level group and every group a method adds (moe, astra, ...)."""
    ctx = click.Context(cli)
    return [[], *([name] for name in cli.list_commands(ctx)
                  if isinstance(cli.get_command(ctx, name), click.Group))]


@pytest.mark.parametrize("group", _groups(), ids=lambda g: " ".join(["edgekit", *g]))
def test_help_shows_whole_summaries(group):
    result = CliRunner().invoke(cli, [*group, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    commands = result.output.split("Commands:")[1].splitlines()
    assert len([line for line in commands if line.strip()]) >= 3
    usage, *rest = result.output.splitlines()  # "COMMAND [ARGS]..." is click's own notation
    cut = [line for line in rest if line.rstrip().endswith("...")]
    assert not cut, cut


def test_astra_run_defaults_to_astra():
    ctx = cli.get_command(None, "astra").get_command(None, "run").make_context("run", [])
    assert ctx.params["modes"] == ("astra",)


@pytest.mark.parametrize(("args", "fragment"), [
    (["profile", "mlp", "--batch", "0"], "'--batch': 0 is not in the range 1<=x<=1048576"),
    (["profile", "mlp", "--duration", "0"], "'--duration': 0.0 is not in the range 0<x<=604800.0"),
    (["compare", "mlp", "--threads", "0"], "'--threads': 0 is not in the range 1<=x<=4096"),
    (["train", "mlp", "--epochs", "0"], "'--epochs': 0 is not in the range 1<=x<=2147483647"),
    (["export", "mlp", "--atol", "-1"], "'--atol': -1.0 is not in the range x>=0"),
    (["astra", "run", "--world-size", "0"], "'--world-size': 0 is not in the range 1<=x<=256"),
    (["astra", "run", "--loss", "0.5"], "'--loss': 0.5 is not in the range 0<=x<0.5"),
    (["astra", "model", "--gflops", "0"], "'--gflops': 0.0 is not in the range 0<x<=1000000000.0"),
    (["astra", "model", "--single-s", "-1"],
     "'--single-s': -1.0 is not in the range 0<x<=604800.0"),
    (["moe", "serve", "store", "--threads", "0"], "'--threads': 0 is not in the range 1<=x<=4096"),
    (["moe", "bench", "store", "--bandwidth", "0"],
     "'--bandwidth': 0.0 is not in the range 0<x<=10000.0"),
])
def test_out_of_range_numbers_are_one_line_usage_errors(args, fragment):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgekit: error: "), result.stderr
    assert fragment in lines[0]


def _models_json(out):
    result = CliRunner().invoke(cli, ["models", "--family", "reference", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["models"]
    return {row["name"]: (row["params"], row["flops_per_sample"]) for row in rows}


def test_models_reads_its_costs_from_the_cache(tmp_path, edgekit_home):
    built = _models_json(tmp_path / "a.json")
    cache_file = edgekit_home / "model-costs.json"
    cache = json.loads(cache_file.read_text())
    assert len(cache) == len(built) and all(set(v) == {"params", "flops", "batch"}
                                            for v in cache.values())
    assert _models_json(tmp_path / "b.json") == built
    # A figure planted in the cache shows up in the listing: the second run read it, built nothing.
    key = next(k for k in cache if k.startswith("mlp::"))
    cache[key]["params"] = 12345
    cache_file.write_text(json.dumps(cache))
    assert _models_json(tmp_path / "c.json")["mlp"][0] == 12345


def _damaged(text: str, damage: str) -> str:
    if damage == "truncated":
        return text[: len(text) // 2]
    if damage == "not an object":
        return "[1, 2]"
    cache = json.loads(text)  # a well-formed file whose record for mlp is wrong
    cache[next(k for k in cache if k.startswith("mlp::"))] = {"params": "many"}
    return json.dumps(cache)


def test_models_ignores_and_rewrites_a_corrupt_cache(tmp_path, edgekit_home):
    built = _models_json(tmp_path / "a.json")
    cache_file = edgekit_home / "model-costs.json"
    good = cache_file.read_text()
    for damage in ("truncated", "not an object", "bad record"):
        cache_file.write_text(_damaged(good, damage))
        assert _models_json(tmp_path / "b.json") == built, damage
        assert json.loads(cache_file.read_text()) == json.loads(good), damage
