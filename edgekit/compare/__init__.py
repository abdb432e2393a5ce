"""Compare accuracy against efficiency across models and variants; Pareto frontiers."""
from edgekit.compare.pareto import frontier, pareto_mask
from edgekit.compare.plot import plot_compare
from edgekit.compare.run import compare

__all__ = ["compare", "frontier", "pareto_mask", "plot_compare"]
