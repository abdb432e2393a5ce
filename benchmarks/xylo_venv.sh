#!/usr/bin/env bash
# A venv with SynSense's references for the Speck and Xylo checks (docs/chips.md): edgekit as
# `make install` installs it, then xylosim 0.1.3 (Xylo's bit-accurate simulator; C++, built from
# source with pybind11, a couple of minutes), sinabs 3.1.3 and Rockpool 3.1.0. sinabs and Rockpool
# go in with --no-deps: their metadata asks for samna, whose PyPI package is a stub that installs
# the real driver from SynSense's own index when imported. Rockpool is there to show that its Xylo
# package does not import without samna; edgekit does not use it.
#
#   bash benchmarks/xylo_venv.sh [VENV]          # default /tmp/xylo-venv
#   VENV/bin/python -m pytest tests/test_xylo_sim.py tests/test_sinabs_rules.py -n 0
#   VENV/bin/python benchmarks/xylo_crosscheck.py CHECKPOINT
set -euo pipefail
VENV=${1:-/tmp/xylo-venv}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
make -C "$ROOT" install VENV="$VENV" PYTHON="${PYTHON:-python3.11}"
nice -n 10 "$VENV/bin/python" -m pip install "xylosim==0.1.3"
"$VENV/bin/python" -m pip install --no-deps "sinabs==3.1.3" "rockpool==3.1.0" pbr
"$VENV/bin/python" - <<'PY'
import importlib
for name in ("xylosim.v2", "sinabs.validate_memory_speck", "sinabs.backend.dynapcnn",
             "rockpool.devices.xylo"):
    try:
        importlib.import_module(name)
        print(f"{name}: imports")
    except ImportError as err:
        print(f"{name}: does not import ({err})")
PY
