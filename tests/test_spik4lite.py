"""Spik4lite (ICML 2026): gates, physical removal, compensation, checkpoints, the CLI."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner
from oneline import one_line_error
from torch import nn

import edgekit
from edgekit.checkpoint import load_checkpoint, save_checkpoint
from edgekit.cli import cli
from edgekit.data import Dataset
from edgekit.errors import UsageError
from edgekit.methods import spik4lite as s4
from edgekit.methods.spik4lite.gates import GatedLayer, energy_penalty
from edgekit.methods.spik4lite.groups import channel_groups
from edgekit.methods.spik4lite.prune import _contribution, _observe, _remove
from edgekit.methods.spik4lite.trainer import Schedule, Spik4liteConfig, train_spik4lite
from edgekit.registry import create_model, get_entry
from edgekit.spiking.layers import calibrate_batchnorm, layer, mean_firing_rate

X = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(1))
# Tiny configs: two steps, narrow stages (the structure, not the size, is what is tested).
TINY = {"spikingresformer": {"T": 2, "channels": (16, 32), "group_size": 16},
        "spikingformer": {"T": 2, "dim": 32, "heads": 2, "mlp_ratio": 2}}


def _tiny(name: str) -> nn.Module:
    torch.manual_seed(0)
    return create_model(name, **TINY[name])


def _gated(name: str) -> nn.Module:
    model = _tiny(name)
    calibrate_batchnorm(model, [X])
    s4.wrap(model, X)
    return model


def _gate_off(model: nn.Module, every: int = 16, first: int = 2) -> None:
    """Every gate keeps every channel except ``c % every < first`` (whatever the input)."""
    for _, gate in s4.gated_layers(model):
        with torch.no_grad():
            gate.gate.weight.zero_()
            bias = gate.gate.bias.view(-1, 2)
            off = torch.arange(bias.shape[0]) % every < first
            bias[:, 0], bias[:, 1] = -5.0, 5.0
            bias[off, 0], bias[off, 1] = 5.0, -5.0


def test_gate_straight_through_gradients_and_deterministic_eval():
    torch.manual_seed(0)
    gated = GatedLayer(layer.Conv2d(4, 3, 1, bias=False, step_mode="m"))
    x = (torch.rand(2, 5, 4, 3, 3) < 0.5).float()  # [T, B, C, H, W] spikes
    gated.train()
    (gated(x).sum() + energy_penalty(gated)).backward()
    assert gated.gate.weight.grad is not None and gated.gate.weight.grad.abs().sum() > 0
    assert gated.layer.weight.grad.abs().sum() > 0
    gated.eval()
    assert torch.equal(gated(x), gated(x))
    assert gated.running_fr.shape == (4,) and bool(gated.seen)


def test_penalty_matches_a_hand_computed_case():
    gated = GatedLayer(layer.Conv2d(2, 3, 3, padding=1, bias=False, step_mode="m")).eval()
    with torch.no_grad():
        gated.gate.weight.zero_()
        gated.gate.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 1.0]))  # p_keep 0.5 and sigmoid(1)
    x = torch.zeros(1, 2, 2, 4, 4)  # T=1, B=2, C=2, 4x4
    x[:, :, 0] = 1.0  # channel 0 fires everywhere: rate 1; channel 1 silent: rate 0
    x[:, 1, 1, :2] = 1.0  # sample 1, channel 1: rate 0.5
    gated(x)
    fan_out = 3 * 3 * 3 * 4 * 4  # k_h k_w C_out H_out W_out
    cost = torch.tensor([1.0, 0.25]) * fan_out  # batch rates in eval
    p = torch.tensor([0.5, torch.sigmoid(torch.tensor(1.0)).item()])
    expected = (2 * (p * cost).sum()) / (2 * cost.sum())
    assert torch.isclose(gated.penalty, expected)


def test_wrap_gates_every_spike_fed_layer_and_refuses_other_models():
    model = _gated("spikingresformer")
    names = {n for n, _ in s4.gated_layers(model)}
    assert "prologue.0" not in names and "head" not in names  # image and pooled stream
    assert {"stages.0.0.attn.w1", "stages.0.0.attn.proj", "stages.0.0.ffn.mid.1"} <= names
    with pytest.raises(UsageError, match="no spiking neurons"):
        s4.wrap(create_model("mlp"))


def test_groups_follow_the_graph():
    groups = {g.names("out")[0]: g for g in channel_groups(_tiny("spikingresformer"), X)}
    stream = groups["prologue.0"]  # stage 0's residual stream: every block writes it
    assert {"stages.0.0.attn.bn_proj", "stages.0.0.ffn.down.1"} <= set(stream.names("out"))
    assert stream.embedding
    ffn = groups["stages.0.0.ffn.up.1"]  # up + mid(up), mid grouped: balanced blocks
    assert "stages.0.0.ffn.mid.1" in ffn.names("out") and ffn.blocks == 4
    assert "stages.0.0.attn.w2" in groups["stages.0.0.attn.w1"].names("out")  # A ⊙ V


@pytest.mark.parametrize("name", ["spikingresformer", "spikingformer"])
def test_removal_keeps_the_function_of_gated_off_channels(name):
    model = _gated(name)
    _gate_off(model)
    opt = torch.optim.AdamW(model.parameters())
    model.train()
    model(X).sum().backward()
    opt.step()
    with torch.no_grad():  # the classifier reads the stream directly, ungated
        model.head.weight[:, torch.arange(model.head.weight.shape[1]) % 16 < 2] = 0
    model.eval()
    before = model(X)
    report = s4.prune(model, X, opt)
    assert report.channels_after < report.channels_before
    assert torch.allclose(model(X), before, atol=1e-6)
    for p in model.parameters():  # the optimizer state was sliced with the weights
        for value in opt.state.get(p, {}).values():
            assert not torch.is_tensor(value) or value.dim() == 0 or value.shape == p.shape
    model.train()
    model(X).sum().backward()
    opt.step()  # trains on
    if name == "spikingresformer":
        mid = model.stages[0][0].ffn.mid[1].layer
        assert mid.groups == 4 and mid.in_channels % 4 == 0 and mid.in_channels < 64
        attn = model.stages[0][0].attn
        assert attn.w1.layer.out_channels == attn.w2.layer.out_channels < 16
    else:  # the stream keeps a multiple of the heads
        assert model.head.in_features % 2 == 0 and model.head.in_features < 32


def test_compensation_keeps_the_consumers_mean_drive():
    """Removing hidden MLP channels: with compensation the consumer's BatchNorm output keeps its
    mean over the data (fc2 is 1x1, so the fold is exact in expectation); without, it moves, and
    the logits move further from the unpruned net's."""
    shifts, errors = {}, {}
    for compensate in (False, True):
        model = _gated("spikingformer").eval()
        seen = []
        bn = model.get_submodule("blocks.0.mlp.fc2.2")
        bn.register_forward_hook(
            lambda m, a, out, seen=seen: seen.append(out.detach().mean((0, 1, 3, 4))))
        with torch.no_grad():
            before = model(X)
        groups = {g.names("out")[0]: g for g in channel_groups(model, X)}
        hidden = groups["blocks.0.mlp.fc1.1"]
        # the patch-embedding cap covers the whole tokenizer (it runs before the attention)
        assert not hidden.embedding and groups["tokenizer.blocks.1.1"].embedding
        assert "tokenizer.stem.0" not in groups  # the image-fed stem alone: never pruned
        observed = _observe(model, X, [X])
        _remove(model, hidden, torch.arange(0, hidden.width, 2), None,
                observed if compensate else None)
        with torch.no_grad():
            errors[compensate] = float((model(X) - before).pow(2).mean())
        shifts[compensate] = float((seen[-1] - seen[0]).abs().max())
    assert shifts[True] < 1e-4 < shifts[False]
    assert errors[True] < 0.9 * errors[False]


