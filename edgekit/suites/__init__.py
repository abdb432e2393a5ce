"""Suites: named lists of real-size models that ``edgekit compare --suite NAME`` and
``benchmarks/edge_suite.py`` run through the bring-your-own-model path (export, validation,
fp32 / fp16 / int8 ONNX Runtime artifacts, profile), so the trade-offs show at the sizes users
deploy rather than at the digits' 8x8.

Each member names a ``package.module:callable`` returning ``(module, example inputs)``; the
methods' members live in their own folders, so this module names them only as strings and never
imports a method. Every member has random weights: its precisions are scored by top-1
agreement with its own FP32 outputs, never by accuracy.
"""
from __future__ import annotations

from dataclasses import dataclass

from edgekit.errors import UnknownNameError


@dataclass(frozen=True)
class SuiteModel:
    """One member of a suite."""

    name: str  # its row label
    target: str  # package.module:callable -> (module, example inputs)
    kind: str  # cnn | vit | text | spiking | wbmm | pose: what the row stands for
    classifier: bool = True  # first output is (batch, classes): top-1 agreement applies
    int8_target: bool = False  # issue 42's "int8 at least 2x fp32" target applies
    inputs: tuple[str, ...] = ()  # --input overrides of the generated inputs' ranges


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    models: tuple[SuiteModel, ...]

    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def select(self, names: list[str] | None) -> tuple[SuiteModel, ...]:
        """The members named (all for None), in the suite's order; an unknown name fails."""
        if names is None:
            return self.models
        for name in names:
            if name not in self.names():
                raise UnknownNameError(f"model of suite '{self.name}'", name, self.names())
        return tuple(m for m in self.models if m.name in names)


_HF = "edgekit.suites.hf"
# One unpadded sequence, as a deployed encoder sees one: a random 0/1 mask would put HF's
# float32-minimum mask values into attention scores, which no real input has (and whose range
# ONNX Runtime's entropy calibrator cannot histogram).
_FULL_MASK = "attention_mask:1x{tokens}:int64:1..2"
SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("edge", "real-size models: MobileNetV2 and ViT-S/16 at 224 px, DistilBERT-base at "
                  "128 tokens, Spikingformer-4-384 at CIFAR size, WBMM-P and its 13x13 "
                  "depthwise twin at 224 px, ASTRA's ViT-S at 224 px and WiFi-Mamba full "
                  "(random weights)", (
        SuiteModel("mobilenet-v2", f"{_HF}:mobilenet_v2", "cnn", int8_target=True),
        SuiteModel("vit-s16", f"{_HF}:vit_small", "vit", int8_target=True),
        SuiteModel("distilbert-base", f"{_HF}:distilbert_base", "text", int8_target=True,
                   inputs=(_FULL_MASK.format(tokens=128),)),
        SuiteModel("spikingformer-4-384",
                   "edgekit.methods.spik4lite.spikingformer:cifar_model_and_inputs", "spiking"),
        SuiteModel("wbmm-p", "edgekit.methods.wbmm.model:paper_model_and_inputs", "wbmm"),
        SuiteModel("wbmm-p-dw", "edgekit.methods.wbmm.model:paper_dw_model_and_inputs", "wbmm"),
        SuiteModel("astra-vit-s", "edgekit.methods.astra.paper:vit_s_model_and_inputs", "vit"),
        SuiteModel("wifi-mamba-full",
                   "edgekit.methods.wifi_mamba.model:full_model_and_inputs", "pose",
                   classifier=False),
    )),
    Suite("edge-tiny", "the edge suite's Hugging Face architectures at toy sizes, to check the "
                       "plumbing in seconds", (
        SuiteModel("mobilenet-v2-tiny", f"{_HF}:tiny_mobilenet_v2", "cnn", int8_target=True),
        SuiteModel("vit-tiny", f"{_HF}:tiny_vit", "vit", int8_target=True),
        SuiteModel("distilbert-tiny", f"{_HF}:tiny_distilbert", "text", int8_target=True,
                   inputs=(_FULL_MASK.format(tokens=16),)),
    )),
)}


def suite_names() -> list[str]:
    return list(SUITES)


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise UnknownNameError("suite", name, suite_names())
    return SUITES[name]
