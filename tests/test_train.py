"A short training run writes the whole run folder; the commands parse and fail clearly"
import json, os, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest
from minbert_nb.config import TrainConfig, preset_config, config_from_args
from minbert_nb.train import train, load_run
from minbert_nb.commands import minbert_eval, minbert_predict, minbert_train
from minbert_nb.evaluate import read_predictions
from datapaths import tiny_backbone_dir, run_command

ROOT = Path(__file__).resolve().parents[1]

N = 60   # rows per file of the `small_data` fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def run(module_tmp, small_data):
    out = module_tmp("run")
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), out=str(out), data_dir=str(small_data), steps_per_epoch=2, epochs=2, batch_size=4,
                        train_limit=24, dev_limit=24, eval_batch_size=32, predict_test=True)
    return out, train(cfg, progress=False)

def test_run_folder_has_everything(run):
    out, m = run
    for f in ["config.json", "metrics.json", "history.csv", "best.pt", "figures/history.png"]:
        assert (out / f).is_file(), f
    for t in ("sst", "para", "sts"): assert (out / "predictions" / f"{t}-dev-output.csv").is_file()
    for t in ("sst", "sts"): assert (out / "predictions" / f"{t}-test-output.csv").is_file()   # quora test is not available offline
    for t in ("sst", "para", "sts"): assert (out / "predictions" / f"{t}-dev-raw.csv").is_file()   # raw outputs, for ensembles
    for t in ("sst", "sts"): assert (out / "predictions" / f"{t}-test-raw.csv").is_file()
    hist = pd.read_csv(out / "history.csv")
    assert list(hist.epoch) == [1, 2] and {"sst_acc", "para_acc", "sts_corr", "overall", "train_loss"} <= set(hist.columns)
    assert (hist.eval_time_s > 0).all() and (hist.train_time_s > 0).all()
    per_task = [c for c in hist.columns if c.startswith("train_loss_")]   # each task's mean batch loss (one task per step here)
    assert per_task and {c[len("train_loss_"):] for c in per_task} <= {"sst", "para", "sts"}
    for _, r in hist.iterrows():
        got = r[per_task].dropna()
        assert got.min() - 1e-9 <= r.train_loss <= got.max() + 1e-9
    metrics = json.loads((out / "metrics.json").read_text())
    for k in ("sst_acc", "para_acc", "sts_corr", "overall", "split", "backbone", "trainable_params", "train_files"):
        assert k in metrics, k
    assert metrics["train_files"]["para_train"].endswith("quora-extra-train.csv")
    assert 0 <= metrics["train_padding_fraction"] < 1 and "train_padding_fraction" in hist.columns
    assert abs(metrics["overall"] - (metrics["sst_acc"] + metrics["para_acc"] + (metrics["sts_corr"] + 1) / 2) / 3) < 1e-12
    cfg = json.loads((out / "config.json").read_text()); assert cfg["preset"] == "quick" and cfg["steps_per_epoch"] == 2
    sst = read_predictions(out / "predictions" / "sst-test-output.csv", "sst")
    assert len(sst) == N and set(sst.pred) <= {0, 1, 2, 3, 4}
    first = (out / "predictions" / "para-dev-output.csv").read_text().splitlines()[0]
    assert first == "id \t Predicted_Is_Paraphrase "

def test_load_run_and_eval_command(run):
    out, m = run
    model, cfg = load_run(out)
    assert cfg.preset == "quick" and not model.training
    for f in (out / "predictions").glob("*-dev-output.csv"): f.unlink()
    minbert_predict([str(out), "--splits", "dev"])
    assert {f.name for f in (out / "predictions").glob("*-dev-output.csv")} == {"sst-dev-output.csv", "para-dev-output.csv", "sts-dev-output.csv"}
    # minbert_predict / minbert_eval use the full dev files (here: all N rows, not the run's dev_limit of 24)
    assert len(read_predictions(out / "predictions" / "para-dev-output.csv", "para")) == N
    minbert_eval([str(out)])
    ev = json.loads((out / "eval.json").read_text())
    assert ev["para_n"] == N and ev["sst_n"] == N and 0 <= ev["overall"] <= 1

def test_single_task_run(tmp_path, small_data):
    "Part 1 of the project: SST or CFIMDB alone, backbone frozen (pretrain) or not"
    m = train(TrainConfig(tasks=("cfimdb",), mode="pretrain", out=str(tmp_path), data_dir=str(small_data), epochs=1,
                          batch_size=8, lr_heads=1e-3, predict_test=False), progress=False)
    assert "cfimdb_acc" in m and "overall" not in m and m["trainable_params"] == 384 * 2 + 2
    assert (tmp_path / "predictions" / "cfimdb-dev-output.csv").is_file()

