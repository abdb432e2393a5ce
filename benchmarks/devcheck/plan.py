"""The plan (``--plan``): every step as it would run, and nothing run."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from devcheck.base import Context
from devcheck.steps import STEPS


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """Every step as it would run on a GPU (or dry, with --dry-run): needs, box, commands."""
    ctx = Context(python=args.python, out=args.out, work=Path("<work>"), device="cuda",
                  dry=args.dry_run, max_box_s=args.max_box_s, wheels=args.wheels,
                  site=args.site)
    return {"deadline_s": args.deadline_s, "dry_run": args.dry_run,
            "steps": [{"name": s.name, "what": s.what, "needs": list(s.needs),
                       "box_s": s.box_s(args.dry_run, args.max_box_s),
                       "commands": s.commands(ctx, ctx.work / s.name)} for s in STEPS]}
