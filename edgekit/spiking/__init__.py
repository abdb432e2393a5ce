"""Generic spiking-net support for every spiking method: multi-step layers and the static-image
wrapper (``layers``), the spike-agreement probe of exports (``agreement``), and neuromorphic
simulation (``simulate``: activity, op counts, communication, energy under cost models)."""
