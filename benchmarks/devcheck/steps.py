"""The device check's steps in the order they run, with their needs and time boxes."""
from __future__ import annotations

from devcheck.base import Step
from devcheck.gpu_steps import (
    SWEEP_BUDGET_S,
    batch_sweep_commands,
    nvml_check_commands,
    ort_cuda_commands,
    profile_cli_commands,
    summarise_claims,
    summarise_profile_cli,
    summarise_sweep,
    tensorrt_commands,
)
from devcheck.method_steps import (
    astra_commands,
    attention_commands,
    summarise_astra,
    summarise_wbmm,
    summarise_zipmoe,
    wbmm_commands,
    zipmoe_commands,
)
from devcheck.setup_steps import devices_commands, environment_commands, install_commands

# Most telling first: where the deadline bites, it cuts what an earlier run already measured.
# Full-run boxes (seconds) beside the dry run's; the deadline caps their sum.
STEPS: tuple[Step, ...] = (
    Step("install", "carried wheels and edgekit from this tree, with no index", ("wheels",),
         install_commands, 45, 120),
    Step("environment", "versions, GPU, driver", (), environment_commands, 15, 30),
    Step("devices", "the device profile edgekit detects here (edgekit devices)", (),
         devices_commands, 20, 30),
    Step("profile-cli", "edgekit profile mlp on the GPU from a CUDA graph, through the CLI",
         ("gpu",), profile_cli_commands, 30, 60, summarise_profile_cli),
    Step("zipmoe", "ZipMoE compute on the GPU, decode in a CPU process, vs naive offload at the "
         "AGX Orin storage cap", ("gpu",), zipmoe_commands, 60, 240, summarise_zipmoe),
    Step("batch-sweep", "edgekit profile of every reference model, batch 1-256, eager and from "
         "a CUDA graph: launch-bound vs compute-bound", ("gpu",), batch_sweep_commands,
         SWEEP_BUDGET_S + 25, 120, summarise_sweep),
    Step("spiking-attention", "SSA and USSA vs reference attention, N = 1024 ... 65536",
         ("gpu",), attention_commands, 60, 120, summarise_claims("verdicts")),
    Step("wbmm", "WBMM-14 vs DW5/DW27, window 7 vs 14; torch and the autotuned Triton kernel; "
         "the roofline", ("gpu",), wbmm_commands, 45, 120, summarise_wbmm),
    Step("astra-gloo-cuda", "ASTRA: 2 ranks sharing one GPU over gloo (CUDA tensors, exchange "
         "through host memory) vs 2 ranks on the CPU", ("gpu",), astra_commands, 40, 120,
         summarise_astra),
    Step("nvml-meter", "NVML meter vs the counter by hand; instant power on windows < 1 s",
         ("gpu", "nvml"), nvml_check_commands, 20, 20, summarise_claims("checks")),
    Step("onnxruntime-cuda", "ONNX Runtime's CUDA provider", ("gpu", "onnxruntime-gpu"),
         ort_cuda_commands, 45),
    Step("tensorrt", "a TensorRT fp16 engine, built and profiled", ("gpu", "tensorrt"),
         tensorrt_commands, 90),
)
