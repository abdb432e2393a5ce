"""Reference models: small, fast baselines the method families are compared against (an MLP,
a depthwise-separable CNN, a spiking CNN of NIR primitives). Importing registers them."""
from edgekit.methods.reference import cnn, mlp, spiking_cnn  # noqa: F401
