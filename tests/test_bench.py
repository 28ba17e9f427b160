"The benchmark returns every figure, the FLOPs formula is right, and `minbert_bench` writes its JSON file"
import json, os, subprocess, sys
import pytest
from datapaths import SAMPLE, run_command
from minbert_nb.core import BertConfig, tiny_config
from minbert_nb.bench import (bench_models, bench_mfu, model_flops_per_token, nonembedding_params, gpu_peak_bf16_flops,
                              time_interleaved, format_table)

KEYS = ["device", "backbone", "dtype", "batch_size", "seq_len", "threads", "torch_version", "transformers_version",
        "minbert_forward_sent_s", "hf_forward_sent_s", "forward_ratio", "minbert_train_sent_s", "hf_train_sent_s", "train_ratio",
        "minbert_peak_mem_mb", "hf_peak_mem_mb", "adamw_minbert_step_ms", "adamw_torch_step_ms", "adamw_ratio"]

@pytest.fixture(scope="module")
def tiny_result():
    return bench_models(config=tiny_config(vocab_size=30522), batch_size=4, max_length=16, device="cpu", warmup=1, reps=2, data_dir=str(SAMPLE))

def test_bench_models_figures(tiny_result):
    r = tiny_result
    missing = [k for k in KEYS if k not in r]
    assert not missing, missing
    for k in KEYS:
        if k.endswith(("_s", "_mb", "_ms", "_ratio")): assert r[k] > 0, k
    assert r["forward_ratio"] == pytest.approx(r["minbert_forward_sent_s"] / r["hf_forward_sent_s"])
    assert r["train_ratio"] == pytest.approx(r["minbert_train_sent_s"] / r["hf_train_sent_s"])
    assert r["minbert_train_sent_s"] == pytest.approx(r["batch_size"] / r["minbert_train_s"])
    assert len(r["minbert_train_times_s"]) == 2 and (r["batch_size"], r["dtype"], r["device"]) == (4, "fp32", "cpu")
    assert "train step" in format_table(r)

def test_bench_models_refuses_bad_input():
    with pytest.raises(ValueError, match="dtype"): bench_models(dtype="fp16", device="cpu")
    with pytest.raises(ValueError, match="vocab_size"):
        bench_models(config=tiny_config(), batch_size=2, max_length=8, device="cpu", warmup=0, reps=1, data_dir=str(SAMPLE))

def test_interleaved_order():
    calls = []
    t = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=1, reps=3)
    assert calls == list("ababba" + "ab") and [len(v) for v in t.values()] == [3, 3]

def test_flops_per_token_bert_base():
    H, I, L, T = 768, 3072, 12, 128
    per_layer = 3 * (H * H + H) + (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H
    assert nonembedding_params(BertConfig()) == L * per_layer == 85_054_464
    assert model_flops_per_token(BertConfig(), T) == 6 * L * per_layer + 12 * L * H * T == 524_482_560

def test_mfu_needs_a_known_gpu():
    assert gpu_peak_bf16_flops("Some Unknown Accelerator") is None
    assert gpu_peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12 and gpu_peak_bf16_flops("NVIDIA H200") == 989e12
    r = bench_mfu(tiny_config(), batch_size=2, seq_len=8, device="cpu", dtype="fp32", warmup=0, reps=1, memory=False)
    assert r["minbert_mfu"] is None and r["hf_mfu"] is None and r["minbert_train_tok_s"] > 0

def test_cli_writes_json(tmp_path):
    "The command as its console script runs it (`run_command`: `sys.exit(minbert_bench(args))`, in this process)"
    from minbert_nb.bench import minbert_bench
    out = tmp_path / "bench.json"
    p = run_command(minbert_bench, "--batch-size", "2", "--max-length", "8", "--warmup", "0", "--reps", "1",
                    "--threads", "1", "--device", "cpu", "--json", out, "--data_dir", SAMPLE, env={"HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]   # the command returns None, so the exit status is 0
    r = json.loads(out.read_text())
    for k in ("train_ratio", "forward_ratio", "minbert_train_sent_s", "hf_train_sent_s", "minbert_peak_mem_mb", "hf_peak_mem_mb", "device"):
        assert k in r, k
    assert r["train_ratio"] == pytest.approx(r["minbert_train_sent_s"] / r["hf_train_sent_s"]) and r["threads"] == 1
    assert "ratio" in p.stdout and "wrote" in p.stdout


def test_mpnet_backbone_against_transformers_mpnet(tmp_path, capsys):
    "A tiny MPNet folder on the command line (run in this process: the console script is checked above): minBERT's MPNetModel against transformers' (eager attention), fp32 and bf16"
    from minbert_nb.bert import tiny_mpnet_config
    from minbert_nb.pretrained import tiny_backbone
    from minbert_nb.bench import minbert_bench
    folder = tiny_backbone(tmp_path / "tiny-mpnet", tiny_mpnet_config(vocab_size=30527, max_position_embeddings=514))
    out = tmp_path / "bench.json"
    minbert_bench(["--backbone", str(folder), "--dtype", "both", "--rounds", "1", "--batch-size", "2", "--max-length", "8", "--warmup", "0",
                   "--reps", "1", "--threads", "1", "--device", "cpu", "--json", str(out), "--data_dir", str(SAMPLE)])
    r = json.loads(out.read_text())
    assert (r["hf_class"], r["hf_attn"], r["backbone"]) == ("MPNetModel", "eager", str(folder))
    assert all(v > 0 for k in ("minbert", "hf") for dt in ("fp32", "bf16") for v in r[f"{k}_{dt}_train_sent_s"])
    assert "HF: transformers' MPNetModel (eager attention)" in capsys.readouterr().out
    one = bench_models(str(folder), batch_size=2, max_length=8, device="cpu", warmup=0, reps=1, memory=False, adamw=False, data_dir=str(SAMPLE))
    assert format_table(one).startswith(f"minBERT vs transformers {one['transformers_version']} MPNetModel (eager) |")
    with pytest.raises(ValueError, match="needs MPNet's tokenizer"):
        bench_models(config=tiny_mpnet_config(vocab_size=30527), batch_size=2, max_length=8, device="cpu", data_dir=str(SAMPLE))
