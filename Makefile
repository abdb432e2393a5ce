# edgekit: `make demo` and `make test` work on a fresh clone with only Python 3 installed.
# They create .venv when missing, install a CPU build of torch when none is importable, then
# edgekit (editable, with the dev, cpu and spiking-deps extras) and SpikingJelly 2.x without its
# heavy optional extras.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# A CPU build of torch. On this project's machines `torch==2.13.0` resolves to a CPU wheel on disk;
# elsewhere pass e.g. TORCH_PIP_ARGS="torch --index-url <PyTorch's CPU wheel index>".
TORCH_PIP_ARGS ?= torch==2.13.0
# SpikingJelly's metadata requires torchvision, torchaudio and tensorboard, which its
# activation-based API never imports, and resolving them swaps the CPU torch for a CUDA build:
# install it without dependencies, then what it really needs (the spiking-deps extra of
# pyproject.toml). Keep this in step with the spiking extra there.
SPIKINGJELLY ?= spikingjelly>=2.0,<3
# Norse, a second independent NIR reader for tests/test_nir_interop.py (snnTorch, the first, is in
# the dev extra). Its metadata requires torchvision, which `import norse.torch` never imports and
# which would add a CUDA-built wheel next to the CPU torch: installed without dependencies too;
# what it imports (torch, numpy, nir, nirtorch) comes with torch and the spiking-deps extra.
NORSE ?= norse>=1.1,<2
# cpu: the CPU build of ONNX Runtime (pyproject.toml says why it is an extra); fleet: Dask
# distributed, for the fleet tests.
EXTRAS ?= dev,cpu,spiking-deps,fleet
STAMP := $(VENV)/.edgekit-installed
DEMO_DIR ?= edgekit-demo
# The demo tour (edgekit/tour.py): every method, then $(DEMO_DIR)/report.html; DEMO=full runs
# the long version (every model trained to its schedule).
DEMO ?= short

.PHONY: install demo lint test test-all clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml setup.py | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install $(TORCH_PIP_ARGS)
	$(PIP) install --no-deps "$(SPIKINGJELLY)" "$(NORSE)"
	$(PIP) install -e ".[$(EXTRAS)]"
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/edgekit tour -o $(DEMO_DIR) $(if $(filter full,$(DEMO)),--full)

lint: install
	$(VENV)/bin/ruff check .

# Tests run on every core (pytest-xdist). `make test` (CI's) leaves out the tests marked slow
# (the paper-size exports); `make test-all` runs them too.
test: install
	$(PY) -m pytest -q -n auto -m "not slow"

test-all: install
	$(PY) -m pytest -q -n auto

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache *.egg-info
