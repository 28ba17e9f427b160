"`minbert_gpu_check` on the CPU (tiny budget, gloo): every path runs and reports its figures, so the command cannot rot"
import json
import pytest
from datapaths import run_command

def _check(tmp_path, data, *flags):
    "`minbert_gpu_check` in this process (`run_command`; its torchrun path still starts processes of its own), and its report"
    from minbert_nb.gpu_check import minbert_gpu_check
    report = tmp_path / "report.json"
    p = run_command(minbert_gpu_check, "--device", "cpu", "--data_dir", data, "--json", report, "--out", tmp_path / "runs", *flags,
                    env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return p, (json.loads(report.read_text()) if report.is_file() else None)

def test_every_path_runs_on_cpu(tmp_path, small_data):
    p, r = _check(tmp_path, small_data)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    from minbert_nb.gpu_check import CHECK_PATHS
    assert list(r["paths"]) == list(CHECK_PATHS) and r["failed"] == [] and r["budget"] == "tiny" and r["deadline_s"] is None
    q = r["paths"]["quick"]
    for k in ("train_s", "steps_per_s", "sst_acc", "para_acc", "sts_corr", "overall", "data_time_s"): assert q[k] >= 0, k
    assert q["steps"] == 4 and "gpu_busy" not in q                           # the timed run has no profiler
    assert json.loads((tmp_path / "runs" / "quick" / "config.json").read_text())["checkpoint_every"] == 0   # nor a checkpoint inside its loop
    st = r["paths"]["static"]                                                # the static step: eagerly on a CPU, beside quick
    assert (st["cuda_graphs"], st["captures"], st["graph_steps"], st["eager_steps"], st["steps"]) == (False, 0, 0, 4, 4), st
    assert abs(st["quick_overall_diff"]) <= 0.05 and st["speedup_vs_quick"] > 0 and r["summary"]["static_train_s"] == st["train_s"]
    gr = r["paths"]["graphs"]; assert gr["graphs_max_diff"] == 0.0 and gr["trained_max_change"] > 0   # with graphs and without: both eager on a CPU
    assert r["python"].count(".") == 2 and "minbert_nb" in r["code"]
    fp = r["paths"]["fastpath"]                                              # the fused epilogues (aot_eager here: the eager operations, traced)
    assert fp["fused_blocks"] == 6 and fp["max_diff"] == 0.0 and fp["residual_ln_eager_mb"] > fp["residual_ln_fused_mb"] > 0
    assert fp["varlen_kernel"] is False and fp["varlen_max_diff"] < 1e-5 and fp["attn_varlen_ms"] > 0   # the reference loop on a CPU
    assert abs(fp["quick_overall_diff"]) <= 0.05, fp    # beside the quick section's run (16 dev rows a task here: one row moves overall by 0.02)
    ce = r["paths"]["ceilings"]; assert ce["matmul_tiny_64_tflops"] > 0 and ce["copy_gb_s"] > 0 and ce["launch_graph_us"] is None
    tl = r["paths"]["timeline"]; assert tl["steps"] == tl["static_steps"] == 4 and 0 < tl["host_ms_median"] <= tl["host_ms_p90"]
    pr = r["paths"]["profile"]; assert (pr["profiled_steps"], pr["gpu_busy"], pr["kernels_per_step"]) == (2, None, None)   # no CUDA kernels on a CPU
    assert (pr["static_profiled_steps"], pr["static_gpu_busy"]) == (2, None) and tl["static_host_ms_median"] > 0
    mf = r["paths"]["mfu"]; assert mf["entries"] == 1 and mf["minbert_mfu"] is None and mf["grid"][0]["minbert_train_tok_s"] > 0
    assert r["paths"]["torchrun"]["dist_backend"] == "gloo"
    res = r["paths"]["resume"]; assert res["resumed"] and res["steps"] == 4 and 0 < res["stopped_at"] < 4
    c = r["paths"]["compile"]["compile"]
    assert c["backend"] == "aot_eager" and 1 <= c["graphs"] <= 15, c         # 3 kinds of forward x 1 length (32) x at most 5 frames
    assert r["paths"]["adamw"]["default_path"] == "fused" and r["paths"]["adamw"]["max_diff"] <= 1e-6
    assert r["paths"]["bench"]["minbert_train_sent_s"] > 0
    assert all(r["paths"][f"peft-{m}"]["trainable"] < 1e6 for m in ("pal", "prefix", "adapter", "lora", "dora"))
    assert r["summary"]["passed"] == len(CHECK_PATHS)
    tail = p.stdout.rstrip().splitlines()[-(len(CHECK_PATHS) + 4):]          # the summary comes last, one line a section
    assert tail[0].startswith("gpu-check on ") and tail[-2] == f"{len(CHECK_PATHS)} passed, 0 failed, 0 skipped" and len(tail) <= 41

def test_a_failing_path_fails_the_command(tmp_path, small_data, capsys):
    "eval alone has no run to score: the report says why, and the command exits with a message (in this process: the one above runs the command's own)"
    from minbert_nb.gpu_check import minbert_gpu_check
    report = tmp_path / "report.json"
    with pytest.raises(SystemExit, match="1 path\\(s\\) failed: eval"):
        minbert_gpu_check(["--device", "cpu", "--data_dir", str(small_data), "--json", str(report), "--out", str(tmp_path / "runs"), "--paths", "eval"])
    r = json.loads(report.read_text())
    assert r["failed"] == ["eval"] and "needs the quick run" in r["paths"]["eval"]["error"]
    assert "eval         FAILED" in capsys.readouterr().out

def test_the_static_sections_run_in_a_process_of_their_own(tmp_path, small_data, monkeypatch):
    """On CUDA the static step's sections run in a fresh process, since a failed graph recording leaves its process unable
    to draw dropout masks; forced here on a CPU. A section's figures come back from its child, and a child's error comes
    back named; the static and graphs sections go through the same door (their figures in-process: the test above)"""
    import torch
    from minbert_nb import gpu_check
    from minbert_nb.gpu_check import CheckRun, check_static, check_graphs, check_eval, _timeline
    c = CheckRun(torch.device("cpu"), "tiny", tmp_path, data_dir=str(small_data), fresh=True)
    assert c.isolated(_timeline, "timeline-static", static_step=True)["steps"] == 4          # a real child, its figures back
    with pytest.raises(RuntimeError, match="in its own process: FileNotFoundError: needs the quick run"): c.isolated(check_eval)
    sent = []                                                                                # which sections take that door
    monkeypatch.setattr(gpu_check, "in_fresh_process", lambda fn, *a, **kw: sent.append(fn.__name__) or {"from": fn.__name__})
    assert (check_static(c), check_graphs(c)) == ({"from": "_check_static"}, {"from": "graphs_vs_eager"})
    assert sent == ["_check_static", "graphs_vs_eager"]
    assert CheckRun(torch.device("cpu"), "tiny", tmp_path / "b", data_dir=str(small_data)).fresh is False   # off CUDA, by default: in this process
