"""``python -m edgekit`` runs the CLI."""
from edgekit.cli import main

main()
