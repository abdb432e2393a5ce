#!/usr/bin/env bash
# Download, on this (CPU) machine, exactly the wheels the borrowed GPU machine lacks, for its
# Python 3.12 on x86-64, into .whl/ (ignored by git), check that they and the working tree fit
# the device tool's 64 MiB carry limit, and print the `run` call that uses them.
#
#   bash benchmarks/device_wheels.sh
#
# The GPU machine's image has torch (CUDA), Triton, nvidia-ml-py, onnx, onnxscript, onnxruntime
# (CPU build), numpy, scipy, scikit-learn, matplotlib, h5py, tqdm, rich, click, psutil,
# safetensors, sympy, ml-dtypes, colorama, packaging (/work/.library/device/KINDS.md). Of
# edgekit's needs (pyproject.toml: the core and the spiking-deps extra) it lacks the ones below;
# setuptools comes too, so edgekit builds from the tree there whatever setuptools the image has
# (pyproject.toml needs >= 77). No torch, nvidia-*, tensorrt or onnxruntime-gpu wheel is ever
# fetched: they are there already or far over the limit (benchmarks/README.md). Versions are the
# ones this project's venv is tested with. Settings: PYTHON (python3), WHEELS (.whl).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-.whl}"
LIMIT=$((64 * 1024 * 1024))
NEEDED=(
    "onnxslim==0.1.98"      # core: the ONNX exporter's graph slimming
    "zstandard==0.25.0"     # core: ZipMoE codec
    "lz4==4.4.5"            # core: ZipMoE codec
    "PyWavelets==1.9.0"     # core: WiFi CSI features
    "loguru==0.7.3"         # spiking-deps: SpikingJelly's logger
    "nir==1.0.8"            # spiking-deps: NIR export
    "nirtorch==2.6"         # spiking-deps
    "spikingjelly==2.0.0"   # spiking: neurons of the SSA and Spik4lite nets (installed --no-deps)
    "setuptools==84.2.1"    # builds edgekit from the tree on the device
)
case "$(git check-ignore "$WHEELS/x.whl" 2>/dev/null)" in
    "") echo "device_wheels: $WHEELS is not ignored by git; add it to .gitignore" >&2; exit 2 ;;
esac
rm -rf "$WHEELS" && mkdir -p "$WHEELS"
"$PYTHON" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any \
    -d "$WHEELS" "${NEEDED[@]}"
if ls "$WHEELS" | grep -iE '^(torch|nvidia|tensorrt|onnxruntime|triton)[-_]' >&2; then
    echo "device_wheels: a GPU-stack wheel slipped in (above); it must not be carried" >&2
    exit 1
fi
wheels_bytes=$(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1)
# what travels besides: tracked files plus untracked ones git does not ignore
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } \
    | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
total=$((wheels_bytes + tree_bytes))
ls -l "$WHEELS"
printf 'wheels %.1f MiB + working tree %.1f MiB = %.1f MiB of the 64 MiB carry limit\n' \
    "$(echo "$wheels_bytes / 1048576" | bc -l)" "$(echo "$tree_bytes / 1048576" | bc -l)" \
    "$(echo "$total / 1048576" | bc -l)"
if [ "$total" -gt "$LIMIT" ]; then
    echo "device_wheels: over the 64 MiB limit; the run would be refused" >&2
    exit 1
fi
cat <<RUN

The device call (the run tool; one command, well inside 5 minutes):
  command:   PYTHONUNBUFFERED=1 bash benchmarks/device_check.sh
  carry:     ["$WHEELS"]
  timeout_s: 330
Its three files come back from \$OUT: device_check.json, device_check.md, device_check.log.
RUN
