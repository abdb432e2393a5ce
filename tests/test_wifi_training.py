"""Set loss and the pose training loop on a tiny simulated set."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from edgekit.methods.wifi_mamba.loss import set_loss
from edgekit.methods.wifi_mamba.simulator import simulate_dataset
from edgekit.methods.wifi_mamba.train import (
    PoseSplit,
    evaluate_pose_model,
    hold_out,
    predict,
    train_pose_model,
)
from edgekit.registry import create_model, get_entry

pytestmark = pytest.mark.usefixtures("single_thread")


def test_set_loss_is_permutation_invariant_and_zero_pose_error_when_exact():
    torch.manual_seed(0)
    gt = torch.randn(1, 3, 14, 3)
    poses = torch.randn(1, 5, 14, 3)
    poses[0, 4], poses[0, 1] = gt[0, 0], gt[0, 1]  # two persons predicted exactly
    logits = torch.full((1, 5), -20.0)
    logits[0, [4, 1]] = 20.0
    n = torch.tensor([2])
    loss = set_loss(poses, logits, gt, n)
    assert float(loss) < 1e-6
    perm = torch.tensor([3, 0, 4, 2, 1])
    torch.testing.assert_close(set_loss(poses[:, perm], logits[:, perm], gt, n), loss)
    worse = poses.clone()
    worse[0, 4] += 0.1
    assert float(set_loss(worse, logits, gt, n)) > float(loss)


def test_training_steps_and_streaming_evaluation():
    split = PoseSplit.from_data(simulate_dataset(3, 5, seed=0))
    for name in ("wifi-mamba", "wifi-petr"):
        model = create_model(name)
        steps, loss = train_pose_model(model, split, seconds=60, batch=4, window=2, max_steps=3)
        assert steps == 3 and loss == loss
        preds = predict(model, split)
        assert preds.shape == (15, model.cfg.queries, 14, 3)
        res = evaluate_pose_model(model, split)
        assert set(res) == {"1", "2", "3", "all"} and res["all"]["frames"] == 15


def test_hold_out_sets_whole_sequences_apart():
    split = PoseSplit.from_data(simulate_dataset(4, 5, seed=0))  # 4 sequences of 5 frames
    rest, held = hold_out(split, 0.25, seed=0)
    assert len(rest.x) == 15 and len(held.x) == 5
    assert not set(rest.sequence) & set(held.sequence)
    assert sorted({*rest.sequence, *held.sequence}) == [0, 1, 2, 3]
    for bad in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            hold_out(split, bad)
    with pytest.raises(ValueError, match="too few"):
        hold_out(split, 0.9)


def _spoil(model: torch.nn.Module) -> None:
    """Shift every weight far off, so that the score measured after it is the worst."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(3.0)


def test_validation_keeps_the_weights_that_scored_best():
    split = PoseSplit.from_data(simulate_dataset(4, 5, seed=0))
    train, held = hold_out(split, 0.25, seed=0)
    torch.manual_seed(0)
    model, curve, steps = create_model("wifi-petr"), [], []

    def on_step(loss: float) -> None:  # the last step goes wrong: the final score is the worst
        steps.append(loss)
        if len(steps) == 7:
            _spoil(model)

    train_pose_model(model, train, seconds=60, batch=4, window=2, max_steps=7, on_step=on_step,
                     validation=held, validate_every=2,
                     on_validate=lambda step, mm: curve.append((step, mm)))
    assert [step for step, _ in curve] == [2, 4, 6, 7]  # every 2 steps and at the end
    best = min(mm for _, mm in curve)
    assert curve[-1][1] > best  # else the test could not tell kept weights from last ones
    assert evaluate_pose_model(model, held)["all"]["mpjpe_mm"] == pytest.approx(best, rel=1e-6)
    with pytest.raises(ValueError, match="validate_every"):
        train_pose_model(model, train, max_steps=1, validation=held, validate_every=0)


def test_pose_dataset_and_entry_hooks():
    import numpy as np

    from edgekit.methods.wifi_mamba.dataset import (
        evaluate_dataset,
        load_wifi_pose,
        to_split,
        train_entry,
    )

    data = load_wifi_pose(train_sequences=3, test_sequences=3)
    assert data.x_train.shape == (24, 2, 270, 20) and data.y_test.shape == (24, 3, 14, 3)
    split = to_split(data.x_train, data.y_train)
    assert list(split.n_persons[::8]) == [1, 2, 3] and list(split.sequence[::8]) == [0, 1, 2]
    assert np.isnan(data.y_train[0, 1:]).all() and not np.isnan(data.y_train[16]).any()
    result = train_entry(get_entry("wifi-petr"), data, epochs=1)
    assert result.metric == "mpjpe_mm" and result.value > 0
    assert evaluate_dataset(result.model, data.x_test, data.y_test) == result.value


def test_entry_training_selects_on_held_out_training_sequences():
    from edgekit.errors import UsageError
    from edgekit.methods.wifi_mamba.dataset import load_wifi_pose, to_split, train_entry

    data = load_wifi_pose(train_sequences=4, test_sequences=1)
    torch.manual_seed(0)
    model = create_model("wifi-petr")

    notes = []

    def progress(update) -> None:  # the last of the 4 steps goes wrong
        notes.append(update.note)
        if update.done == update.total == 4:
            _spoil(model)

    result = train_entry(get_entry("wifi-petr"), data, epochs=10, progress=progress, model=model,
                         validation=0.25, validate_every=1)
    record = result.details["selection"]
    assert (record["sequences"], record["frames"], record["validate_every"]) == (1, 8, 1)
    curve = record["validation_mpjpe_mm"]
    assert [step for step, _ in curve] == [1, 2, 3, 4] and result.details["steps"] == 4
    assert record["kept_validation_mpjpe_mm"] == min(mm for _, mm in curve) < curve[-1][1]
    assert record["kept_step"] == min(curve, key=lambda c: c[1])[0]
    assert notes[0] == "" and notes[1].startswith("loss ")  # nothing validated yet
    assert notes[2].endswith(f"best validation {curve[0][1]:.1f} mm")  # after step 1's score
    _, held = hold_out(to_split(data.x_train, data.y_train), 0.25, seed=0)  # the same draw
    assert evaluate_pose_model(result.model, held)["all"]["mpjpe_mm"] == pytest.approx(
        record["kept_validation_mpjpe_mm"], rel=1e-6)  # the model ends with the kept weights
    with pytest.raises(UsageError, match="cannot hold out 0.9 of wifi-pose-sim's training"):
        train_entry(get_entry("wifi-petr"), data, epochs=1, validation=0.9)


