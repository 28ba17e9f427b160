"""The training step's extension points at work in real (tiny) runs: SMART and Bregman terms, PCGrad, gradient-conflict
measurement, device reads every few steps, and training phases — each against plain training, and through resume"""
import json, os, signal
from pathlib import Path
import pandas as pd
import pytest, torch
import minbert_nb.step as S
from minbert_nb.train import train
from minbert_nb.phases import run_training
from minbert_nb.config import config_from_args, TrainConfig
from minbert_nb.checkpoint import load_checkpoint, TrainingInterrupted
from datapaths import tiny_backbone_dir

def _args(out, data, *extra):
    return ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--out", str(out), "--data_dir", str(data), "--epochs", "2", "--steps_per_epoch", "6",
            "--batch_size", "4", "--train_limit", "32", "--dev_limit", "16", "--eval_batch_size", "16", "--checkpoint_every", "2",
            "--hidden_dropout", "0.1", "--predict_test", "false", "--sst_phrases", "false", *extra]

def _run(out, data, *extra, **kw):
    return run_training(config_from_args(_args(out, data, *extra)), progress=False, **kw)

def _weights(run, f="last.pt"): return load_checkpoint(Path(run) / f)["model"]

def _same(a, b): return all(torch.equal(a[k], b[k]) for k in a) and a.keys() == b.keys()

def _interrupt_at(monkeypatch, n):
    "Ask for a graceful stop (SIGINT to this process) at the n-th task loss, as Ctrl-C would"
    calls, real = {"n": 0}, S.base_loss
    def loss(*a, **k):
        calls["n"] += 1
        if calls["n"] == n: os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)
    monkeypatch.setattr(S, "base_loss", loss)

def test_grad_conflicts_measure_without_changing_training(tmp_path, small_data):
    _run(tmp_path / "plain", small_data)
    m = _run(tmp_path / "probe", small_data, "--grad_conflicts", "true", "--grad_conflicts_every", "2")
    assert _same(_weights(tmp_path / "plain"), _weights(tmp_path / "probe"))          # the probe leaves training bit-identical
    rows = pd.read_csv(tmp_path / "probe" / "grad_conflicts.csv")
    assert list(rows.columns) == ["step", "epoch", "task_a", "task_b", "cosine"]
    assert sorted(rows.step.unique()) == [2, 4, 6, 8, 10, 12] and len(rows) == 6 * 6 and rows.cosine.between(-1.0001, 1.0001).all()
    assert set(m["grad_conflicts"]) == {"sst-para", "sst-sts", "para-sts", "sst-sst", "para-para", "sts-sts"}   # a-a: two batches of a
    for s in m["grad_conflicts"].values(): assert s["n"] == 6 and 0 <= s["frac_conflicting"] <= 1 and -1 <= s["mean_cosine"] <= 1
    assert (tmp_path / "probe" / "figures" / "grad_conflicts.png").stat().st_size > 1000

def test_reading_the_device_every_k_steps_changes_nothing_on_cpu(tmp_path, small_data):
    _run(tmp_path / "a", small_data)
    _run(tmp_path / "b", small_data, "--sync_every", "4")
    assert _same(_weights(tmp_path / "a"), _weights(tmp_path / "b"))
    ha, hb = (pd.read_csv(tmp_path / d / "history.csv") for d in "ab")
    assert ha.train_loss.tolist() == hb.train_loss.tolist()

def test_non_finite_loss_found_at_a_later_read_names_its_step(tmp_path, small_data, monkeypatch):
    calls, real = {"n": 0}, S.base_loss
    def bad(*a, **k):
        calls["n"] += 1; l = real(*a, **k)
        return l * float("nan") if calls["n"] == 3 else l
    monkeypatch.setattr(S, "base_loss", bad)
    with pytest.raises(FloatingPointError) as e: _run(tmp_path, small_data, "--sync_every", "4", "--checkpoint_every", "0")
    assert "non-finite loss" in str(e.value) and "epoch 1, step 3/6" in str(e.value) and "batch ids [" in str(e.value)

def test_smart_and_bregman_train_and_resume_bit_exactly(tmp_path, small_data, monkeypatch):
    flags = ("--smart_weight", "1.0", "--bpp_weight", "1.0", "--smart_eps", "0.05", "--smart_step", "0.05")
    m = _run(tmp_path / "full", small_data, *flags)
    assert m["optimisation"]["terms"] == ["smart", "bpp"]
    plain = _run(tmp_path / "plain", small_data)
    assert not _same(_weights(tmp_path / "full"), _weights(tmp_path / "plain"))       # the terms change training
    ck = load_checkpoint(tmp_path / "full" / "last.pt")
    assert set(ck["step"]["terms"]) == {"smart", "bpp"} and "slow" in ck["step"]["terms"]["bpp"]
    _interrupt_at(monkeypatch, 7)                                                     # stop in epoch 1, resume, finish
    with pytest.raises(TrainingInterrupted): _run(tmp_path / "cut", small_data, *flags)
    monkeypatch.undo()
    run_training(config_from_args(["--resume", str(tmp_path / "cut")]), progress=False, resume=True)
    assert _same(_weights(tmp_path / "full"), _weights(tmp_path / "cut"))
    assert _same(load_checkpoint(tmp_path / "full" / "last.pt")["step"]["terms"]["bpp"]["slow"],
                 load_checkpoint(tmp_path / "cut" / "last.pt")["step"]["terms"]["bpp"]["slow"])

