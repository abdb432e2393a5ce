"""``edgekit moe``: ZipMoE lossless compressed MoE serving (arXiv 2601.21198).

    make-tiny DIR      a tiny random checkpoint in a real Hugging Face layout
    train              a small MoE trained on numpy's documentation (cached; prints its folder)
    compress CKPT      a checkpoint into a ZipMoE store (codec, 4 KiB-aligned chunks, manifest)
    verify STORE       check the metadata and every chunk's CRC-32, decode every tensor
    serve STORE        generate from a prompt under a memory budget
    bench STORE        ZipMoE against naive offload and all-in-memory, same prompts
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import click
import torch
from rich import box
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from edgekit.cli.common import (
    COUNT,
    JSON_FILE,
    MAX_THREADS,
    SEED,
    THREADS,
    FiniteFloatRange,
    console,
    err_console,
    write_json,
)
from edgekit.errors import UsageError
from edgekit.kernels import zipmoe_codec as codec
from edgekit.methods.zipmoe.cache import POLICIES
from edgekit.methods.zipmoe.config import ALIASES
from edgekit.methods.zipmoe.engine import (
    DECODE_ON,
    DEFAULT_PROMPTS,
    MODES,
    Engine,
    EngineSettings,
    bench,
    parse_size,
    prefetch_summary,
)
from edgekit.methods.zipmoe.store import Store
from edgekit.methods.zipmoe.tiny import SIZES
from edgekit.provenance import report_document

# Storage bandwidth in GB/s: 10 TB/s is beyond any storage device (and 1e300 GB/s overflows to
# inf bytes/s).
STORAGE_GBS = FiniteFloatRange(min=0, max=1e4, min_open=True)
# Tokens to generate: the byte-level tiny models' KV cache for 2^20 tokens is already beyond an
# edge device's memory.
NEW_TOKENS = click.IntRange(1, 2**20)


@click.group("moe")
def moe() -> None:
    """ZipMoE: lossless compressed MoE serving under a memory budget."""


@contextmanager
def _progress(description: str):  # noqa: ANN202 - yields rich's Progress
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True) as progress:
        yield progress


def _storage(storage_profile: str | None, bandwidth: float | None) -> tuple[float | None, str]:
    if bandwidth is not None:
        return bandwidth * 1e9, f"--bandwidth {bandwidth:g} GB/s"
    if storage_profile is None:
        return None, ""
    from edgekit.profiles import load_profile

    profile = load_profile(storage_profile)
    if profile.storage_bandwidth_bytes_s is None:
        raise UsageError(f"profile '{storage_profile}' gives no storage bandwidth",
                         hint="pass --bandwidth GB/s")
    return profile.storage_bandwidth_bytes_s, f"profile {profile.name} (storage.bandwidth_gbs)"


# Over 8 parameters: the engine options serve and bench share, turned into one EngineSettings here
# so each command passes them once
def _settings(store: Store, mode: str, memory_budget: str, workers: int | None, policy: str,
              storage_profile: str | None, bandwidth: float | None, direct: bool,
              full_ratio: float | None, threads: int | None, prefetch: bool,
              decode_on: str) -> EngineSettings:
    if threads is not None:
        torch.set_num_threads(threads)
    cap, source = _storage(storage_profile, bandwidth)
    return EngineSettings(mode=mode, memory_budget=parse_size(memory_budget,
                                                              store.total_expert_bytes),
                          workers=workers, policy=policy, bandwidth_bytes_s=cap,
                          bandwidth_source=source, direct=direct, full_ratio=full_ratio,
                          prefetch=prefetch, decode_on=decode_on)


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def _engine_options(f):  # noqa: ANN001, ANN202 - click decorator stack
    options = [
        click.option("--memory-budget", default="25%", show_default=True,
                     help="Memory for expert caches: 512MiB, 2GB, or a share of all experts' "
                          "bf16 bytes like 25%."),
        click.option("--decode-on", type=click.Choice(DECODE_ON), default="process",
                     show_default=True,
                     help="ZipMoE: a decode process reads, decodes and rebuilds experts in "
                          "shared memory (Linux); or threads: 'io', the I/O thread decodes "
                          "(or --workers do), 'compute', the compute thread does."),
        click.option("--workers", type=click.IntRange(0, MAX_THREADS),
                     help="ZipMoE with --decode-on io or compute: decode worker threads (L). "
                          "Default: the cores left after the compute threads and the I/O "
                          "thread, 0 to 4."),
        click.option("--policy", type=click.Choice(POLICIES), default="zipmoe",
                     show_default=True, help="ZipMoE eviction policy."),
        click.option("--full-ratio", type=FiniteFloatRange(0, 1),
                     help="Fix the full-pool share of the budget instead of planning it."),
        click.option("--prefetch/--no-prefetch", default=True, show_default=True,
                     help="ZipMoE: start reading the next layer's predicted experts early."),
        click.option("--storage-profile",
                     help="Cap storage reads at this device profile's storage bandwidth "
                          "(e.g. jetson-agx-orin-64gb)."),
        click.option("--bandwidth", type=STORAGE_GBS, help="Cap storage reads at this many GB/s."),
        click.option("--direct/--no-direct", default=True, show_default=True,
                     help="O_DIRECT reads where the file system allows."),
        click.option("--threads", type=THREADS, default=1, show_default=True,
                     help="torch intra-op threads for compute (decode workers use the rest)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


# Training steps: each is 1,024 tokens on one thread; 10^5 steps would run for days.
TRAIN_STEPS = click.IntRange(1, 100_000)


@moe.command("train")
@click.option("--size", type=click.Choice(SIZES), default="small", show_default=True)
@click.option("--steps", type=TRAIN_STEPS, default=100, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
def train_command(size: str, steps: int, seed: int) -> None:
    """Train a small MoE on numpy's docs once; print its folder.

    The checkpoint is cached under $EDGEKIT_HOME/zipmoe/trained, keyed by the config, the
    training settings and the text; later calls load it. Compress it with `edgekit moe compress`.
    """
    from edgekit.methods.zipmoe.train import TrainSettings, expert_load, trained_checkpoint

    with _progress("train") as progress:
        task = progress.add_task("training", total=steps)

        def tick(update) -> None:  # noqa: ANN001 - ProgressUpdate
            progress.update(task, completed=update.done,
                            description=f"training ({update.note})")

        folder, record = trained_checkpoint(TrainSettings(size=size, steps=steps, seed=seed),
                                            progress=tick)
    loads = [expert_load(torch.tensor(row)) for row in record["expert_load"].values()]
    busiest = sum(x["max_over_mean"] for x in loads) / len(loads)
    console.print(escape(
        f"{folder}\n{record['corpus']}: loss {record['loss_first']:.3f} -> "
        f"{record['loss_last']:.3f}, held-out {record['held_out_loss']:.3f} (uniform "
        f"{record['uniform_loss']:.3f}); busiest expert {busiest:.2f}x the mean load"))


@moe.command("make-tiny")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--family", type=click.Choice(sorted(ALIASES)), default="qwen", show_default=True)
@click.option("--size", type=click.Choice(SIZES), default="tiny", show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--force", is_flag=True,
              help="Replace FOLDER even if it exists and edgekit did not write it.")
def make_tiny(folder: str, family: str, size: str, seed: int, force: bool) -> None:
    """Write a tiny random MoE checkpoint in Hugging Face layout.

    The folder holds config.json and bf16 safetensors with real Hugging Face tensor names.
    """
    from edgekit.methods.zipmoe.hf_checkpoint import Checkpoint
    from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(folder, family, size, seed, force=force)
    with Checkpoint(path) as ck:
        cfg = ck.config
        params = sum(torch.Size(s).numel() for s in cfg.tensor_shapes().values())
        console.print(f"wrote {escape(str(path))}: {cfg.family}, {cfg.num_layers} layers "
                      f"({len(cfg.moe_layers)} MoE), {cfg.num_experts} experts top-{cfg.top_k}"
                      f"{', shared experts' if cfg.shared_intermediate else ''}, "
                      f"{params / 1e6:.2f}M parameters (bf16)")


@moe.command("compress")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False),
              help="Store folder to write.")
@click.option("--codec", "codec_name", type=click.Choice(codec.CODECS),
              default=codec.DEFAULT_CODEC, show_default=True)
@click.option("--level", type=int, help="Compression level (default: zstd 16, lz4 9).")
@click.option("--chunks", type=COUNT, default=codec.DEFAULT_CHUNKS, show_default=True,
              help="Exponent chunks per tensor (K).")
@click.option("--workers", type=THREADS, default=2, show_default=True)
@click.option("--trace/--no-trace", default=True, show_default=True,
              help="Record a routing trace (calibration text) for the planner.")
@click.option("--force", is_flag=True,
              help="Replace -o even if it exists and edgekit did not write it.")
def compress(checkpoint: str, output: str, codec_name: str, level: int | None, chunks: int,
             workers: int, trace: bool, force: bool) -> None:
    """Compress a Hugging Face MoE checkpoint into a ZipMoE store."""
    from edgekit.methods.zipmoe.compress import compress_checkpoint

    with _progress("compress") as progress:
        task = progress.add_task("compressing", total=None)

        def tick(name: str, done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        manifest = compress_checkpoint(checkpoint, output, codec_name=codec_name, level=level,
                                       chunks=chunks, workers=workers, trace=trace,
                                       progress=tick, force=force)
    store = Store(output)
    console.print(render_store(store))
    trace_doc = manifest.get("trace", {})
    console.print("routing trace: " + escape(
        f"{trace_doc['tokens']} tokens of the calibration text" if "counts" in trace_doc
        else f"none ({trace_doc.get('skipped')})"))


def store_summary(store: Store) -> dict[str, Any]:
    groups: dict[str, list] = {"experts": [], "dense": []}
    for name, entry in store.tensors.items():
        groups["experts" if ".experts." in name else "dense"].append(entry)
    out = {}
    for group, entries in groups.items():
        params = sum(e.numel for e in entries)
        z = [e for e in entries if e.encoding == "zipmoe"]
        zparams = sum(e.numel for e in z)
        out[group] = {
            "tensors": len(entries), "params": params,
            "original_bytes": sum(e.nbytes for e in entries),
            "stored_bytes": sum(e.stored_bytes for e in entries),
            "bits_per_param": 8 * sum(e.stored_bytes for e in entries) / max(1, params),
            "exponent_bits": 8 * sum(e.exponent_bytes for e in z) / max(1, zparams),
        }
    return out


def render_store(store: Store) -> Table:
    c = store.manifest["codec"]
    table = Table(title=f"{escape(store.folder.name)} · {c['name']} level {c['level']} · "
                        f"<= {c['chunks']} chunks/tensor · {c['alignment'] // 1024} KiB aligned",
                  box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("", "tensors", "params", "bf16 MiB", "stored MiB", "bits/param", "exp bits"):
        table.add_column(col, justify="left" if not col else "right")
    for group, s in store_summary(store).items():
        table.add_row(group, str(s["tensors"]), f"{s['params']:,}", _mib(s["original_bytes"]),
                      _mib(s["stored_bytes"]), f"{s['bits_per_param']:.3f}",
                      f"{s['exponent_bits']:.3f}")
    return table


@moe.command("verify")
@click.argument("store_path", metavar="STORE", type=click.Path(file_okay=False))
def verify(store_path: str) -> None:
    """Check a store's metadata hashes, chunk CRC-32s and tensors.

    The manifest and config.json must match their SHA-256, every tensor the model of config.json
    needs must be present with its shape and dtype, and every tensor is decoded and must match
    its sha256 (its name, dtype, shape and bytes)."""
    store = Store(store_path)
    with _progress("verify") as progress:
        task = progress.add_task("verifying", total=len(store.tensors))
        count = store.verify(lambda name: progress.advance(task))
    console.print(f"{escape(str(store.folder))}: {count} tensors verified "
                  f"({store.data_path.stat().st_size / 2**20:.2f} MiB)")


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
@moe.command("serve")
@click.argument("store_path", metavar="STORE", type=click.Path(file_okay=False))
@click.option("--prompt", required=True, help="Text to continue (byte-level tokens).")
@click.option("--max-new-tokens", type=NEW_TOKENS, default=32, show_default=True)
@click.option("--mode", type=click.Choice(MODES), default="zipmoe", show_default=True)
@_engine_options
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the metrics as JSON.")
def serve(store_path: str, prompt: str, max_new_tokens: int, mode: str, memory_budget: str,
          decode_on: str, workers: int | None, policy: str, full_ratio: float | None,
          prefetch: bool, storage_profile: str | None, bandwidth: float | None, direct: bool,
          threads: int, json_path: str | None) -> None:
    """Generate tokens from STORE under an expert memory budget.

    Every tensor serve decodes is checked (CRC-32s, then its sha256 the first time), so no token
    comes from corrupt, swapped or relabelled data; experts it never routes to are never read,
    so it says nothing about them: 'edgekit moe verify' checks the whole store."""
    store = Store(store_path)
    settings = _settings(store, mode, memory_budget, workers, policy, storage_profile, bandwidth,
                         direct, full_ratio, threads, prefetch, decode_on)
    with Engine(store, settings) as engine:
        gen = engine.generate(prompt, max_new_tokens)
        metrics = engine.metrics()
    text = "".join(ch if ch.isprintable() or ch == "\n" else "\ufffd" for ch in gen.text)
    console.print(f"[bold]{escape(prompt)}[/bold]{escape(text)}", soft_wrap=True)
    x = metrics["experts"]
    line = (f"{mode}: {metrics['new_tokens']} tokens, TTFT {metrics['ttft_ms']:.1f} ms, "
            f"TPOT {metrics['tpot_ms']:.1f} ms, {metrics['tokens_per_s']:.2f} tokens/s; "
            f"hits full {x['full_hit_rate']:.0%} SM {x['sm_hit_rate']:.0%} "
            f"miss {x['miss_rate']:.0%}; read {_mib(metrics['bytes_read'])} MiB; "
            f"storage: {_storage_text(metrics['storage'])}")
    err_console.print(escape(line))
    write_json(json_path, report_document("moe/serve", {
        "store": str(store.folder), "prompt": prompt, "text": gen.text, "tokens": gen.tokens,
        "budget_bytes": settings.memory_budget, **metrics}))


def _storage_text(storage: dict[str, Any]) -> str:
    parts = [str(storage.get("reads"))]
    if "bandwidth" in storage:
        parts.append(str(storage["bandwidth"]))
    if storage.get("bandwidth_source"):
        parts.append(f"from {storage['bandwidth_source']}")
    return ", ".join(parts)


def render_bench(report: dict[str, Any]) -> Table:
    s, m = report["settings"], report["model"]
    table = Table(title=f"ZipMoE bench · {m['family']}, {m['moe_layers']} MoE layers x "
                        f"{m['experts']} experts top-{m['top_k']} · budget "
                        f"{_mib(s['memory_budget_bytes'])} MiB "
                        f"({s['budget_share_of_experts']:.0%} of experts)",
                  box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("mode", "tokens/s", "TTFT ms", "TPOT ms", "full hit", "SM hit", "miss",
                "prefetched", "read MiB", "wait s"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for mode, r in report["results"].items():
        x = r["experts"]
        table.add_row(mode, f"{r['tokens_per_s']:.2f}", f"{r['ttft_ms']:.1f}",
                      f"{r['tpot_ms']:.1f}", f"{x['full_hit_rate']:.1%}",
                      f"{x['sm_hit_rate']:.1%}", f"{x['miss_rate']:.1%}",
                      prefetch_summary(x), _mib(r["bytes_read"]), f"{x['wait_s']:.2f}")
    return table


# Over 8 parameters: a click command: one parameter per command-line option, documented in its
# --help
@moe.command("bench")
@click.argument("store_path", metavar="STORE", type=click.Path(file_okay=False))
@click.option("--prompt", "prompts", multiple=True,
              help="A prompt (repeatable; default: three built-in prompts).")
@click.option("--max-new-tokens", type=NEW_TOKENS, default=16, show_default=True)
@click.option("--modes", default=",".join(MODES), show_default=True,
              help="Comma-separated modes to run.")
@_engine_options
@click.option("--json", "json_path", type=JSON_FILE,
              help="Write the report as JSON.")
def bench_command(store_path: str, prompts: tuple[str, ...], max_new_tokens: int, modes: str,
                  memory_budget: str, decode_on: str, workers: int | None, policy: str,
                  full_ratio: float | None, prefetch: bool, storage_profile: str | None,
                  bandwidth: float | None, direct: bool, threads: int,
                  json_path: str | None) -> None:
    """Benchmark ZipMoE against naive offload and all-in-memory.

    Reports TTFT, TPOT, tokens/s, cache hits and bytes read for the same prompts.
    """
    store = Store(store_path)
    settings = _settings(store, "zipmoe", memory_budget, workers, policy, storage_profile,
                         bandwidth, direct, full_ratio, threads, prefetch, decode_on)
    mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
    if not mode_list:
        raise UsageError(f"--modes {modes!r} names no mode", hint=f"valid: {', '.join(MODES)}")
    prompt_list = prompts or DEFAULT_PROMPTS
    with _progress("bench") as progress:
        task = progress.add_task("generating", total=len(mode_list) * len(prompt_list))
        report = bench(store, settings, prompt_list, max_new_tokens, mode_list,
                       progress=lambda mode, done, total: progress.update(
                           task, completed=done, description=f"{mode}"))
    console.print(render_bench(report))
    storage = next((r["storage"] for r in report["results"].values()
                    if r["mode"] != "memory"), None)
    if storage:
        console.print("storage: " + escape(_storage_text(storage)))
    z = report["results"].get("zipmoe")
    if z:
        plan = z["provider"]["plan"]
        console.print(escape(f"plan: full share {plan['full_ratio']:.2f} -> "
                             f"{plan['full_slots_per_layer']} full + {plan['sm_slots_per_layer']}"
                             f" SM slots per layer ({plan['reason']})"))
    for name, value in report["speedup"].items():
        console.print(f"{name.replace('_', ' ')}: {value:.2f}x tokens/s")
    logits = report["logits"]
    console.print(f"logits bit-identical across {', '.join(logits['modes'])}: "
                  f"{'yes' if logits['identical'] else 'NO'} ({logits['steps_compared']} steps)")
    write_json(json_path, report_document("moe/bench", report))


COMMANDS = [moe]