def test_conv_fold_counts_the_padding_it_reads():
    """On a 2x2 map a 3x3 kernel with padding reads zeros at 5 of its 9 taps: the fold is the
    exact mean over output positions of the removed channels' constant drive, not the kernel's
    sum (which would overstate it here)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 4, 3, padding=1, bias=False)
    rate = torch.rand(6)
    removed = torch.tensor([1, 4])
    x = torch.zeros(1, 6, 2, 2)
    x[0, removed] = rate[removed].view(-1, 1, 1)
    exact = conv(x).mean((0, 2, 3))
    assert torch.allclose(_contribution(conv, removed, rate, (2, 2)), exact, atol=1e-6)
    assert not torch.allclose(_contribution(conv, removed, rate), exact, atol=1e-2)
    strided = nn.Conv2d(6, 4, 3, stride=2, padding=1, groups=2, bias=False)
    x5 = torch.zeros(1, 6, 5, 5)
    x5[0, removed] = rate[removed].view(-1, 1, 1)
    assert torch.allclose(_contribution(strided, removed, rate, (5, 5)),
                          strided(x5).mean((0, 2, 3)), atol=1e-6)


def test_pruned_checkpoint_reloads_and_exports_to_onnx(tmp_path):
    model = _gated("spikingformer")
    s4.prune(model, X, target_keep=0.6)
    s4.unwrap(model)
    model.eval()
    path = save_checkpoint(model, tmp_path / "pruned.safetensors")
    loaded, ckpt = load_checkpoint(path)
    assert ckpt.info["shapes"]["head"]["shape"][0] < 32
    assert torch.equal(loaded(X), model(X))
    result = edgekit.export(str(path), tmp_path / "art")  # rebuilt from the record alone
    assert result.validation.passed
    assert mean_firing_rate(loaded, *ckpt.entry.example_inputs(batch=4)) > 0  # not silent


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_refuses_bad_targets_and_non_spiking_models(tmp_path):
    proc = _cli("train", "mlp", "--spik4lite", "-o", str(tmp_path / "m.safetensors"))
    one_line_error(proc.returncode, proc.stderr, 2, "not a spiking model")
    for value in ("0", "-0.5", "1.01"):
        result = CliRunner().invoke(cli, ["train", "spikingformer", "--spik4lite",
                                          "--target-keep", value])
        assert result.exit_code == 2 and "--target-keep" in result.output
    result = CliRunner().invoke(cli, ["train", "spikingformer", "--spik4lite",
                                      "--energy-lambda", "-1"])
    assert result.exit_code == 2 and "--energy-lambda" in result.output
    result = CliRunner().invoke(cli, ["train", "spikingformer", "--energy-lambda", "1"])
    assert result.exit_code == 2 and "need --spik4lite" in result.output
    assert not list(tmp_path.iterdir())


def test_schedule_runs_end_to_end_and_records_the_gates():
    """Warm-up, one removal cycle, fine-tune on a tiny net: the learning-rate schedule lasts
    exactly the run, the record says where the gates stood and which removals were forced."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(48, 1, 8, 8, generator=gen).numpy()
    y = (torch.arange(48) % 10).numpy()
    data = Dataset("tiny", x[:32], y[:32], x[32:], y[32:], "tiny")
    config = Spik4liteConfig(target_keep=0.6, lam=3.0, schedule=Schedule(1, 1, 1, 1))
    result = train_spik4lite(get_entry("spikingformer"), data, config,
                             model=_tiny("spikingformer"))
    record = result.details["spik4lite"]
    assert result.epochs == 3 and record["lambda"] == 3.0
    assert [g["epoch"] for g in record["gates"]] == [1, 2]  # after each gated epoch
    assert all(0 < g["mean_keep"] < 1 for g in record["gates"])
    (removal,) = record["removals"]
    assert record["channels_after"] < record["channels_before"]
    assert 0 <= removal["forced"] <= removal["channels_before"] - removal["channels_after"]


