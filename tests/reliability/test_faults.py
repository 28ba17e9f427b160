"""Faults a long run must survive: SIGKILL then --resume (bit-identical), SIGINT, non-finite numbers, bad configs and files"""
import json, os, signal, subprocess, sys, time
from contextlib import contextmanager
from pathlib import Path
import pytest, torch
from minbert_nb.config import TrainConfig, preset_config, config_from_args
from minbert_nb.train import train
from minbert_nb.checkpoint import load_checkpoint, TrainingInterrupted
from minbert_nb.evaluate import read_predictions
import minbert_nb.train as T
import minbert_nb.step as S
from datapaths import tiny_backbone_dir, run_command

ROOT = Path(__file__).resolve().parents[2]


def _args(out, data):
    return ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--out", str(out), "--data_dir", str(data), "--epochs", "2", "--steps_per_epoch", "10",
            "--batch_size", "4", "--train_limit", "40", "--dev_limit", "24", "--eval_batch_size", "24", "--checkpoint_every", "2",
            "--hidden_dropout", "0.1", "--predict_test", "false"]

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Subprocess timeouts guard against hangs only: a loaded 2-core machine can take minutes for a tiny run
TIMEOUT = 600

def _cli(args, **kw):
    return subprocess.Popen([sys.executable, "-c", "from minbert_nb.commands import minbert_train; minbert_train()", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, **kw)

def _here(args, capsys=None):
    "`minbert_train args` in this process (`run_command`): (exit status, what it printed, its exit message included)"
    from minbert_nb.commands import minbert_train
    r = run_command(minbert_train, *args)
    return r.returncode, r.stdout + r.stderr

@contextmanager
def _threads(n:int):
    "Run this process's torch ops on `n` threads (as ENV gives the subprocesses): sums over another thread count round differently"
    was = torch.get_num_threads(); torch.set_num_threads(n)
    try: yield
    finally: torch.set_num_threads(was)

def _wait_for_checkpoint(run, proc, min_step, timeout=TIMEOUT):
    "Poll last.pt until it holds at least `min_step` optimizer steps (it is written atomically, so reading is safe)"
    t = time.time()
    while time.time() - t < timeout:
        if proc.poll() is not None: raise AssertionError(f"the run ended before the fault was injected:\n{proc.stdout.read()}")
        if (run / "last.pt").exists():
            try:
                st = load_checkpoint(run / "last.pt")["progress"]
                if st["step"] >= min_step: return st
            except RuntimeError: pass
        time.sleep(0.02)
    raise AssertionError("no checkpoint appeared in time")

def _weights(path): return load_checkpoint(path)["model"]

# The run has best-offline's shape: SST phrases per pass, a second Quora file, contrastive batches, and STS scored by
# both encoders with pair_swap's random orders, and an average of the weights: every stream a plain `quick` run has, and
# more, to resume exactly. (A plain `quick` variant ran here too; it checked nothing this one does not and cost 33 s of CI.)
MORE_DATA = ["--sst_phrases", "true", "--phrase_min_tokens", "3", "--phrases_per_epoch", "10", "--quora_extra_2", "true",
             "--contrastive_weight", "1.0", "--contrastive_batch", "4", "--contrastive_every", "2",
             "--pair_modes", '{"para": "cross", "sts": "both"}', "--pair_swap", "true", "--ema", "0.99"]

def test_sigkill_then_resume_is_bit_identical(tmp_path, small_data, capsys):
    with _threads(int(ENV["OMP_NUM_THREADS"])):                                            # the reference, uninterrupted,
        rc, out = _here(_args(tmp_path / "ref", small_data) + MORE_DATA, capsys)          # on the killed run's thread count
    assert rc == 0, out
    run = tmp_path / "killed"
    p = _cli(_args(run, small_data) + MORE_DATA)
    st = _wait_for_checkpoint(run, p, min_step=4)
    p.send_signal(signal.SIGKILL); p.wait()
    assert p.returncode == -signal.SIGKILL and not (run / "metrics.json").exists()
    assert st["epoch"] == 1 and 0 < st["i"] < 10, st          # killed mid-epoch
    with _threads(int(ENV["OMP_NUM_THREADS"])): rc, out = _here(["--resume", str(run)], capsys)
    assert rc == 0, out
    assert "resuming" in out
    for f in ("last.pt", "best.pt"):
        a, b = _weights(tmp_path / "ref" / f), _weights(run / f)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"{f}: weights differ after resume"
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (tmp_path / "ref", run))
    for k in ("sst_acc", "para_acc", "sts_corr", "overall", "best_epoch"): assert ma[k] == mb[k], k
    assert mb["resumed"] is True
    ha, hb = (json.loads(json.dumps(__import__("pandas").read_csv(d / "history.csv")[["train_loss", "overall"]].values.tolist()))
              for d in (tmp_path / "ref", run))
    assert ha == hb

# (a stop by SIGINT / SIGTERM, its checkpoint and its exit status: test_folders.py)

def test_non_finite_loss_stops_with_details_and_keeps_last_good(tmp_path, small_data, monkeypatch):
    calls, real = {"n": 0}, S.base_loss          # the training step's loss of one task batch (08b_step)
    def bad_loss(*a, **k):
        calls["n"] += 1
        l = real(*a, **k)
        return l * float("nan") if calls["n"] == 5 else l
    monkeypatch.setattr(S, "base_loss", bad_loss)
    cfg = config_from_args(_args(tmp_path, small_data) + ["--checkpoint_every", "1"])
    with pytest.raises(FloatingPointError) as e: train(cfg, progress=False)
    msg = str(e.value)
    assert "non-finite loss" in msg and "epoch 1, step 5/10" in msg and "task" in msg and "batch ids [" in msg and "last.pt" in msg
    assert load_checkpoint(tmp_path / "last.pt")["progress"]["step"] == 4          # the last good state

