"""Built-in models. Importing this package registers every entry (one subpackage per family)."""
from edgekit.models import reference, wbmm  # noqa: F401
