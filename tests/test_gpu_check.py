"`minbert_gpu_check` on the CPU (tiny budget, gloo): every path runs and reports its figures, so the command cannot rot"
import json, os, subprocess, sys
import pytest

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

def _check(tmp_path, data, *flags):
    report = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "-m", "minbert_nb.gpu_check", "--device", "cpu", "--data_dir", str(data),
                        "--json", str(report), "--out", str(tmp_path / "runs"), *flags], capture_output=True, text=True, env=ENV, timeout=900)
    return p, (json.loads(report.read_text()) if report.is_file() else None)

def test_every_path_runs_on_cpu(tmp_path, small_data):
    p, r = _check(tmp_path, small_data)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    from minbert_nb.gpu_check import CHECK_PATHS
    assert list(r["paths"]) == list(CHECK_PATHS) and r["failed"] == [] and r["budget"] == "tiny"
    q = r["paths"]["quick"]
    for k in ("train_s", "steps_per_s", "sst_acc", "para_acc", "sts_corr", "overall", "data_time_s"): assert q[k] >= 0, k
    assert q["steps"] == 4 and q["gpu_busy"] is None                          # no CUDA kernels on a CPU
    assert r["paths"]["torchrun"]["dist_backend"] == "gloo"
    res = r["paths"]["resume"]; assert res["resumed"] and res["steps"] == 4 and 0 < res["stopped_at"] < 4
    c = r["paths"]["compile"]["compile"]
    assert c["backend"] == "aot_eager" and 1 <= c["graphs"] <= 15, c         # 3 kinds of forward x 1 length (32) x at most 5 frames
    assert r["paths"]["adamw"]["default_path"] == "fused" and r["paths"]["adamw"]["max_diff"] <= 1e-6
    assert r["paths"]["bench"]["minbert_train_tok_s"] > 0 and r["paths"]["bench"]["minbert_mfu"] is None
    assert all(r["paths"][f"peft-{m}"]["trainable"] < 1e6 for m in ("pal", "prefix", "adapter", "lora", "dora"))
    assert r["summary"]["passed"] == len(CHECK_PATHS) and f"gpu-check: {len(CHECK_PATHS)} passed, 0 failed" in p.stdout

def test_a_failing_path_fails_the_command(tmp_path, small_data):
    "eval alone has no run to score: the report says why, and the exit status is not 0"
    p, r = _check(tmp_path, small_data, "--paths", "eval")
    assert p.returncode != 0 and "1 path(s) failed: eval" in p.stderr
    assert r["failed"] == ["eval"] and "needs the quick run" in r["paths"]["eval"]["error"]
