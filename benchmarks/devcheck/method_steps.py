"""The steps that measure the built-in methods on the GPU: ZipMoE, SSA/USSA, WBMM, ASTRA; each
with how its results read back."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from devcheck.base import Context, bench, edgekit


def zipmoe_commands(ctx: Context, folder: Path) -> list[list[str]]:
    """The random-weight model only (training the other would take minutes of the lease):
    compute on the GPU, decoding in a CPU process, storage reads capped at the Jetson AGX Orin
    profile's bandwidth, against naive offload under the same cap and budget."""
    sizes = ["--rounds", "1", "--new-tokens", "2"] if ctx.dry else ["--rounds", "2"]
    return [bench(ctx, "zipmoe.py", "--device", ctx.device, "--no-codec", "--models", "random",
                  *sizes)]


def summarise_zipmoe(results: dict[str, Any]) -> list[dict[str, Any]]:
    doc = next(iter(results.values()), None)
    if doc is None:
        return []
    serving = doc["serving"]
    out = []
    for name, s in serving["models"].items():
        out += [{"claim": f"ZipMoE >= 2x naive offload tokens/s ({name} model, 25 % budget, "
                          "storage cap)",
                 "value": round(s["speedup_vs_naive"], 2), "met": s["target_met"],
                 "device": serving.get("device")},
                {"claim": f"logits bit-identical in every mode and round ({name} model)",
                 "value": s["logits_identical"], "met": s["logits_identical"]}]
    return out


def attention_commands(ctx: Context, folder: Path) -> list[list[str]]:
    """SSA and USSA up to N = 65536; the O(N^2) reference up to 16384 (its N x N maps at 65536
    would take 17 GB per time step)."""
    sizes = (["--sizes", "64", "256", "--rounds", "1", "--min-time", "0.01"] if ctx.dry else
             ["--sizes", "1024", "4096", "16384", "65536", "--reference-up-to", "16384",
              "--rounds", "3", "--min-time", "0.05"])
    return [bench(ctx, "spiking_attention.py", "--device", ctx.device, "--no-ort", *sizes)]


def wbmm_commands(ctx: Context, folder: Path) -> list[list[str]]:
    sizes = (["--shapes", "128x56", "--batches", "1", "--dtypes", "fp32", "--rounds", "1",
              "--min-time", "0.01", "--min-iters", "1"] if ctx.dry else
             ["--batches", "1", "64", "--dtypes", "fp32", "bf16", "--rounds", "3",
              "--min-time", "0.03"])
    return [bench(ctx, "wbmm.py", "--device", ctx.device, *sizes)]


def summarise_wbmm(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's claims, then the roofline's verdict on each (what the kernel could reach)."""
    return [dict(v) for doc in results.values()
            for v in (*doc.get("claims", []), *doc.get("roofline", []))]


def astra_commands(ctx: Context, folder: Path) -> list[list[str]]:
    """Two ranks on the one GPU over gloo (NCCL needs a GPU per rank), then on the CPU."""
    size = (["--model", "digits", "--reps", "1", "--warmup", "0"] if ctx.dry else
            ["--model", "vit-s", "--tokens", "256", "--reps", "3", "--bandwidth", "1Gbps"])
    run = edgekit(ctx, "astra", "run", "--world-size", "2", "--mode", "astra", "--mode", "sp",
                  "--keep-logits", "--timeout", "60", *size)
    return [[*run, "--device", ctx.device, "--json", str(folder / "astra-gpu.json")],
            [*run, "--device", "cpu", "--json", str(folder / "astra-cpu.json")]]


def summarise_astra(results: dict[str, Any]) -> list[dict[str, Any]]:
    gpu, cpu = results.get("astra-gpu.json"), results.get("astra-cpu.json")
    if gpu is None or cpu is None:
        return []
    out = []
    for mode, cases in gpu["summary"].items():
        a = gpu["result"]["modes"][mode]["logits"]
        b = cpu["result"]["modes"][mode]["logits"]
        diff = max(abs(x - y) for x, y in zip(_flat(a), _flat(b), strict=True))
        ratio = cpu["summary"][mode][0]["latency_s"] / cases[0]["latency_s"]
        out.append({"claim": f"ASTRA {mode}: 2 ranks on {gpu['result']['device']} over "
                             f"{gpu['result']['backend']}"
                             f"{' via host memory' if gpu['result']['exchange_via_host'] else ''}"
                             " vs 2 ranks on the CPU",
                    "value": f"{ratio:.3g}x latency speed-up, logits max abs diff {diff:.2g}",
                    "met": diff < 1e-3, "latency_s": cases[0]["latency_s"],
                    "cpu_latency_s": cpu["summary"][mode][0]["latency_s"]})
    return out


def _flat(value: Any) -> list[float]:
    return [x for v in value for x in _flat(v)] if isinstance(value, list) else [value]
