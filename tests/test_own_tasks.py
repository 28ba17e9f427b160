"""Declared tasks (a task file) through every method: the command line, SMART, PCGrad, phases, resume, ensembles,
minbert_eval / minbert_predict in a fresh process, and Liu & Shen (000)'s Table 11 extra-data rows with stand-in files"""
import json, os, shutil, subprocess, sys
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
from datapaths import tiny_backbone_dir, SAMPLE
from minbert_nb.data import TASKS, get_task, unregister_task, load_split
from minbert_nb.task_files import demo_task_files, load_tasks
from minbert_nb.config import TrainConfig, parse_train_args
from minbert_nb.train import train
from minbert_nb.phases import run_training

ROOT = Path(__file__).resolve().parents[1]
OWN = ("tickets", "nli", "pairs")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    tf = demo_task_files(tmp_path_factory.mktemp("own")/"data")
    yield tf
    for t in OWN:
        if t in TASKS: unregister_task(t)


def tiny(task_file, out, **kw):
    "A seconds-long run of the three declared tasks on the tiny random backbone"
    base = dict(task_file=str(task_file), tasks=OWN, backbone=tiny_backbone_dir(), out=str(out), epochs=1, batch_size=6,
                max_length=24, eval_batch_size=64, lr_heads=1e-3, pooling="mean", seed=0, data_dir=str(SAMPLE))
    return run_training(TrainConfig(**{**base, **kw}), progress=False)


def test_command_line_declares_and_checks(task_file, tmp_path):
    cfg, _ = parse_train_args(["--task_file", str(task_file), "--tasks", "sst,tickets,pairs", "--out", str(tmp_path/"r")])
    assert cfg.tasks == ("sst", "tickets", "pairs") and sorted(cfg.task_specs) == sorted(OWN)
    assert cfg.model_config().mode_of("pairs") == "bi" and cfg.model_config().head_of("pairs") == "regression"
    with pytest.raises(ValueError, match="unknown task"): TrainConfig(tasks=("tickets2",))


@pytest.mark.parametrize("extra", [dict(smart_weight=1.0), dict(sampler="simultaneous", pcgrad=True), dict(peft="lora", mode="pretrain"),
                                   dict(peft="dora,pal,prefix,adapter", mode="pretrain"), dict(sampler="annealed", steps_per_epoch=6),
                                   dict(pair_mode="cross", pair_swap=True), dict(sts_head="cosine", mnrl_weight=0.5),
                                   dict(phases=[dict(name="pairs", tasks=["pairs"]), dict(name="all")])],
                         ids=["smart", "pcgrad", "lora", "peft-all", "annealed", "cross", "cosine-mnrl", "phases"])
def test_methods_train_declared_tasks(task_file, tmp_path, extra):
    m = tiny(task_file, tmp_path/"run", **extra)
    assert {"tickets_acc", "tickets_f1", "nli_acc", "pairs_corr", "mean_primary"} <= set(m)
    assert np.isclose(m["mean_primary"], np.mean([m["tickets_acc"], m["nli_acc"], m["pairs_corr"]]))
    assert "overall" not in m


def test_mixed_with_a_built_in_task(task_file, tmp_path):
    m = tiny(task_file, tmp_path/"mixed", tasks=("sst", "tickets"), train_limit=24, dev_limit=24)
    assert {"sst_acc", "tickets_acc", "mean_primary"} <= set(m) and "overall" not in m


@pytest.fixture(scope="module")
def two_runs(task_file, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for s in (0, 1): tiny(task_file, root/f"r{s}", seed=s)
    return [root/"r0", root/"r1"]


def test_ensemble_votes_classes_and_averages_scores(two_runs, tmp_path):
    from minbert_nb.ensemble import ensemble_runs
    m = ensemble_runs(two_runs, tmp_path/"ens", data_dir=str(SAMPLE), splits=("dev",))
    assert {"tickets_acc", "nli_acc", "pairs_corr"} <= set(m) and m["methods"] == dict(sst="vote", para="vote", sts="mean")
    pairs = pd.read_csv(tmp_path/"ens"/"predictions"/"pairs-dev-output.csv", sep=",", skiprows=1, header=None)[1].astype(float)
    assert ((pairs >= 0) & (pairs <= 1)).all()


def test_eval_and_predict_in_a_fresh_process(two_runs, tmp_path):
    "A run folder reads again without the task file: its config holds the tasks' specs"
    run = tmp_path/"moved"; shutil.copytree(two_runs[0], run)
    stand_in = tmp_path/"new.jsonl"
    stand_in.write_text('{"premise": "Refund me now", "hypothesis": "I want my money back"}\n{"premise": "A", "hypothesis": "B"}\n')
    code = ("import sys; from minbert_nb.commands import minbert_eval, minbert_predict\n"
            f"sys.argv = ['minbert_eval', {str(run)!r}]; minbert_eval()\n"
            f"sys.argv = ['minbert_predict', {str(run)!r}, '--task', 'nli', '--file', {str(stand_in)!r}]; minbert_predict()")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)   # the run's paths are the repository's
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tickets_acc=" in r.stdout and json.loads((run/"eval.json").read_text())["split"] == "dev"
    lines = (run/"predictions"/"nli-new-output.csv").read_text().splitlines()
    assert lines[0] == "id \t Predicted_nli " and len(lines) == 3


