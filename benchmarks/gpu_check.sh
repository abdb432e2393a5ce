#!/usr/bin/env bash
# The TensorRT and GPU check, for a machine with an NVIDIA GPU (a lent device machine, a
# workstation, a Jetson with JetPack's TensorRT):
#
#   1. installs what it needs into a venv (torch with CUDA, edgekit[gpu], TensorRT 10);
#   2. trains the reference models briefly and exports them to ONNX (dynamic batch);
#   3. builds fp32 / fp16 / int8 TensorRT engines, validates each against the one saved FP32
#      reference and against ONNX Runtime;
#   4. profiles TensorRT (with and without CUDA graphs) against onnxruntime-CUDA, onnxruntime's
#      TensorRT provider and torch-CUDA, with NVML energy over the timed phase;
#   5. builds one Jetson bundle and runs the edgekit commands of its README;
#   6. writes every JSON report, a status per step and a summary (gpu_check.json, with the
#      machine's description) into $OUT, or benchmarks/results/gpu_check/ where $OUT is unset.
#
#   bash benchmarks/gpu_check.sh
#
# Settings (environment): MODELS ("ds-cnn mlp"), BATCH (8), DURATION (2 s per profile),
# PYTHON (python3), GPU_VENV (.venv-gpu), SKIP_INSTALL=1 to use the venv as it is.
# A failing step is recorded and the script goes on; it exits 1 when any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

RESULTS="${OUT:-benchmarks/results/gpu_check}"
MODELS="${MODELS:-ds-cnn mlp}"
BATCH="${BATCH:-8}"
DURATION="${DURATION:-2}"
PYTHON="${PYTHON:-python3}"
VENV="${GPU_VENV:-.venv-gpu}"
WORK="$(mktemp -d -t edgekit-gpu-check.XXXXXX)"
export EDGEKIT_HOME="$WORK/home"
mkdir -p "$RESULTS" && RESULTS="$(cd "$RESULTS" && pwd)"  # absolute: steps run in other folders
STATUS="$RESULTS/status.tsv"
printf 'step\texit_code\tseconds\n' > "$STATUS"

log() { echo "[gpu_check] $*" | tee -a "$RESULTS/log.txt" >&2; }

# step NAME COMMAND...: run, keep its output in the log, record the exit code and duration.
step() {
    local name="$1"; shift
    local t0=$SECONDS rc
    log "== $name: $*"
    "$@" >> "$RESULTS/log.txt" 2>&1
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$STATUS"
    [ "$rc" -eq 0 ] || log "   $name failed with exit code $rc"
    return 0
}

# -- 1. install ---------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv --system-site-packages "$VENV"  # system site: JetPack's tensorrt bindings
fi
PY="$(cd "$VENV" && pwd)/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        step install-torch "${PIP[@]}" install torch  # PyPI's Linux x86-64 torch is a CUDA build
    fi
    # the gpu extra brings onnxruntime-gpu only: edgekit's core has no CPU onnxruntime to remove
    step install-edgekit "${PIP[@]}" install -e ".[dev,gpu]"
    if ! "$PY" -c "import tensorrt" 2>/dev/null; then
        # TensorRT 11 removed the fp16/int8 builder flags and calibrators: stay on 10.x
        step install-tensorrt "${PIP[@]}" install "tensorrt>=10,<11"
    fi
fi
# ONNX Runtime's TensorRT provider loads libnvinfer from the tensorrt wheels' folder
TRT_LIBS="$("$PY" -c 'import os, tensorrt_libs; print(os.path.dirname(tensorrt_libs.__file__))' 2>/dev/null || true)"
[ -n "$TRT_LIBS" ] && export LD_LIBRARY_PATH="$TRT_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

ek() { "$PY" -m edgekit "$@"; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv || true; } > "$RESULTS/nvidia-smi.csv" 2>&1
step environment "$PY" -c "import torch, tensorrt, onnxruntime; print(torch.__version__, torch.cuda.get_device_name(0), tensorrt.__version__, onnxruntime.get_available_providers())"
step devices ek devices

# -- 2-4. per model -----------------------------------------------------------------------------
for m in $MODELS; do
    step "train-$m" ek train "$m" --epochs 10 -o "$WORK/$m.safetensors"
    step "onnx-$m" ek export "$WORK/$m.safetensors" --to onnx --dynamic-batch -o "$WORK/$m-onnx"
    for p in fp32 fp16 int8; do
        step "build-$m-$p" ek export "$WORK/$m-onnx" --to tensorrt --precision "$p" \
            --min-shape input:1x1x8x8 --opt-shape input:8x1x8x8 --max-shape input:32x1x8x8 \
            -o "$WORK/$m-trt-$p"
        step "validate-$m-$p" ek validate "$WORK/$m-trt-$p" --json "$RESULTS/validate-$m-$p.json"
        step "validate-$m-$p-vs-ort" ek validate "$WORK/$m-trt-$p" --against onnxruntime \
            --json "$RESULTS/validate-$m-$p-vs-onnxruntime.json"
        step "profile-$m-tensorrt-$p" ek profile "$WORK/$m-trt-$p" --backend tensorrt \
            --batch "$BATCH" --duration "$DURATION" --energy nvml \
            --json "$RESULTS/profile-$m-tensorrt-$p.json"
    done
    step "profile-$m-tensorrt-fp16-graph" ek profile "$WORK/$m-trt-fp16" --backend tensorrt \
        --cuda-graph --batch "$BATCH" --duration "$DURATION" --energy nvml \
        --json "$RESULTS/profile-$m-tensorrt-fp16-cudagraph.json"
    step "profile-$m-ort-cuda" ek profile "$WORK/$m-onnx" --backend onnxruntime --provider cuda \
        --batch "$BATCH" --duration "$DURATION" --energy nvml \
        --json "$RESULTS/profile-$m-onnxruntime-cuda.json"
    step "profile-$m-ort-tensorrt" ek profile "$WORK/$m-onnx" --backend onnxruntime \
        --provider tensorrt --batch "$BATCH" --duration "$DURATION" --energy nvml \
        --json "$RESULTS/profile-$m-onnxruntime-tensorrt.json"
    step "profile-$m-torch-cuda" ek profile "$WORK/$m.safetensors" --backend torch \
        --provider cuda --batch "$BATCH" --duration "$DURATION" --energy nvml \
        --json "$RESULTS/profile-$m-torch-cuda.json"
