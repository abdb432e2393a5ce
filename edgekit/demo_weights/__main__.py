"""``python -m edgekit.demo_weights [NAME ...] [-o FOLDER]``: retrain the shipped demo checkpoints
(all, or the named ones) and rewrite their manifest."""
from __future__ import annotations

import argparse
from pathlib import Path

from edgekit.demo_weights import FOLDER
from edgekit.demo_weights.build import RECIPES, build


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m edgekit.demo_weights",
                                     description=__doc__)
    parser.add_argument("names", nargs="*", choices=[[]] + [r.name for r in RECIPES],
                        help="recipes to retrain (default: all)")
    parser.add_argument("-o", "--output", type=Path, default=FOLDER,
                        help="folder of the checkpoints and manifest.json (default: the "
                             "package's own)")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    for name, entry in build(args.output, args.names or None).items():
        print(f"{name}: {entry['metric']} {entry['score']:.4g}, {entry['bytes']:,} bytes "
              f"({entry['stored']}), {entry['command']}")


if __name__ == "__main__":
    main()
