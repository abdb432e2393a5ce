"""ZipMoE store: HF checkpoints of four families in, an aligned store out, corruption caught."""
from __future__ import annotations

import json
import os

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from edgekit.cli import cli
from edgekit.errors import UnknownNameError, UsageError
from edgekit.methods.zipmoe.compress import compress_checkpoint
from edgekit.methods.zipmoe.config import ALIASES, parse_config
from edgekit.methods.zipmoe.hf_checkpoint import INDEX_FILE, Checkpoint
from edgekit.methods.zipmoe.store import ALIGN, Store, StoreError
from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint, tiny_config

pytestmark = pytest.mark.usefixtures("one_compute_thread")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("family", sorted(ALIASES))
def test_every_family_compresses_and_round_trips(tmp_path, family):
    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", family, seed=1)
    manifest = compress_checkpoint(ckpt, tmp_path / "store", trace=family == "deepseek")
    store = Store(tmp_path / "store")
    original = load_file(str(ckpt / "model.safetensors"))
    assert set(store.tensors) == set(original)
    for name, tensor in original.items():
        assert _same_bits(store.load_tensor(name), tensor), name
    cfg = store.config
    assert store.total_expert_bytes == len(cfg.moe_layers) * cfg.num_experts * cfg.expert_params * 2
    assert manifest["totals"]["bits_per_param"] < 12.5
    if family == "deepseek":
        assert cfg.moe_layers == (1, 2) and cfg.shared_intermediate > 0
        counts = manifest["trace"]["counts"]
        assert set(counts) == {"1", "2"}
        assert all(sum(row) == manifest["trace"]["tokens"] * cfg.top_k for row in counts.values())


def test_layout_is_aligned_and_manifest_complete(tiny_qwen):
    _, store_dir = tiny_qwen
    store = Store(store_dir)
    assert (store_dir / "config.json").is_file()
    assert store.data_path.stat().st_size % ALIGN == 0
    assert store.manifest["codec"]["alignment"] == ALIGN
    for entry in store.tensors.values():
        assert entry.encoding == "zipmoe" and entry.dtype == "bfloat16"
        for _, extent in entry.extents():
            assert extent.offset % ALIGN == 0 and extent.size > 0 and extent.crc32 >= 0
        assert sum(c.stop - c.start for c in entry.chunks) == entry.numel
    doc = json.loads((store_dir / "manifest.json").read_text())
    expert = doc["tensors"]["model.layers.0.mlp.experts.3.up_proj.weight"]
    assert expert["shape"] == [32, 64] and {"offset", "size", "crc32"} <= set(expert["raw"])