def test_validation_options_are_checked_before_any_training(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from edgekit.cli import cli

    monkeypatch.chdir(tmp_path)
    for args, fragment in ((["wifi-mamba", "--validate-every", "5"],
                            "--validate-every needs --validation"),
                           (["mlp", "--validation", "0.1"], "'mlp' is not one"),
                           (["wifi-petr", "--validation", "1"], "0<x<1"),
                           (["wifi-petr", "--validation", "nan"], "not a finite number"),
                           (["wifi-petr", "--validation", "0.1", "--validate-every", "0"],
                            "--validate-every")):
        result = CliRunner().invoke(cli, ["train", *args])
        assert result.exit_code == 2 and fragment in result.output, (args, result.output)
    assert list(tmp_path.iterdir()) == []


def test_entry_training_is_reproducible_from_its_seed():
    from edgekit.methods.wifi_mamba.dataset import load_wifi_pose, train_entry

    data = load_wifi_pose(train_sequences=2, test_sequences=1)
    runs = []
    for _ in range(2):
        torch.manual_seed(len(runs) + 100)  # whatever the global RNG held before
        runs.append(train_entry(get_entry("wifi-petr"), data, epochs=1))
    assert runs[0].value == runs[1].value and runs[0].final_loss == runs[1].final_loss


def _edgekit(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}  # as single_thread
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=600)


def test_edgekit_train_honours_a_time_budget(tmp_path, wifi_pose_sim):
    """The former ``python -m edgekit.methods.wifi_mamba.train --seconds S --json FILE``."""
    proc = _edgekit("train", "wifi-mamba", "--seconds", "1", "-o", "m.safetensors",
                    "--json", "r.json", "--validation", "0.05", "--validate-every", "2",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["kind"] == "train" and report["model"] == "wifi-mamba"
    details = report["details"]
    assert details["steps"] >= 1
    selection = details["selection"]  # --validation: 15 of the 300 training sequences
    assert (selection["sequences"], selection["frames"]) == (15, 120)
    assert selection["validation_mpjpe_mm"][-1][0] == details["steps"]  # and at the end
    assert f"validation: kept step {selection['kept_step']} of {details['steps']}" in proc.stdout
    assert set(details["test"]) >= {"1", "2", "3", "all"}
    assert report["mpjpe_mm"] == details["test"]["all"]["mpjpe_mm"]
    assert "test_without_memory" in details  # WiFi-Mamba streams with its memory
    assert (tmp_path / "m.safetensors").is_file()


def test_edgekit_train_rejects_a_bad_budget(tmp_path):
    proc = _edgekit("train", "wifi-mamba", "--seconds", "0", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("edgekit: error: Invalid value for '--seconds': 0.0 is not in the "
                           "range 0<x<=604800.0.")


def test_body_frame_loss_ignores_place_and_heading_but_not_shape():
    from edgekit.methods.wifi_mamba.loss import body_frame_l1
    from edgekit.methods.wifi_mamba.simulator import _TEMPLATE

    gt = torch.tensor(_TEMPLATE, dtype=torch.float32)[None]
    yaw = torch.tensor(1.1)
    rot = torch.tensor([[torch.cos(yaw), -torch.sin(yaw), 0.0],
                        [torch.sin(yaw), torch.cos(yaw), 0.0], [0.0, 0.0, 1.0]])
    moved = gt @ rot.T + torch.tensor([1.5, -0.7, 0.0])  # the right pose, elsewhere, turned
    assert float(body_frame_l1(moved, gt)) < 1e-5
    assert float((moved - gt).abs().sum(-1).mean()) > 0.5  # the world L1 sees the move
    raised = moved.clone()
    raised[0, 4, 2] += 0.5  # right wrist up
    assert float(body_frame_l1(raised, gt)) == pytest.approx(0.5 / 14, rel=1e-3)
    moved.requires_grad_(True)
    body_frame_l1(moved * 1.1, gt).backward()
    assert torch.isfinite(moved.grad).all() and moved.grad.abs().sum() > 0


def test_selection_record_of_a_diverged_run_is_valid_json():
    import numpy as np

    from edgekit.methods.wifi_mamba.dataset import selection_record

    held = PoseSplit(np.zeros((8, 1)), np.zeros((8, 3, 14, 3)), np.ones(8, int), np.zeros(8, int))
    record = selection_record(held, 0.1, 2, [[2, float("nan")], [4, 30.0], [6, float("inf")]])
    assert record["validation_mpjpe_mm"] == [[2, None], [4, 30.0], [6, None]]
    assert (record["kept_step"], record["kept_validation_mpjpe_mm"]) == (4, 30.0)
    diverged = selection_record(held, 0.1, 2, [[2, float("nan")]])
    assert diverged["kept_step"] is None
    json.dumps([record, diverged], allow_nan=False)  # no NaN token in a --json report