def test_train_says_the_keep_reached_and_warns_when_the_caps_stop_short(capsys):
    from edgekit.methods.spik4lite.cli import say_keep
    record = {"keep": 0.5, "target_keep": 0.35, "channels_before": 200, "channels_after": 100}
    say_keep(record, cycles=1)
    out, err = capsys.readouterr()
    assert "kept 100 of 200" in out and "target 0.35" in out
    assert "not reached" in err and "--cycles" in err
    say_keep({**record, "target_keep": 0.5}, cycles=3)
    out, err = capsys.readouterr()
    assert "kept 100 of 200" in out and err == ""


def test_distillation_loss_is_zero_on_the_teachers_logits_and_matches_a_hand_case():
    from edgekit.methods.spik4lite.distill import distillation_loss
    teacher = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    assert float(distillation_loss(teacher.clone(), teacher, 2.0)) == pytest.approx(0, abs=1e-7)
    student = torch.zeros(2, 2)
    # T² · mean over rows of KL(p ‖ uniform), p = softmax(teacher / T)
    p = torch.softmax(teacher / 2.0, -1)
    expected = 4.0 * float((p * (p / 0.5).log()).sum(-1).mean())
    assert float(distillation_loss(student, teacher, 2.0)) == pytest.approx(expected, rel=1e-6)


