"""One step run: its needs checked, its commands started in child processes under its time box
and the run's deadline, the JSON it wrote read back and summarised."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from devcheck.base import ROOT, Context, Outcome, Step


def run_step(step: Step, ctx: Context, found: dict[str, dict], deadline: float,
             sabotage: str | None, log: Any) -> Outcome:
    outcome = Outcome(step.name, step.what, "skipped")
    missing = [n for n in step.needs if not found[n]["ok"]]
    if missing:
        outcome.reason = "; ".join(found[n]["reason"] for n in missing)
        return outcome
    box = step.box_s(ctx.dry, ctx.max_box_s)
    left = deadline - time.monotonic()
    if left < min(box, 10.0) and left < box:
        outcome.reason = f"out of time: {left:.0f} s left before the run's deadline"
        return outcome
    box = min(box, left)
    folder = ctx.work / step.name
    folder.mkdir(parents=True, exist_ok=True)
    commands = step.commands(ctx, folder)
    if sabotage == "fail":
        commands = [[ctx.python, "-c", "raise SystemExit('broken on purpose (--break)')"]]
    elif sabotage == "hang":
        commands = [[ctx.python, "-c", "import time; time.sleep(3600)"]]
    t0 = time.monotonic()
    for argv in commands:
        env = _environment_of(ctx, folder)
        log.write(f"\n=== {step.name}: {' '.join(argv)[:400]}\n")
        log.flush()
        try:
            done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  timeout=max(1.0, box - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            outcome.status, outcome.reason = "timed-out", f"outran its {box:.0f} s box"
            break
        outcome.exit_code = done.returncode
        if done.returncode != 0:
            outcome.status = "failed"
            outcome.reason = f"exit code {done.returncode} from {_shown(argv)}"
            break
    else:
        outcome.status = "ran"
    outcome.seconds = round(time.monotonic() - t0, 2)
    for path in sorted(folder.glob("*.json")):
        try:
            outcome.results[path.name] = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            outcome.results[path.name] = {"unreadable": str(exc)}
    if step.summarise is not None and outcome.status == "ran":
        try:
            outcome.verdicts = step.summarise(outcome.results)
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            outcome.status, outcome.reason = "failed", f"its results did not read back: {exc!r}"
    return outcome


def _shown(argv: list[str]) -> str:
    """What a command runs, for a one-line reason: ``edgekit profile``, ``zipmoe.py``."""
    if "-m" in argv:
        return " ".join(argv[argv.index("-m") + 1:][:2])
    return Path(argv[1]).name


def _environment_of(ctx: Context, folder: Path) -> dict[str, str]:
    """The child's environment: results into the step's folder, the installed site first (once
    the install made it: its second command builds edgekit with the carried setuptools)."""
    env = {**os.environ, "EDGEKIT_BENCH_RESULTS": str(folder), "PYTHONUNBUFFERED": "1",
           "EDGEKIT_HOME": str(ctx.work / "home")}
    if ctx.site.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ctx.site),
                                                          os.environ.get("PYTHONPATH")]))
    return env
