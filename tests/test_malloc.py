"""A training command on a CPU starts itself again with jemalloc where it is installed (00_core: `restart_with_jemalloc`),
as a user runs it (its console script, a process of its own), and `metrics.json` says which allocator the run had.
The suite sets MINBERT_MALLOC=glibc for the processes it starts (conftest.py); this test lifts it."""
import json, os, subprocess, sys
import pytest
from minbert_nb.core import find_jemalloc
from minbert_nb.pretrained import tiny_backbone

@pytest.mark.skipif(find_jemalloc() is None, reason="jemalloc is not installed (Debian, Ubuntu: apt-get install libjemalloc2)")
def test_a_cpu_training_command_restarts_itself_with_jemalloc(tmp_path, small_data):
    script = tmp_path / "minbert_train"                     # what pip's console-script wrapper does
    script.write_text("import sys\nfrom minbert_nb.commands import minbert_train\nsys.exit(minbert_train())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MINBERT_MALLOC", "LD_PRELOAD", "_MINBERT_MALLOC_RESTARTED", "MALLOC_CONF")}
    out = tmp_path / "run"
    args = ["--preset", "quick", "--backbone", str(tiny_backbone(tmp_path / "tiny")), "--out", str(out), "--data_dir", str(small_data),
            "--device", "cpu", "--epochs", "1", "--steps_per_epoch", "2", "--batch_size", "4", "--train_limit", "24", "--dev_limit", "16",
            "--predict_test", "false", "--save_checkpoint", "false"]
    r = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert json.loads((out / "metrics.json").read_text())["malloc"] == "jemalloc"
    assert r.stdout.count("dev: sst_acc=") == 1                                   # one training: the first start trained nothing

def test_a_training_called_in_a_process_keeps_its_allocator(tmp_path, small_data):
    "Called as a function (a notebook, a test) nothing restarts: the run records the allocator of the process it ran in"
    from datapaths import run_command
    from minbert_nb.commands import minbert_train
    from minbert_nb.core import cpu_malloc
    out = tmp_path / "run"
    p = run_command(minbert_train, "--preset", "quick", "--backbone", tiny_backbone(tmp_path / "tiny"), "--out", out, "--data_dir", small_data,
                    "--device", "cpu", "--epochs", "1", "--steps_per_epoch", "2", "--batch_size", "4", "--train_limit", "24", "--dev_limit", "16",
                    "--predict_test", "false", "--save_checkpoint", "false", env={"MINBERT_MALLOC": ""})
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((out / "metrics.json").read_text())["malloc"] == cpu_malloc()
