"""Compare accuracy against efficiency across models and variants; Pareto frontiers."""
import sys
import types
from typing import Any

from edgekit.compare.pareto import frontier, pareto_mask
from edgekit.compare.plot import plot_compare
from edgekit.compare.run import compare

__all__ = ["compare", "frontier", "pareto_mask", "plot_compare"]


class _CallablePackage(types.ModuleType):
    """Importing this package sets ``edgekit.compare`` to the package, over the API function of
    the same name; calling the package calls the function, so ``edgekit.compare(...)`` works
    whatever was imported first."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