def _copy_store(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_flipped_byte_is_caught_and_names_the_tensor(tiny_qwen, tmp_path):
    _, store_dir = tiny_qwen
    bad = _copy_store(store_dir, tmp_path / "bad")
    store = Store(bad)
    name = "model.layers.1.mlp.experts.5.down_proj.weight"
    extent = store.tensors[name].chunks[0]
    with open(store.data_path, "r+b") as handle:
        handle.seek(extent.offset + extent.size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(StoreError, match=rf"tensor '{name}': exponent chunk 1 of 1 fails its CRC"):
        Store(bad).load_tensor(name)
    with pytest.raises(StoreError, match=name):
        Store(bad).verify()
    result = CliRunner().invoke(cli, ["moe", "verify", str(bad)])
    assert result.exit_code == 2
    assert name in result.output and "fails its CRC-32" in result.output
    assert "Traceback" not in result.output


def test_truncated_store_names_the_first_tensor_past_the_end(tiny_qwen, tmp_path):
    _, store_dir = tiny_qwen
    bad = _copy_store(store_dir, tmp_path / "short")
    store = Store(bad)
    victim = list(store.tensors)[-3]
    cut = store.tensors[victim].chunks[0].offset + 1
    os.truncate(store.data_path, cut)
    with pytest.raises(StoreError, match=rf"truncated to {cut} bytes; tensor '{victim}'"):
        Store(bad)


def test_missing_manifest_and_wrong_format(tmp_path):
    with pytest.raises(StoreError, match="not a ZipMoE store"):
        Store(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(StoreError, match="not a ZipMoE store manifest"):
        Store(tmp_path)


def test_missing_expert_tensor_is_named(tmp_path):
    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", "mixtral")
    weights = load_file(str(ckpt / "model.safetensors"))
    gone = "model.layers.1.block_sparse_moe.experts.2.w3.weight"
    del weights[gone]
    save_file(weights, str(ckpt / "model.safetensors"))
    with pytest.raises(UsageError, match=rf"tensor '{gone}' is missing"):
        compress_checkpoint(ckpt, tmp_path / "store")
    assert not (tmp_path / "store").exists()  # nothing half-made


def test_sharded_checkpoint_with_index(tmp_path):
    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", "olmoe")
    weights = load_file(str(ckpt / "model.safetensors"))
    names = sorted(weights)
    halves = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in halves.items():
        save_file({n: weights[n] for n in part}, str(ckpt / file))
    (ckpt / "model.safetensors").unlink()
    (ckpt / INDEX_FILE).write_text(json.dumps(
        {"weight_map": {n: f for f, part in halves.items() for n in part}}))
    with Checkpoint(ckpt) as checkpoint:
        checkpoint.check_complete()
        assert _same_bits(checkpoint.get(names[3]), weights[names[3]])
    compress_checkpoint(ckpt, tmp_path / "store", trace=False)
    assert _same_bits(Store(tmp_path / "store").load_tensor(names[5]), weights[names[5]])


def test_config_errors_are_one_clear_line():
    with pytest.raises(UnknownNameError, match="valid: deepseek_v2, mixtral, olmoe, qwen2_moe"):
        parse_config({"model_type": "llama"})
    cfg = tiny_config("qwen")
    del cfg["moe_intermediate_size"]
    with pytest.raises(UsageError, match="field 'moe_intermediate_size' is required"):
        parse_config(cfg)
    yarn = {**tiny_config("deepseek"), "rope_scaling": {"type": "yarn", "factor": 40}}
    assert parse_config(yarn).rope_scaling == "yarn"  # compressible; the model refuses to serve it


def _cast_to_int8(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: t.to(torch.int8) for n, t in weights.items()}


def _add_a_layer_the_config_lacks(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {**weights, "model.layers.9.input_layernorm.weight": torch.ones(8)}


@pytest.mark.parametrize(("corrupt", "says"), [
    (_cast_to_int8, "T: tensor 'model.embed_tokens.weight' has dtype I8"),
    (_add_a_layer_the_config_lacks, "GOOD.zmoe: not written, the new store would not open: "),
])
def test_a_failing_compress_leaves_the_good_store_as_it_was(tmp_path, corrupt, says):
    """Every check a reader makes runs before the new store replaces the old one: a checkpoint
    cast to int8 (no dtype the model computes in) is refused before any work, one whose store
    would not open (a tensor of a layer config.json does not have) before the swap; either way
    GOOD still opens, unchanged, and nothing is left beside it."""
    ckpt = make_tiny_checkpoint(tmp_path / "T", "qwen", seed=2)
    good = tmp_path / "GOOD.zmoe"
    compress_checkpoint(ckpt, good, trace=False)
    before = {f.name: f.read_bytes() for f in good.iterdir()}
    save_file(corrupt(load_file(str(ckpt / "model.safetensors"))),
              str(ckpt / "model.safetensors"))
    result = CliRunner().invoke(cli, ["moe", "compress", str(ckpt), "-o", str(good)])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and says in line and ".partial" not in line, line
    assert {f.name: f.read_bytes() for f in good.iterdir()} == before
    Store(good).verify()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _resigned(store_dir, dst, edit):
    """A copy of ``store_dir`` whose manifest ``edit`` changed and re-signed, as a forger
    would: only the store's own checks can refuse it."""
    from edgekit.methods.zipmoe.store import manifest_digest

    _copy_store(store_dir, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    edit(manifest)
    manifest["manifest_sha256"] = manifest_digest(manifest)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def _negative_offset(m):
    m["tensors"]["model.layers.0.mlp.experts.0.up_proj.weight"]["raw"]["offset"] = -4096


def _short_trace(m):
    m["trace"]["counts"]["0"] = m["trace"]["counts"]["0"][:-1]


def _long_trace(m):
    m["trace"]["counts"]["1"] = m["trace"]["counts"]["1"] + [3, 4]


@pytest.mark.parametrize(("edit", "says"), [
    (_negative_offset, "has a negative offset"),
    (_short_trace, "field 'trace.counts[\"0\"]' holds 7 counts, not 8"),
    (_long_trace, "field 'trace.counts[\"1\"]' holds 10 counts, not 8"),
])
def test_a_forged_extent_or_trace_is_one_line_in_verify_and_serve(tiny_qwen, tmp_path, edit,
                                                                   says):
    """Issue 45: a negative extent offset was an internal error; a trace of the wrong length
    passed verify and crashed serve. Both commands refuse them in one line, exit 2."""
    from oneline import one_line_error

    store = _resigned(tiny_qwen[1], tmp_path / "forged", edit)
    for args in (["moe", "verify", str(store)],
                 ["moe", "serve", str(store), "--prompt", "hi", "--max-new-tokens", "1"]):
        result = CliRunner().invoke(cli, args)
        one_line_error(result.exit_code, result.output, 2, says)


def test_an_unreadable_data_file_is_one_line_in_verify_and_serve(tiny_qwen, tmp_path):
    """Issue 45: a weights.zmoe that cannot be opened (PermissionError) was an internal error.
    Root reads a file of mode 000, so as root the data file is a write-only sysctl instead,
    which the kernel refuses to open for reading even to root."""
    from oneline import one_line_error

    store = _copy_store(tiny_qwen[1], tmp_path / "locked")
    data = store / "weights.zmoe"
    if os.geteuid() != 0:
        data.chmod(0)
    elif os.path.exists("/proc/sys/vm/drop_caches"):
        data.unlink()
        data.symlink_to("/proc/sys/vm/drop_caches")
    else:
        pytest.skip("as root without /proc/sys/vm/drop_caches no file here is unreadable")
    with pytest.raises(PermissionError):
        open(data, "rb").close()
    for args in (["moe", "verify", str(store)],
                 ["moe", "serve", str(store), "--prompt", "hi", "--max-new-tokens", "1"]):
        result = CliRunner().invoke(cli, args)
        one_line_error(result.exit_code, result.output, 2, "weights.zmoe: cannot read")


def _relabel_fp16(m):
    m["tensors"]["model.embed_tokens.weight"]["dtype"] = "float16"


def _swap_entries(a, b):
    def edit(m):
        t = m["tensors"]
        t[a], t[b] = t[b], t[a]
    return edit


_EXPERT = "model.layers.{}.mlp.experts.{}.{}_proj.weight"


@pytest.mark.parametrize(("edit", "serve_reads_it"), [
    (_relabel_fp16, True),
    (_swap_entries(_EXPERT.format(0, 0, "up"), _EXPERT.format(0, 1, "up")), False),
    (_swap_entries("model.embed_tokens.weight", "lm_head.weight"), True),
], ids=["dtype-relabelled", "experts-swapped", "dense-swapped"])
def test_relabelled_or_swapped_data_in_a_resigned_store_is_refused(tiny_qwen, tmp_path, edit,
                                                                   serve_reads_it):
    """Issue 45 item 7: a re-signed manifest that relabels a tensor bf16 -> fp16 (same size) or
    swaps two tensors' data opened and decoded silently. Each tensor's sha256 binds its bytes
    to its name, dtype and shape, so verify refuses it in one line."""
    from oneline import one_line_error

    store = _resigned(tiny_qwen[1], tmp_path / "forged", edit)
    result = CliRunner().invoke(cli, ["moe", "verify", str(store)])
    one_line_error(result.exit_code, result.output, 2, "do not match its field 'sha256'")
    if serve_reads_it:  # dense tensors are loaded at start; which experts serve reads, below
        result = CliRunner().invoke(cli, ["moe", "serve", str(store), "--prompt", "hi",
                                          "--max-new-tokens", "1"])
        one_line_error(result.exit_code, result.output, 2, "do not match its field 'sha256'")


def test_serve_refuses_a_forged_expert_it_routes_to_and_never_reads_one_it_does_not(tiny_qwen,
                                                                                     tmp_path):
    """Issue 45 item 7: serve passed where verify failed. Serve checks every tensor it decodes
    (CRC-32s, then the tensor's sha256 the first time), so a forged expert it routes to stops
    it in one line; one it never routes to is never read, and only verify reports it."""
    from oneline import one_line_error

    from edgekit.methods.zipmoe.engine import Engine, EngineSettings

    good = Store(tiny_qwen[1])
    settings = EngineSettings(memory_budget=0, prefetch=False)
    with Engine(good, settings) as engine:
        engine.generate("hi", 1)
    cfg = good.config
    layer = cfg.moe_layers[0]
    names = {e: _EXPERT.format(layer, e, "gate") for e in range(cfg.num_experts)}
    routed = [e for e, n in names.items() if n in good.checked]
    unrouted = [e for e, n in names.items() if n not in good.checked]
    assert routed and len(unrouted) >= 2, (routed, unrouted)
    args = ["--prompt", "hi", "--max-new-tokens", "1", "--no-prefetch"]

    hit = _resigned(tiny_qwen[1], tmp_path / "hit",
                    _swap_entries(names[routed[0]], names[unrouted[0]]))
    result = CliRunner().invoke(cli, ["moe", "serve", str(hit), *args])
    one_line_error(result.exit_code, result.output, 2,
                   f"tensor '{names[routed[0]]}' decodes to bytes that do not match")

    missed = _resigned(tiny_qwen[1], tmp_path / "missed",
                       _swap_entries(names[unrouted[0]], names[unrouted[1]]))
    assert CliRunner().invoke(cli, ["moe", "serve", str(missed), *args]).exit_code == 0
    result = CliRunner().invoke(cli, ["moe", "verify", str(missed)])
    one_line_error(result.exit_code, result.output, 2, "do not match its field 'sha256'")


@pytest.mark.parametrize(("edit", "says"), [
    (lambda c, w: c.update(rope_theta=float("nan")), "field 'rope_theta' must be a finite"),
    (lambda c, w: c.update(rope_theta=float("inf")), "field 'rope_theta' must be a finite"),
    (lambda c, w: c.update(rope_theta=0), "field 'rope_theta' must be positive"),
    (lambda c, w: c.update(rms_norm_eps=float("nan")), "field 'rms_norm_eps' must be a finite"),
    (lambda c, w: w["model.layers.0.mlp.experts.2.up_proj.weight"].__setitem__((0, 0),
                                                                              float("nan")),
     "tensor 'model.layers.0.mlp.experts.2.up_proj.weight' holds 1 NaN or infinite values"),
    (lambda c, w: w["model.norm.weight"].__setitem__(0, float("inf")),
     "tensor 'model.norm.weight' holds 1 NaN or infinite values"),
], ids=["rope-nan", "rope-inf", "rope-zero", "eps-nan", "nan-expert", "inf-dense"])
def test_compress_refuses_non_finite_weights_and_config_floats(tmp_path, edit, says):
    """Issue 45 item 7: NaN weights or ``rope_theta: NaN`` compressed, and serve then emitted
    tokens with exit 0. Compress refuses them in one line and writes no store."""
    from oneline import one_line_error

    ckpt = make_tiny_checkpoint(tmp_path / "ckpt", "qwen", seed=2)
    config = json.loads((ckpt / "config.json").read_text())
    weights = load_file(str(ckpt / "model.safetensors"))
    edit(config, weights)
    (ckpt / "config.json").write_text(json.dumps(config))
    save_file(weights, str(ckpt / "model.safetensors"))
    result = CliRunner().invoke(cli, ["moe", "compress", str(ckpt), "-o",
                                      str(tmp_path / "store")])
    one_line_error(result.exit_code, result.output, 2, says)
    assert not (tmp_path / "store").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