class _Contrarian(nn.Module):
    """A teacher that calls dark images bright (class 1) and bright ones dark (class 0)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bright = (x.mean((1, 2, 3)) > 0.5).long()
        return 8.0 * nn.functional.one_hot(1 - bright, 10).float()


def test_schedule_with_a_teacher_learns_the_teachers_answers():
    """Pure distillation (weight 1) from a teacher that contradicts the labels: the plain
    schedule learns the labels, the taught one the teacher's answers, in a net of the same
    widths (only the fine-tune distils, so the gates remove the same channels); the record
    names the teacher."""
    from edgekit.methods.spik4lite.distill import Distillation
    gen = torch.Generator().manual_seed(0)
    level = torch.rand(256, 1, 1, 1, generator=gen) * 0.8 + 0.1
    x = (level + 0.05 * torch.rand(256, 1, 8, 8, generator=gen)).clamp(0, 1)
    y = (x.mean((1, 2, 3)) > 0.5).long()
    data = Dataset("tiny", x[:192].numpy(), y[:192].numpy(), x[192:].numpy(), y[192:].numpy(),
                   "tiny")
    teacher_says = _Contrarian()(x[:192]).argmax(-1)
    agree, shapes = {}, {}
    for label, distil in (("plain", None),
                          ("taught", Distillation(_Contrarian(), weight=1.0, source="t"))):
        config = Spik4liteConfig(target_keep=0.8, schedule=Schedule(1, 1, 1, 8),
                                 distillation=distil)
        result = train_spik4lite(get_entry("spikingformer"), data, config,
                                 model=_tiny("spikingformer"))
        shapes[label] = {k: v.shape for k, v in result.model.state_dict().items()}
        with torch.no_grad():
            agree[label] = float((result.model(x[:192]).argmax(-1) == teacher_says).float()
                                 .mean())
        record = result.details["spik4lite"]["distillation"]
        assert record == (None if distil is None else
                          {"teacher": "t", "weight": 1.0, "temperature": 4.0})
    assert agree["plain"] < 0.3 and agree["taught"] > 0.8, agree
    assert shapes["plain"] == shapes["taught"]


def test_distillation_refuses_a_teacher_of_another_shape_and_bad_weights():
    from edgekit.methods.spik4lite.distill import Distillation
    student = _tiny("spikingformer")
    wrong = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    with pytest.raises(UsageError, match=r"outputs \(8, 3\) where the student outputs \(8, 10\)"):
        Distillation(wrong, source="w").check(student, X)
    with pytest.raises(UsageError, match="cannot run the student's inputs"):
        Distillation(nn.Linear(5, 10), source="w").check(student, X)
    for weight in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(UsageError, match="distillation weight"):
            Distillation(wrong, weight=weight)
    with pytest.raises(UsageError, match="temperature"):
        Distillation(wrong, temperature=0.0)


def test_cli_teacher_and_init_options_are_checked_before_any_training(tmp_path):
    out = tmp_path / "s.safetensors"
    proc = _cli("train", "spikingformer", "--spik4lite", "--teacher",
                str(tmp_path / "missing.safetensors"), "-o", str(out))
    one_line_error(proc.returncode, proc.stderr, 2, "teacher", "missing.safetensors does not exist")
    other = save_checkpoint(create_model("wifi-mamba"), tmp_path / "wifi.safetensors")
    for args, fragment in (
            (["--teacher", str(other)], "need --spik4lite"),
            (["--spik4lite", "--distill-weight", "0.5"], "--distill-weight needs --teacher"),
            (["--spik4lite", "--teacher", str(other)],
             "trained for 'wifi-pose-sim', not 'digits'"),
            (["--spik4lite", "--teacher", str(other), "--distill-weight", "1.5"],
             "--distill-weight"),
            (["--init", str(other)], "need --spik4lite"),
            (["--spik4lite", "--init", str(tmp_path / "missing.safetensors")],
             "--init: checkpoint " + str(tmp_path / "missing.safetensors") + " does not exist"),
            (["--spik4lite", "--init", str(other)], "holds 'wifi-mamba', not 'spikingformer'")):
        result = CliRunner().invoke(cli, ["train", "spikingformer", *args, "-o", str(out)])
        assert result.exit_code == 2 and fragment in result.output, (args, result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wifi.safetensors"]


def test_a_teacher_trained_on_other_data_is_named_with_both_digests(tmp_path):
    from edgekit.methods.spik4lite.distill import Distillation, load_teacher
    path = save_checkpoint(_tiny("spikingformer"), tmp_path / "t.safetensors",
                           extra={"dataset": "digits", "dataset_digest": "abc123"})
    teacher = load_teacher(path, get_entry("spikingformer"))
    assert teacher.trained_on == ("digits", "abc123")
    assert teacher.other_data("digits", "abc123") is None
    message = teacher.other_data("mine", "def456")
    assert "'digits', digest abc123" in message and "'mine', digest def456" in message
    assert teacher.to_json()["teacher_dataset_digest"] == "abc123"
    unknown = load_teacher(save_checkpoint(_tiny("spikingformer"), tmp_path / "u.safetensors"),
                           get_entry("spikingformer"))
    assert unknown.trained_on is None and unknown.other_data("mine", "def456") is None
    assert Distillation(nn.Identity()).other_data("mine", "def456") is None


def test_init_prunes_the_given_net_and_leaves_it_untouched():
    """``init``: the schedule starts from the given net's weights (at learning rate 0 the
    never-pruned stem keeps them exactly, where a fresh start has others), prunes a copy, and
    records where the start came from; a start of another model is refused."""
    import dataclasses

    from edgekit.methods.spik4lite.warm_start import WarmStart
    entry = get_entry("spikingformer")
    frozen = dataclasses.replace(entry, train=dataclasses.replace(entry.train, lr=0.0))
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(48, 1, 8, 8, generator=gen).numpy()
    y = (torch.arange(48) % 10).numpy()
    data = Dataset("tiny", x[:32], y[:32], x[32:], y[32:], "tiny")
    start = _tiny("spikingformer")
    with torch.no_grad():
        for p in start.parameters():
            p.add_(torch.randn_like(p))
    before = {k: v.clone() for k, v in start.state_dict().items()}
    stem = "tokenizer.stem.0.weight"
    result = train_spik4lite(frozen, data, Spik4liteConfig(
        target_keep=0.6, schedule=Schedule(1, 1, 1, 1),
        init=WarmStart(start, "spikingformer", "dense.safetensors", ("tiny", "abc"))))
    assert torch.equal(result.model.state_dict()[stem], before[stem])
    assert not torch.equal(_tiny("spikingformer").state_dict()[stem], before[stem])
    assert all(torch.equal(v, before[k]) for k, v in start.state_dict().items())
    record = result.details["spik4lite"]
    assert record["init"] == {"checkpoint": "dense.safetensors", "model": "spikingformer",
                              "dataset": "tiny", "dataset_digest": "abc"}
    assert record["channels_after"] < record["channels_before"]
    with pytest.raises(UsageError, match="holds 'spikingformer', not 'spikingformer:x'"):
        train_spik4lite(entry, data, Spik4liteConfig(init=WarmStart(start, "spikingformer", "d")),
                        variant="x")


def test_a_start_trained_on_other_data_is_named_with_both_digests(tmp_path):
    from edgekit.methods.spik4lite.warm_start import load_start
    path = save_checkpoint(_tiny("spikingformer"), tmp_path / "d.safetensors",
                           extra={"dataset": "digits", "dataset_digest": "abc123"})
    start = load_start(path, get_entry("spikingformer"))
    assert start.model_name == "spikingformer" and start.trained_on == ("digits", "abc123")
    assert start.other_data("digits", "abc123") is None
    message = start.other_data("mine", "def456")
    assert message.startswith(f"the starting checkpoint {path} was trained on other data")
    assert "'digits', digest abc123" in message and "'mine', digest def456" in message