def test_cli_overrides_and_errors(tmp_path, capsys):
    c = config_from_args(["--preset", "baseline", "--lr_backbone", "2e-5", "--bucket", "true", "--pair-modes", '{"para": "cross"}'])
    assert (c.lr_backbone, c.bucket, c.pair_modes, c.sampler) == (2e-5, True, {"para": "cross"}, "round_robin")
    f = tmp_path / "c.json"; f.write_text('{"epochs": 7, "pooling": "mean"}')
    c = config_from_args(["--config", str(f), "--epochs", "2"])
    assert (c.epochs, c.pooling) == (2, "mean")
    f.write_text('{"epochs": 7,\n "poolng": "mean"}')
    with pytest.raises(SystemExit): config_from_args(["--config", str(f)])
    assert "poolng" in capsys.readouterr().err
    f.write_text('{"epochs": 7,\n "pooling": }')
    with pytest.raises(SystemExit): config_from_args(["--config", str(f)])
    assert "c.json:2" in capsys.readouterr().err
    with pytest.raises(SystemExit): config_from_args(["--sampler", "random"])
    assert "sampler='random'" in capsys.readouterr().err

# The command's messages, in this process (`run_command`: as the console script's wrapper runs it, without seconds of imports)
def test_train_command_reports_missing_data(tmp_path):
    r = run_command(minbert_train, "--preset", "quick", "--data_dir", tmp_path / "nowhere", "--out", tmp_path / "r", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode != 0 and "minbert_train:" in r.stderr and "nowhere" in r.stderr

def test_gpu_preset_fails_clearly_offline(tmp_path):
    r = run_command(minbert_train, "--preset", "sbert-bert-base", "--out", tmp_path / "r", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode != 0 and "bert-base-uncased" in r.stderr and "Tried" in r.stderr

def test_extra_train_from_config(tmp_path, small_data):
    "A user adds an STS-like file through the config alone (columns mapped, label range 1-5 mapped onto 0-5)"
    f = tmp_path / "mine.csv"
    f.write_text("pid,left,right,score\n1,a dog runs,a dog is running,5\n2,a cat sleeps,stocks fell,1\n")
    from minbert_nb.run_data import build_data, read_extra
    from minbert_nb.pretrained import load_tokenizer
    df = read_extra(dict(task="sts", path=str(f), columns=dict(id="pid", sentence1="left", sentence2="right", label="score"), label_range=[1, 5]))
    assert df.label.tolist() == [5.0, 0.0] and df.id.tolist() == ["mine-1", "mine-2"]
    cfg = TrainConfig(tasks=("sts",), data_dir=str(small_data), extra_train=[dict(task="sts", path=str(f),
                      columns=dict(id="pid", sentence1="left", sentence2="right", label="score"), label_range=[1, 5])])
    data = build_data(cfg, load_tokenizer(), ("train",))
    assert len(data["train"]["sts"]) == N + 2 and str(f) in data["files"]["sts_train"]
    with pytest.raises(ValueError, match="missing key"): read_extra(dict(task="sts", path=str(f)))

def test_pair_swap_predictions_are_symmetric(tmp_path, small_data):
    "pair_swap: a cross-encoder trained on both orders predicts the mean over both, so swapping the sentences changes nothing"
    from minbert_nb.data import load_split
    from minbert_nb.loaders import TaskDataset, make_loader
    from minbert_nb.evaluate import predict_split
    from minbert_nb.pretrained import load_tokenizer
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), out=str(tmp_path), data_dir=str(small_data), pair_modes={"para": "cross", "sts": "cross"},
                        pair_swap=True, steps_per_epoch=3, epochs=1, batch_size=4, train_limit=24, dev_limit=24, predict_test=False)
    m = train(cfg, progress=False)
    assert 0 <= m["para_acc"] <= 1 and json.loads((tmp_path / "config.json").read_text())["pair_swap"] is True
    model, cfg = load_run(tmp_path)
    tok, df = load_tokenizer(), load_split("para", "dev", small_data).head(16)
    swapped = df.rename(columns={"sentence1": "sentence2", "sentence2": "sentence1"})
    raw = [predict_split(model, make_loader(TaskDataset(d, "para", tok, 96, pair_mode="cross", swap=True), 8))["raw"].to_numpy()
           for d in (df, swapped)]
    assert abs(raw[0] - raw[1]).max() < 1e-4
    one_order = predict_split(model, make_loader(TaskDataset(df, "para", tok, 96, pair_mode="cross"), 8))["raw"].to_numpy()
    assert abs(one_order - raw[0]).max() > 1e-6    # without the other order, the prediction is a different number

