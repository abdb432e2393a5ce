"""The GPU check for a borrowed, offline GPU machine: every measurement as a time-boxed step.

Each step is one or more commands (edgekit's CLI, the benchmark scripts with ``--device cuda``)
that run in a child process under a time box, so a hung kernel costs one step, not the lease.
Before anything runs, the requirements are probed once: a CUDA GPU that torch sees, NVML,
Triton, TensorRT, onnxruntime-gpu, the carried wheel folder. A step whose requirement is missing
is recorded as skipped with the reason; a step that fails or outruns its box is recorded as such;
neither stops the run. A global deadline (default 270 s) keeps the whole run well inside the
5 minutes a lent GPU is asked for: a step that cannot start in time is skipped, saying so, and a
running one is cut at the deadline. The steps, most telling first:

- ``profile-cli``: ``edgekit profile mlp --backend torch --provider cuda --cuda-graph``, the CLI
  as a user runs it (report rendered and written);
- ``zipmoe``: ZipMoE's GPU compute path (decoding in a CPU process) against naive offload, reads
  capped at the Jetson AGX Orin's storage bandwidth; logits bit-identical across modes;
- ``batch-sweep``: every reference model profiled at batch 1 to 256, eagerly and from a CUDA
  graph, under its own time budget (benchmarks/batch_sweep.py): where launches bind and where
  the arithmetic does;
- ``spiking-attention``: SSA and USSA up to N = 65536 tokens (the reference to 16384);
- ``wbmm``: WBMM against depthwise convolutions, torch fp32/bf16 and the autotuned Triton
  kernel, each op against its roofline on this device's profile;
- ``astra-gloo-cuda``, ``nvml-meter``; ``onnxruntime-cuda`` and ``tensorrt`` where installed.

Three files come back in ``--out`` (the device tool returns at most 8): ``device_check.json``
(the machine, the probes, every step with its status, reason, time, and the JSON each step
wrote, plus the verdicts), ``device_check.md`` (the machine, one row per step, the verdicts) and
``device_check.log`` (every command's output).

    python benchmarks/device_check.py --out DIR [--dry-run] [--cpu-stand-in] [--only STEP ...]
        [--plan]

``--dry-run`` shrinks every step (sizes, rounds, time boxes) to check the control flow;
``--cpu-stand-in`` lets the CPU stand in for the GPU in the steps that need one (NVML, Triton,
TensorRT and onnxruntime-gpu steps still skip), to check every command on a machine without a
GPU; ``--break STEP`` (or ``STEP:hang``) makes one step fail (or outrun its box) on purpose, to
see the run survive it; ``--plan`` writes ``device_check_plan.json`` (every step's commands,
needs and box, and the deadline) and runs nothing. benchmarks/device_check.sh installs the
carried wheels and calls this; its parts are in benchmarks/devcheck/.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from devcheck.base import ROOT, Context, Outcome
from devcheck.plan import plan
from devcheck.probe import probe
from devcheck.results import edgekit_provenance, machine, summary_markdown, write_atomic
from devcheck.run import run_step
from devcheck.steps import STEPS

DEADLINE_S = 270.0  # the whole run, well inside the 5 minutes a lent GPU is asked for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl")
    parser.add_argument("--site", type=Path, default=Path("/tmp/edgekit-site"))
    parser.add_argument("--work", type=Path, default=None,
                        help="the steps' own files (default: a new folder under /tmp)")
    parser.add_argument("--deadline-s", type=float, default=DEADLINE_S)
    parser.add_argument("--max-box-s", type=float, default=600.0,
                        help="cap every step's time box (seconds)")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--no-install", action="store_true",
                        help="use this environment's edgekit; carry and install nothing")
    parser.add_argument("--cpu-stand-in", action="store_true")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in STEPS])
    parser.add_argument("--break", dest="sabotage", default=None, metavar="STEP[:hang]")
    parser.add_argument("--plan", action="store_true",
                        help="write device_check_plan.json (the steps, their commands and "
                             "boxes, as on a GPU) and run nothing")
    args = parser.parse_args(argv)
    names = {s.name for s in STEPS}
    broken, _, how = (args.sabotage or "").partition(":")
    if args.sabotage and (broken not in names or how not in ("", "hang")):
        parser.error(f"--break takes STEP or STEP:hang with STEP one of {', '.join(sorted(names))}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.plan:
        write_atomic(args.out / "device_check_plan.json", json.dumps(plan(args), indent=1) + "\n")
        return 0
    started = time.monotonic()
    deadline = started + args.deadline_s
    work = args.work or Path(tempfile.mkdtemp(prefix="edgekit-device-check-"))
    work.mkdir(parents=True, exist_ok=True)
    found = probe(args.python, args.wheels, args.cpu_stand_in, 60.0)
    if args.no_install:
        found["wheels"] = {"ok": False, "reason": "--no-install: this environment's edgekit is "
                                                  "used as it is"}
    ctx = Context(python=args.python, out=args.out, work=work,
                  device="cpu" if args.cpu_stand_in and "--cpu-stand-in" in
                  found["gpu"].get("detail", "") else "cuda",
                  dry=args.dry_run, max_box_s=args.max_box_s, wheels=args.wheels,
                  site=args.site)
    mode = ", ".join(m for m, on in (("dry run", args.dry_run), ("CPU stands in for the GPU",
                                     ctx.device == "cpu")) if on) or "full run"
    outcomes: list[Outcome] = []
    with (args.out / "device_check.log").open("w") as log:
        for step in STEPS:
            if args.only and step.name not in args.only and step.name != "install":
                outcomes.append(Outcome(step.name, step.what, "skipped",
                                        reason="not among --only"))
                continue
            sabotage = ("hang" if how else "fail") if step.name == broken else None
            outcome = run_step(step, ctx, found, deadline, sabotage, log)
            if step.name == "install" and outcome.status != "ran" and ctx.site.is_dir():
                shutil.rmtree(ctx.site)  # half an install must not shadow the system's packages
            outcomes.append(outcome)
            print(f"[device_check] {outcome.name}: {outcome.status}"
                  + (f" ({outcome.reason})" if outcome.reason else "")
                  + (f" in {outcome.seconds:g} s" if outcome.status != "skipped" else ""),
                  flush=True)
    failed = [o.name for o in outcomes if o.status in ("failed", "timed-out")]
    doc = {"schema_version": 1, "kind": "benchmark/device_check", "mode": mode,
           "deadline_s": args.deadline_s, "seconds": round(time.monotonic() - started, 1),
           "machine": machine(outcomes), "provenance": edgekit_provenance(ctx),
           "requirements": found, "failed_steps": failed,
           "steps": [o.__dict__ for o in outcomes]}
    write_atomic(args.out / "device_check.json", json.dumps(doc, indent=1, default=str) + "\n")
    markdown = summary_markdown(outcomes, found, mode)
    write_atomic(args.out / "device_check.md", markdown)
    print(markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
