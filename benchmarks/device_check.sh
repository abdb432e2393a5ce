#!/usr/bin/env bash
# The GPU check for a borrowed, offline GPU machine (the device tool's `run`), or any machine
# with an NVIDIA GPU and a CUDA build of torch already installed:
#
#   PYTHONUNBUFFERED=1 bash benchmarks/device_check.sh        # carry: [".whl"]
#
# Uses the system's python3 and its torch; installs the carried wheels (benchmarks/
# device_wheels.sh) and edgekit from this tree into /tmp/edgekit-site with no index; runs every
# step of benchmarks/device_check.py (its docstring lists them) under a time box and a 270 s
# deadline, so the whole call ends well inside 5 minutes; a step needing what is missing
# (TensorRT, onnxruntime-gpu, a GPU) is recorded as skipped with the reason. Its edgekit
# children run as `python -P -m edgekit` (Python >= 3.11): from this folder, plain -m would
# import the source folder ./edgekit instead of the installed package. Results, with the
# machine's description: device_check.json, device_check.md and device_check.log in $OUT, or
# benchmarks/results/device/ where $OUT is unset. Exit 1 when a step failed.
# Extra arguments go to device_check.py (--dry-run, --cpu-stand-in, --only STEP, --plan ...).
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" benchmarks/device_check.py --out "${OUT:-benchmarks/results/device}" "$@"