def test_sts_both_encoders(tmp_path, small_data):
    "pair_modes sts=both: STS is the mean of the cosine and the cross-encoder (both orders), so it is symmetric, and it trains and reloads"
    import torch
    from minbert_nb.data import load_split
    from minbert_nb.loaders import TaskDataset, make_loader, collate
    from minbert_nb.evaluate import predict_split
    from minbert_nb.losses import cosine_scores
    from minbert_nb.pretrained import load_tokenizer
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), out=str(tmp_path), data_dir=str(small_data), pair_modes={"para": "cross", "sts": "both"},
                        pair_swap=True, steps_per_epoch=3, epochs=1, batch_size=4, train_limit=24, dev_limit=24, predict_test=False)
    m = train(cfg, progress=False)
    assert -1 <= m["sts_corr"] <= 1
    model, rcfg = load_run(tmp_path)
    assert rcfg.pair_modes == {"para": "cross", "sts": "both"} and "sts" in model.heads
    tok, df = load_tokenizer(), load_split("sts", "dev", small_data).head(16)
    swapped = df.rename(columns={"sentence1": "sentence2", "sentence2": "sentence1"})
    raw = [predict_split(model, make_loader(TaskDataset(d, "sts", tok, 96, pair_mode="both", swap=True), 8))["raw"].to_numpy()
           for d in (df, swapped)]
    assert abs(raw[0] - raw[1]).max() < 1e-4
    ds = TaskDataset(df, "sts", tok, 96, pair_mode="both", swap=True)
    with torch.no_grad():
        out = model(collate([ds[i] for i in range(8)], "sts"))
    assert torch.allclose(out.pred, (out.parts[0] + out.parts[1]) / 2)
    assert not torch.allclose(out.parts[0], out.parts[1])                   # two different scorers

def test_ema_run_scores_and_saves_the_average(tmp_path, small_data):
    "--ema: the averaged weights are the run's model (best.pt, main columns); the raw weights' scores sit beside them"
    import torch
    from minbert_nb.checkpoint import load_checkpoint
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), out=str(tmp_path), data_dir=str(small_data), steps_per_epoch=4, epochs=1, batch_size=4,
                        train_limit=24, dev_limit=24, predict_test=False, ema=0.5)
    m = train(cfg, progress=False)
    hist = pd.read_csv(tmp_path / "history.csv")
    assert {"raw_overall", "raw_sst_acc", "overall"} <= set(hist.columns)
    assert m["ema"]["decay"] == 0.5 and set(m["ema"]["raw_weights"]) >= {"sst_acc", "overall"}
    best, last = load_checkpoint(tmp_path / "best.pt")["model"], load_checkpoint(tmp_path / "last.pt")
    names, shadow = last["ema"]["names"], last["ema"]["shadow"]
    assert last["ema"]["t"] == 4
    assert all(torch.equal(best[n], s.to(best[n].dtype)) for n, s in zip(names, shadow))        # best.pt holds the average
    assert any(not torch.equal(last["model"][n], best[n]) for n in names)                        # ... not the raw weights

def test_layer_decay_run_scales_the_backbone_groups(tmp_path, small_data):
    "--layer_decay: embeddings and each encoder layer below the top step at decay^depth of the backbone rate, heads at theirs"
    from minbert_nb.checkpoint import load_checkpoint
    cfg = preset_config("quick", backbone=tiny_backbone_dir(), out=str(tmp_path), data_dir=str(small_data), steps_per_epoch=2, epochs=1, batch_size=4,
                        train_limit=24, dev_limit=24, predict_test=False, layer_decay=0.5, warmup=0, schedule="constant")
    train(cfg, progress=False)
    groups = load_checkpoint(tmp_path / "last.pt")["optimizer"]["param_groups"]
    scales = sorted({g["lr_scale"] for g in groups})
    assert scales == [0.5 ** k for k in range(2, -1, -1)]                           # the tiny BERT: 2 layers + embeddings + top/heads
    base = {g["name"].split("@")[0]: g["lr"] / g["lr_scale"] for g in groups}
    assert all(abs(g["lr"] / g["lr_scale"] - base[g["name"].split("@")[0]]) < 1e-15 for g in groups)   # one schedule for all
    assert not any("@" in g["name"] for g in groups if g["name"].startswith("head"))
    hist = pd.read_csv(tmp_path / "history.csv")
    assert base["backbone"] == hist.lr.iloc[-1] == cfg.lr_backbone and base["head"] == cfg.lr_heads   # history: the undecayed rate
