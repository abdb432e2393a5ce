"""A library call leaves its caller's global state alone: logger levels, warning filters, stdout.

Each check runs in a fresh interpreter, so no earlier test can have set a level already.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

SNAPSHOT = """
import logging, sys, warnings

def snapshot():
    levels = {n: l.level for n, l in logging.root.manager.loggerDict.items()
              if isinstance(l, logging.Logger)}
    return levels | {"": logging.root.level}, sys.stdout, list(warnings.filters)

def changes(before, after):
    levels = {n: (v, after[0].get(n)) for n, v in before[0].items() if after[0].get(n) != v}
    return {"levels": levels, "stdout": before[1] is not after[1],
            "warnings": before[2] != after[2]}
"""


def _run(script: str) -> str:
    proc = subprocess.run([sys.executable, "-c", SNAPSHOT + textwrap.dedent(script)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_export_restores_loggers_and_stdout(tmp_path) -> None:
    out = _run(f"""
        import torch.onnx._internal.exporter._registration  # its logger exists before the export
        from edgekit.exporters import export_onnx
        from edgekit.targets import load_model_source
        source = load_model_source("mlp:small")
        before = snapshot()
        export_onnx(source, {str(tmp_path / "art")!r})
        print(changes(before, snapshot()))
    """)
    assert out == "{'levels': {}, 'stdout': False, 'warnings': False}"


def test_importing_spiking_layers_restores_loggers() -> None:
    out = _run("""
        import torch
        logging.getLogger("torch._library.triton")  # the logger exists before the import
        before = snapshot()
        import edgekit.spiking.layers
        print(changes(before, snapshot()))
    """)
    assert out == "{'levels': {}, 'stdout': False, 'warnings': False}"
