"""Built-in models. Importing this package registers every entry (one subpackage per family)."""
from edgekit.models import astra, reference, spiking, wbmm, wifi_mamba  # noqa: F401
