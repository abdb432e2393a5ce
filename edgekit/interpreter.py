"""The command line that starts an edgekit module in a child Python process.

``python -m edgekit...`` puts the working directory first on ``sys.path``. Started from a source
checkout, the bare ``./edgekit`` folder then shadows the installed package, and that folder
lacks the subpackages setuptools maps into it from the top-level ``exporters/``, ``kernels/`` and
``profiles/`` (setup.py's package map): the child dies with ``No module named 'edgekit.profiles'``.
Every child edgekit starts is built here, so it imports the same installed package as its
parent whatever its working directory.
"""
from __future__ import annotations

import sys

# Python 3.10 has no -P: drop the working directory from sys.path by hand, then run the module
# as -m would (runpy sets sys.argv[0] to the module's file; the rest are its arguments).
_RUN_MODULE_SAFELY = ("import runpy, sys; del sys.path[0]; "
                      "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def module_command(module: str, *args: str,
                   safe_path_flag: bool = sys.version_info >= (3, 11)) -> list[str]:
    """``[sys.executable, -P, -m, module, *args]``: -P (Python >= 3.11) keeps the working
    directory off ``sys.path``; older Pythons get the same through a short ``-c`` script
    (``safe_path_flag`` picks the form: the tests run both on one Python).
    """
    if safe_path_flag:
        return [sys.executable, "-P", "-m", module, *args]
    return [sys.executable, "-c", _RUN_MODULE_SAFELY, module, *args]