done

# -- 5. a Jetson bundle, built by the commands of its own README --------------------------------
first="${MODELS%% *}"
step "bundle-$first" ek export "$WORK/$first.safetensors" --to jetson-bundle --precision int8 \
    --dynamic-batch --min-shape input:1x1x8x8 --opt-shape input:8x1x8x8 \
    --max-shape input:32x1x8x8 -o "$WORK/$first-jetson"
if [ -f "$WORK/$first-jetson/README.md" ]; then
    n=0
    while IFS= read -r line; do
        n=$((n + 1))
        # the README's commands start with 'edgekit'; run them with this venv's edgekit
        (cd "$WORK/$first-jetson" && step "bundle-readme-$n" bash -c "set -o pipefail; $PY -m ${line}") \
            || true
    done < <(sed -n '/^```sh$/,/^```$/p' "$WORK/$first-jetson/README.md" | grep '^edgekit ')
    for f in README.md validate.json profile.json; do
        [ -f "$WORK/$first-jetson/$f" ] && cp "$WORK/$first-jetson/$f" "$RESULTS/bundle-$f"
    done
fi

# -- 6. summary ---------------------------------------------------------------------------------
"$PY" - "$RESULTS" <<'PYEOF'
import csv, json, sys
from pathlib import Path

from edgekit.provenance import report_document

results = Path(sys.argv[1])
rows = list(csv.DictReader((results / "status.tsv").open(), delimiter="\t"))
profiles, validations = [], []
for path in sorted(results.glob("*profile*.json")):
    r = json.loads(path.read_text())
    phases = r.get("phases_ms", {})
    profiles.append({
        "file": path.name, "target": r["target"], "backend": r["backend"].get("backend"),
        "providers": r["backend"].get("providers"), "device": r["backend"].get("device"),
        "cuda_graph": r["backend"].get("cuda_graph"), "precision": r["settings"]["precision"],
        "batch": r["settings"]["batch"], "p50_ms": r["latency_ms"]["p50"],
        "p99_ms": r["latency_ms"]["p99"], "samples_per_s": r["throughput"]["samples_per_s"],
        "gpu_compute_p50_ms": phases.get("compute", {}).get("p50"),
        "h2d_p50_ms": phases.get("h2d", {}).get("p50"), "d2h_p50_ms": phases.get("d2h", {}).get("p50"),
        "energy_per_inference_mj": (r["energy"].get("energy_per_inference_j") or 0) * 1e3 or None,
        "energy_source": r["energy"]["source"], "gpu_memory": r["backend"].get("gpu_memory")})
for path in sorted(results.glob("*validate*.json")):
    v = json.loads(path.read_text())
    validations.append({"file": path.name, "precision": v["precision"], "against": v["against"],
                        "passed": v["passed"],
                        "outputs": [{k: o[k] for k in ("name", "max_abs", "median_abs", "p99_abs",
                                                        "max_rel", "atol", "rtol")}
                                    for o in v["outputs"]]})
smi = (results / "nvidia-smi.csv").read_text() if (results / "nvidia-smi.csv").exists() else ""
failed = [r["step"] for r in rows if r["exit_code"] != "0"]
doc = report_document("benchmark/gpu_check", {
    "machine_gpu": smi.strip().splitlines(), "steps": rows, "failed_steps": failed,
    "profiles": profiles, "validations": validations})
(results / "gpu_check.json").write_text(json.dumps(doc, indent=2) + "\n")
print(f"{'report':48s} {'p50 ms':>9s} {'GPU ms':>9s} {'samples/s':>11s} {'mJ/inf':>9s}")
for p in profiles:
    gpu = f"{p['gpu_compute_p50_ms']:.4f}" if p["gpu_compute_p50_ms"] else "-"
    mj = f"{p['energy_per_inference_mj']:.4f}" if p["energy_per_inference_mj"] else "-"
    print(f"{p['file']:48s} {p['p50_ms']:9.4f} {gpu:>9s} {p['samples_per_s']:11.0f} {mj:>9s}")
for v in validations:
    worst = max(o["max_abs"] for o in v["outputs"])
    print(f"{v['file']:48s} {'passed' if v['passed'] else 'FAILED'} max abs {worst:.3g}")
print(f"failed steps: {', '.join(failed) or 'none'}")
PYEOF
log "results in $RESULTS (work files in $WORK)"
awk -F'\t' 'NR > 1 && $2 != 0 { failed = 1 } END { exit failed }' "$STATUS"