def test_pcgrad_runs_with_the_simultaneous_sampler_only(tmp_path, small_data):
    with pytest.raises(ValueError, match="needs sampler='simultaneous'"): TrainConfig(pcgrad=True, sampler="proportional")
    m = _run(tmp_path / "pc", small_data, "--pcgrad", "true", "--sampler", "simultaneous", "--grad_conflicts", "true",
             "--grad_conflicts_every", "3")
    assert m["optimisation"]["transform"] == "pcgrad" and "grad_conflicts" in m
    _run(tmp_path / "sum", small_data, "--sampler", "simultaneous")
    assert not _same(_weights(tmp_path / "pc"), _weights(tmp_path / "sum"))

PHASES = '[{"name": "quora", "tasks": ["para"], "epochs": 1}, {"name": "multitask"}]'

def test_phases_carry_weights_and_resume_inside_a_phase(tmp_path, small_data, monkeypatch):
    # the second phase with learning rate 0 keeps the first phase's best weights exactly: the weights carry over
    frozen = '[{"name": "quora", "tasks": ["para"], "epochs": 1}, {"name": "still", "lr_backbone": 0, "lr_heads": 0, "epochs": 1}]'
    _run(tmp_path / "carry", small_data, "--phases", frozen)
    a, b = _weights(tmp_path / "carry" / "1-quora", "best.pt"), _weights(tmp_path / "carry" / "2-still", "best.pt")
    assert all(torch.equal(a[k], b[k]) for k in a if k != "para_logit_bias")
    m = _run(tmp_path / "full", small_data, "--phases", PHASES)
    assert [p["name"] for p in m["phases"]] == ["quora", "multitask"] and m["phases"][1]["epochs"] == 2
    hist = pd.read_csv(tmp_path / "full" / "history.csv")
    assert hist.phase.tolist() == ["quora", "multitask", "multitask"]
    _interrupt_at(monkeypatch, 6 + 7)                # phase 1 takes 6 losses; stop inside the multitask phase
    with pytest.raises(TrainingInterrupted): _run(tmp_path / "cut", small_data, "--phases", PHASES)
    monkeypatch.undo()
    assert (tmp_path / "cut" / "1-quora" / "metrics.json").is_file() and not (tmp_path / "cut" / "2-multitask" / "metrics.json").exists()
    run_training(config_from_args(["--resume", str(tmp_path / "cut")]), progress=False, resume=True)
    assert _same(_weights(tmp_path / "full", "best.pt"), _weights(tmp_path / "cut", "best.pt"))
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text())["overall"] == m["overall"]

def test_contrastive_phase(tmp_path, small_data):
    ph = '[{"name": "mnrl", "contrastive_only": true, "contrastive_weight": 1.0, "contrastive_batch": 8, "epochs": 1}, {"name": "multitask"}]'
    m = _run(tmp_path, small_data, "--phases", ph, "--contrastive_sources", "para,sts")
    first = pd.read_csv(tmp_path / "1-mnrl" / "history.csv")
    assert first.train_loss.iloc[0] > 0 and m["phases"][0]["name"] == "mnrl"
    with pytest.raises(ValueError, match="contrastive_weight > 0"): TrainConfig(contrastive_only=True)

BORN_AGAIN = ('[{"name": "teacher", "epochs": 1}, {"name": "student", "epochs": 1, "from_pretrained": true, "distill_from": "previous", '
              '"distill_weight": 1.0, "distill_temp": 2.0}]')

def test_born_again_student_learns_from_its_teacher_and_resumes_bit_exactly(tmp_path, small_data, monkeypatch):
    m = _run(tmp_path / "full", small_data, "--phases", BORN_AGAIN)
    assert m["distill"]["previous"] == str(tmp_path / "full" / "1-teacher" / "best.pt") and m["optimisation"]["terms"] == ["distill"]
    ck = load_checkpoint(tmp_path / "full" / "2-student" / "last.pt")
    cache = ck["step"]["terms"]["distill"]["cache"]                                   # the teachers' targets travel with the checkpoint
    assert set(cache) == {"sst", "para", "sts"} and cache["sst"]["values"].shape[1] == 5
    _interrupt_at(monkeypatch, 6 + 4)                                                 # the teacher phase takes 6 losses; stop inside the student's
    with pytest.raises(TrainingInterrupted): _run(tmp_path / "cut", small_data, "--phases", BORN_AGAIN)
    monkeypatch.undo()
    run_training(config_from_args(["--resume", str(tmp_path / "cut")]), progress=False, resume=True)
    assert _same(_weights(tmp_path / "full", "best.pt"), _weights(tmp_path / "cut", "best.pt"))
    assert _same(_weights(tmp_path / "full" / "2-student"), _weights(tmp_path / "cut" / "2-student"))
