"""Third-party models as a user brings them: Hugging Face ``transformers`` architectures built
from their configs (random weights; nothing is downloaded), each returned with its example
inputs as ``edgekit export hf_models.py:mobilevit`` takes them.

Small configs of the real architectures keep the suite fast; the real sizes are measured in the
benchmarks. Inputs are at real size: 224 px images, 128-token sequences.
"""
import torch
from transformers import (
    DistilBertConfig,
    DistilBertForSequenceClassification,
    MobileViTConfig,
    MobileViTForImageClassification,
)

IMAGE_SIZE = 224
TOKENS = 128
VOCAB = 1000


def mobilevit():
    """MobileViT (CNN + transformer blocks), 10 classes, one float input ``pixel_values``."""
    torch.manual_seed(0)
    config = MobileViTConfig(image_size=IMAGE_SIZE, hidden_sizes=[32, 48, 64],
                             neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_labels=10)
    model = MobileViTForImageClassification(config).eval()
    for module in model.modules():  # torch's own init: HF's std-0.02 convs fade to all-zero logits
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return model, {"pixel_values": torch.rand(1, 3, IMAGE_SIZE, IMAGE_SIZE)}


def distilbert():
    """DistilBERT sequence classifier, 3 labels, two int64 inputs of 128 tokens."""
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
                              num_labels=3)
    model = DistilBertForSequenceClassification(config).eval()
    return model, {"input_ids": torch.randint(0, VOCAB, (1, TOKENS)),
                   "attention_mask": torch.ones(1, TOKENS, dtype=torch.int64)}
