"""Registry entries for WiFi-Mamba and its baseline, scored by MPJPE on simulated CSI.

Input: preprocessed amplitude and phase over 20 packets, ``(2, 270, 20)``; outputs: pose queries
``(B, Q, 14, 3)`` in metres and person logits ``(B, Q)``. Training and scoring go through the
entry's ``trainer``/``evaluator`` hooks (Hungarian set loss; MPJPE with WiFi-Mamba's persistent
memory streamed through each held-out sequence). The exported graph is one frame from a zero
memory state; ``edgekit export wifi-mamba --stream`` exports the streaming step instead
(``model.StreamStep``: the memory in, the next memory out), which a deployment runs frame by
frame as the evaluator does.
"""
from __future__ import annotations

from edgekit.methods.wifi_mamba import baseline, model
from edgekit.methods.wifi_mamba.baseline import PETRBaseline
from edgekit.methods.wifi_mamba.dataset import WIFI_POSE, evaluate_dataset, train_entry
from edgekit.methods.wifi_mamba.model import PAPER, StreamStep, WiFiMamba
from edgekit.registry import (
    ExportSettings,
    ModelEntry,
    StreamSpec,
    TrainSettings,
    register_model,
)

_EXPORT = ExportSettings(opset=18, atol=1e-4, rtol=1e-3, dynamo=False)
_TRAIN = TrainSettings(epochs=10, batch_size=32, lr=2e-3, weight_decay=1e-4)


def _zero_memory(model: WiFiMamba, batch: int) -> tuple:
    return (model.initial_memory(batch),)


_STREAM = StreamSpec(
    step=StreamStep, initial_state=_zero_memory,
    state_names=("memory",),
    description="persistent SSM memory (B, layers, 2, E, N): every block's final state of both "
                "streams, gated into the next frame's scan; zeros start a stream")


def _entry(name: str, builder, configs: dict, default: str, description: str,
           paper: str, stream: StreamSpec | None = None) -> ModelEntry:
    return register_model(ModelEntry(
        name=name, family="wifi_mamba", builder=builder, config=dict(configs[default]),
        task=WIFI_POSE.task, description=description,
        variants={v: c for v, c in configs.items() if v != default}, paper=paper,
        export=_EXPORT, train=_TRAIN, trainer=train_entry, evaluator=evaluate_dataset,
        stream=stream))


_entry("wifi-mamba", WiFiMamba, model.CONFIGS, "cpu",
       "dual-stream selective SSM for WiFi CSI 3D multi-person pose", PAPER, _STREAM)
_entry("wifi-petr", PETRBaseline, baseline.CONFIGS, "cpu",
       "PETR-style transformer baseline for WiFi CSI 3D pose",
       "Yan et al., Person-in-WiFi 3D, CVPR 2024")
