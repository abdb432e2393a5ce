"""The page's sections in the order they appear: one module per kind of result."""
from __future__ import annotations

from edgekit.report import astra, benchmarks, compare, machine, simulate, tour, validate, zipmoe
from edgekit.report.blocks import SectionKind

# After the machine (``build``: from every result's provenance), in this order:
SECTIONS: tuple[SectionKind, ...] = (tour.SECTION, machine.SECTION, compare.SECTION,
                                     simulate.SECTION, zipmoe.SECTION, astra.SECTION,
                                     validate.SECTION, benchmarks.SECTION)
# The method sections (``edgekit.report.methods``), the headline, come before this one.
METHODS_BEFORE = compare.SECTION.key
