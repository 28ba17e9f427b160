"Data-parallel training through torchrun (gloo, 2 CPU processes) matches a single process with the same global batch"
import json, os, shutil, subprocess, sys
from pathlib import Path
import pandas as pd, pytest, torch
from minbert_nb.checkpoint import load_checkpoint
from datapaths import tiny_backbone_dir

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
pytestmark = [pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed")]


def _args(out, data):
    # dropout off: the two runs then compute the same function; global batch 8 = 2 ranks x 4
    return ["--preset", "quick", "--backbone", tiny_backbone_dir(), "--out", str(out), "--data_dir", str(data), "--epochs", "2", "--steps_per_epoch", "4",
            "--batch_size", "8", "--train_limit", "40", "--dev_limit", "24", "--eval_batch_size", "24", "--checkpoint_every", "0",
            "--hidden_dropout", "0.0", "--attention_dropout", "0.0", "--head_dropout", "0.0", "--predict_test", "false", "--sampler", "simultaneous",
            "--amp", "off"]   # fp32: bf16 rounds a batch of 8 and two of 4 differently

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

def test_two_ranks_match_one_process(tmp_path, small_data):
    from minbert_nb.commands import minbert_train
    minbert_train(_args(tmp_path / "one", small_data))          # one process: this one (OMP_NUM_THREADS=1, as the ranks)
    two = subprocess.run([str(TORCHRUN), "--standalone", "--nproc_per_node=2", "-m", "minbert_nb.commands", *_args(tmp_path / "two", small_data)],
                         capture_output=True, text=True, env=ENV, timeout=600)
    assert two.returncode == 0, two.stdout + two.stderr
    assert "x 2 ranks" in two.stdout
    h1, h2 = (pd.read_csv(tmp_path / d / "history.csv") for d in ("one", "two"))
    print("train loss, 1 process:", h1.train_loss.tolist(), " 2 ranks:", h2.train_loss.tolist())
    assert (h1.train_loss - h2.train_loss).abs().max() < 1e-4
    w1, w2 = (load_checkpoint(tmp_path / d / "last.pt")["model"] for d in ("one", "two"))
    diff = max((w1[k].float() - w2[k].float()).abs().max().item() for k in w1)
    print(f"max |weight diff| after {h1.step.iloc[-1]} steps: {diff:.2e}")
    assert diff < 1e-4
    m2 = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert m2["world_size"] == 2 and not list((tmp_path / "two").glob("*.tmp*"))

def test_non_finite_loss_on_one_rank_stops_all_ranks(tmp_path, small_data):
    "A NaN loss on rank 1 only: both ranks stop at that step with a message (torchrun used to kill rank 0 mid-step, silently)"
    script = tmp_path / "nan_on_rank1.py"
    script.write_text("import os, torch\nimport minbert_nb.commands as T, minbert_nb.step as S\nreal, n = S.base_loss, [0]\n"
                      "def bad(*a, **k):\n    n[0] += 1; l = real(*a, **k)\n"
                      "    return l * float('nan') if os.environ['RANK'] == '1' and n[0] == 3 else l\n"
                      "S.base_loss = bad\nT.minbert_train()\n")
    args = ["round_robin" if a == "simultaneous" else a for a in _args(tmp_path / "run", small_data)]
    p = subprocess.run([str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(script), *args],
                       capture_output=True, text=True, env=ENV, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "non-finite loss" in out and "(rank 1)" in out and "on another rank at epoch 1, step 3/4" in out, out
