"""The parts of benchmarks/device_check.py, one concern a module: what a run needs (``probe``),
the steps (``setup_steps``, ``gpu_steps``, ``method_steps``, in order in ``steps``), one step run
(``run``), the plan that runs nothing (``plan``) and the result files (``results``)."""
