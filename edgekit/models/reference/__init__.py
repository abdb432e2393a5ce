"""Reference models: small, fast baselines the method families are compared against."""
from edgekit.models.reference import cnn, mlp  # noqa: F401