def test_non_finite_gradient_stops(tmp_path, small_data, monkeypatch):
    real = S.base_loss
    def bad_grad(task, out, *a, **k):
        p = out.pred
        return real(task, out, *a, **k) + torch.sqrt((p - p.detach()).abs().sum())   # value 0, gradient NaN
    monkeypatch.setattr(S, "base_loss", bad_grad)
    with pytest.raises(FloatingPointError, match=r"non-finite gradient norm .* epoch 1, step 1/10"):
        train(config_from_args(_args(tmp_path, small_data)), progress=False)

def test_resume_refuses_another_config(tmp_path, small_data, capsys):
    run = tmp_path / "r"
    p = _cli(_args(run, small_data)); _wait_for_checkpoint(run, p, 2); p.send_signal(signal.SIGKILL); p.wait()
    rc, out = _here(["--resume", str(run), "--pooling", "cls", "--lr_backbone", "1e-3"], capsys)
    assert rc != 0 and "different config" in out and "pooling: checkpoint 'mean', now 'cls'" in out and "lr_backbone" in out
    rc, out = _here(_args(run, small_data), capsys)                       # a new run into a used folder
    assert rc != 0 and f"--resume {run}" in out

def test_a_resumed_run_keeps_the_precision_it_began_in(tmp_path, small_data, capsys, monkeypatch):
    "`amp auto` decides per machine (00_core): a run begun in bf16 and resumed where auto means fp32 goes on in bf16, and says so"
    run = tmp_path / "r"
    cfg = config_from_args(_args(run, small_data) + ["--epochs", "1", "--steps_per_epoch", "4"])
    monkeypatch.setenv("MINBERT_CPU_BF16", "1")                       # a machine whose CPU has native bf16
    with pytest.raises(TrainingInterrupted): train(cfg, progress=False, on_step=lambda info: info["step"] >= 2)   # stopped after 2 steps
    assert load_checkpoint(run / "last.pt")["precision"] == "bfloat16"
    monkeypatch.setenv("MINBERT_CPU_BF16", "0")                       # "another machine": auto would choose fp32 here
    rc, out = _here(["--resume", str(run)], capsys)
    assert rc == 0, out
    assert "began in bfloat16, and continues in it (amp=auto would choose fp32" in out, out
    from minbert_nb.core import cpu_has_native_bf16
    assert ("on a CPU without native bf16" in out) == (not cpu_has_native_bf16()), out   # what bf16 costs here is said
    assert json.loads((run / "metrics.json").read_text())["amp"] == "bfloat16"
    assert set(__import__("pandas").read_csv(run / "history.csv")["amp"]) == {"bfloat16"}

def test_resume_needs_a_run_folder(tmp_path, capsys):
    with pytest.raises(SystemExit): config_from_args(["--resume", str(tmp_path)])
    assert "config.json: not found" in capsys.readouterr().err

# (--config files that are not what they should be: test_settings.py)

@pytest.mark.parametrize("body,task,expect", [
    ("", "sst", "p.csv:1: the file is empty"),
    ("id \t Predicted_Is_Paraphrase \nx , 1 \n", "sst", "p.csv:1: header"),
    ("id \t Predicted_Sentiment \nx , 1 \ny , 7 \n", "sst", "p.csv:3: prediction '7' is not a whole number in 0..4"),
    ("id \t Predicted_Similiarity \nx , 5.5 \n", "sts", "p.csv:2: prediction '5.5' is not a number in 0..5"),
    ("id \t Predicted_Sentiment \nx , 1 \nx , 2 \n", "sst", "p.csv:3: duplicate id 'x' (first on line 2)"),
    ("id \t Predicted_Sentiment \nx ; 1 \n", "sst", "p.csv:2: expected 'id , prediction'"),
    ("id \t Predicted_Sentiment \n", "sst", "no predictions after the header"),
])
def test_prediction_file_errors(tmp_path, body, task, expect):
    f = tmp_path / "p.csv"; f.write_text(body)
    with pytest.raises(ValueError) as e: read_predictions(f, task)
    assert expect in str(e.value)

def test_prediction_file_not_utf8(tmp_path):
    f = tmp_path / "p.csv"; f.write_bytes(b"id \t Predicted_Sentiment \nx\xe9 , 1 \n")
    with pytest.raises(ValueError, match="not UTF-8"): read_predictions(f, "sst")

def test_skip_bad_rows_is_counted_in_the_run(tmp_path, small_data, capsys):
    "A bad row stops the run with file and line; --skip_bad_rows skips it, prints and stores the count"
    import shutil
    d = tmp_path / "data"; shutil.copytree(small_data, d)
    f = d / "cs224n" / "ids-sst-train.csv"
    lines = f.read_text().splitlines(keepends=True); lines.insert(3, "99\tbadid\tA broken row .\tfive\n"); f.write_text("".join(lines))
    args = _args(tmp_path / "a", d) + ["--epochs", "1", "--steps_per_epoch", "2"]
    rc, out = _here(args, capsys)
    assert rc != 0 and "ids-sst-train.csv:4: label 'five' is not one of the classes of task sst" in out and "--skip-bad-rows" in out
    rc, out = _here(_args(tmp_path / "b", d) + ["--epochs", "1", "--steps_per_epoch", "2", "--skip_bad_rows", "true"], capsys)
    assert rc == 0, out
    assert "skipped 1 bad data row" in out
    m = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert m["skipped_rows"] == 1 and m["train_files"]["sst_train_skipped_rows"] == 1