def test_table_11_extra_data_rows_run_when_their_files_are_given(tmp_path, monkeypatch):
    from minbert_nb.tables import TABLES, row_configs, ROTTEN_FILE
    from minbert_nb.ablate import row_blocker
    from minbert_nb.run_data import build_data
    from minbert_nb.pretrained import load_tokenizer
    d = tmp_path/"data"; shutil.copytree(SAMPLE, d)
    monkeypatch.setenv("MINBERT_DATA", str(d))
    t = TABLES["000-T11"]; row = t.row("+ Rotten")
    assert row.needs and "rotten_tomatoes.csv" in str(row.needs)               # not given: the row says what to provide
    stars = np.arange(60) % 5 + 1
    pd.DataFrame(dict(review=[f"review {i} of {s} stars" for i, s in enumerate(stars)], rating=stars)).to_csv(d/ROTTEN_FILE, index=False)
    assert not row.needs                                                         # given: the row runs
    cfgs = row_configs(t, row, scale="tiny", seed=0)
    assert row_blocker(row, cfgs) is None
    cfg = TrainConfig(**{**cfgs[0], "data_dir": str(d), "out": str(tmp_path/"out"), "cache": False})
    data = build_data(cfg, load_tokenizer(), splits=("train",))
    sst = load_split("sst", "train", str(d))
    n = data["files"]["sst_train_rows"]
    assert n == min(len(sst), cfg.train_limit or 10**9) or n == len(sst) + 60   # 60 stand-in rows: all kept (15k asked, 12 a star)
    assert any("rotten_tomatoes" in p for p in data["files"]["sst_train"])


def test_resume_of_a_declared_task_run_is_bit_identical(task_file, tmp_path, monkeypatch):
    "Stopped by Ctrl-C in epoch 1 and resumed from its folder (its config declares the tasks again): the same weights as one go"
    import signal
    import minbert_nb.step as S
    from minbert_nb.checkpoint import load_checkpoint, TrainingInterrupted
    from minbert_nb.config import config_from_args
    import torch
    tiny(task_file, tmp_path/"full", epochs=2, checkpoint_every=0)
    calls, real = {"n": 0}, S.base_loss
    def loss(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5: os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)
    monkeypatch.setattr(S, "base_loss", loss)
    with pytest.raises(TrainingInterrupted): tiny(task_file, tmp_path/"cut", epochs=2, checkpoint_every=0)
    monkeypatch.undo()
    run_training(config_from_args(["--resume", str(tmp_path/"cut")]), progress=False, resume=True)
    a, b = (load_checkpoint(tmp_path/r/"last.pt")["model"] for r in ("full", "cut"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_export_of_a_declared_task_run_in_every_format(task_file, tmp_path):
    "A LoRA run of declared tasks goes to transformers, sentence-transformers and peft; its heads' description names the classes"
    from minbert_nb.export import minbert_export
    run = tmp_path/"lora"
    tiny(task_file, run, peft="lora", mode="pretrain", sts_head="cosine")      # pairs names a head: it stays a regression
    for fmt in ("hf", "sentence-transformers", "peft"):
        res = minbert_export([str(run), str(tmp_path/fmt), "--format", fmt])
        assert res["checked"]["max_abs_diff"] < 1e-4, (fmt, res["checked"])
    heads = json.loads((tmp_path/"hf"/"minbert_heads.json").read_text())["tasks"]
    assert heads["nli"]["classes"] == ["entailment", "neutral", "contradiction"] and "clipped to [0, 1]" in heads["pairs"]["predict"]
