"""Review fixes, each with a test that failed before it: unsafe checkpoints, bf16 masks, grad_accum schedules, unknown
architectures, padding ids, one list per name, snake_case flags, and the message of a run without data"""
import json, os, socket, subprocess, sys, warnings
from dataclasses import asdict
from pathlib import Path
import pytest, torch
from minbert_nb.core import BertConfig, tiny_config, set_seed
from minbert_nb.bert import BertModel
from minbert_nb.attention import extended_attention_mask
from minbert_nb.checkpoint import load_checkpoint, UnsafeCheckpointError
from minbert_nb.multitask import ModelConfig, MultitaskBert, fake_batch, _pad_to
from minbert_nb.samplers import SCHEDULE_KINDS
import minbert_nb.train as T
import minbert_nb.commands as C
from datapaths import SAMPLE, run_command
from minbert_nb.config import TrainConfig, preset_config, TRAIN_SAMPLERS
from minbert_nb.train import train


class _Evil:
    "A pickle that runs a shell command when unpickled"
    def __init__(self, marker): self.marker = marker
    def __reduce__(self): return (os.system, (f"touch {self.marker}",))


def _run_cli(fn, args, env=None):
    "The console command `fn` with `args`, in this process as its console-script wrapper runs it (`run_command`): the messages are checked, not the process"
    return run_command(getattr(C, fn), *args, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})})


# ---------------------------------------------------------------- security

def test_malicious_checkpoint_is_refused_and_never_runs(tmp_path):
    marker = tmp_path/"pwned"
    evil = tmp_path/"evil.pt"; torch.save({"model": {}, "payload": _Evil(marker)}, evil)
    with pytest.raises(UnsafeCheckpointError, match=r"refused: the checkpoint carries objects other than tensors.*posix.system"):
        load_checkpoint(evil)
    assert not marker.exists()
    # the same file shared as a run folder: minbert_eval and minbert_train --resume refuse it, and nothing runs
    run = tmp_path/"run"; run.mkdir()
    (run/"config.json").write_text(json.dumps(asdict(TrainConfig(out=str(run)))))
    for f in ("best.pt", "last.pt"): (run/f).write_bytes(evil.read_bytes())
    r = _run_cli("minbert_eval", [str(run)])
    assert r.returncode != 0 and "refused" in r.stderr and "could run code" in r.stderr, r.stderr
    r = _run_cli("minbert_train", ["--resume", str(run), "--data_dir", str(SAMPLE)])
    assert r.returncode != 0 and "refused" in r.stderr, r.stderr
    assert not marker.exists()


# ---------------------------------------------------------------- numerics

@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_fully_masked_row_is_finite_under_bf16_autocast(impl):
    set_seed(0)
    m = BertModel(tiny_config(attn_implementation=impl)).eval()
    ids = torch.randint(1, 100, (2, 5)); am = torch.ones(2, 5, dtype=torch.long); am[1] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(ids, am, output_attentions=impl == "eager")
    assert torch.isfinite(out.last_hidden_state).all()
    assert not extended_attention_mask(am).isinf().any()


def test_grad_accum_schedule_covers_every_update(tmp_path, small_data, monkeypatch):
    "4 steps per epoch with grad_accum 3 take 2 updates per epoch; every one must run at a learning rate above zero"
    lrs = []
    step = T.AdamW.step
    def spy(self, *a, **k):
        lrs.append(self.param_groups[0]["lr"]); return step(self, *a, **k)
    monkeypatch.setattr(T.AdamW, "step", spy)
    cfg = TrainConfig(tasks=("sst",), out=str(tmp_path/"r"), data_dir=str(small_data), epochs=2, steps_per_epoch=4, grad_accum=3,
                      batch_size=2, train_limit=8, dev_limit=4, eval_batch_size=4, warmup=0.0, save_checkpoint=False)
    train(cfg, progress=False)
    assert len(lrs) == 4 and min(lrs) > 0, lrs          # 2 updates per epoch; the old plan had ceil(8 / 3) = 3


# ---------------------------------------------------------------- configs and names

def test_unknown_architecture_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="position_embedding_type='relative_key'"):
        BertConfig.from_dict({"position_embedding_type": "relative_key_query"[:12]})
    from minbert_nb.pretrained import embedded_backbone_path, load_bert
    src = embedded_backbone_path()
    for f in ("vocab.txt", "model.safetensors"): (tmp_path/f).symlink_to(src/f)
    cfg = json.loads((src/"config.json").read_text()); cfg["position_embedding_type"] = "relative_key"
    (tmp_path/"config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config.json: this checkpoint's architecture is not the one minBERT implements"):
        load_bert(tmp_path)


def test_padding_uses_the_checkpoints_pad_id():
    enc = dict(input_ids=torch.tensor([[5, 6]]), attention_mask=torch.ones(1, 2, dtype=torch.long), token_type_ids=torch.zeros(1, 2, dtype=torch.long))
    p = _pad_to(enc, 4, pad_id=9)
    assert p["input_ids"].tolist() == [[5, 6, 9, 9]] and p["attention_mask"].tolist() == [[1, 1, 0, 0]]
    assert p["token_type_ids"].tolist() == [[0, 0, 0, 0]]
    m = MultitaskBert(ModelConfig(), bert=BertModel(tiny_config(pad_token_id=3)))
    assert m.pad_id == 3


def test_one_list_per_name():
    assert set(TRAIN_SAMPLERS) == set(SCHEDULE_KINDS) - {"custom"}
    for k in TRAIN_SAMPLERS: TrainConfig(sampler=k)
    with warnings.catch_warnings():            # every spelling of the embedded backbone is recognised as the small model
        warnings.simplefilter("error")
        for name in ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2", "minilm", "embedded"):
            C._check_hardware(TrainConfig(backbone=name, device="cpu"))


@pytest.mark.parametrize("mod,fn,snake,kebab", [
    ("minbert_nb.fetch", "minbert_data", ["--base_url", "u", "--check"], ["--base-url", "u", "--check", "true"]),
    ("minbert_nb.bench", "minbert_bench", ["--batch_size", "4", "--skip_mfu"], ["--batch-size", "4", "--skip-mfu", "true"]),
    ("minbert_nb.predictor", "minbert_demo", ["--backbone", "x"], ["--backbone", "x"])])
def test_commands_take_snake_case_flags(mod, fn, snake, kebab):
    import importlib
    p = getattr(importlib.import_module(mod), fn).parser()
    assert vars(p.parse_args(snake)) == vars(p.parse_args(kebab))
    assert "--" + snake[0][2:] in p.format_help()


# ---------------------------------------------------------------- a machine without data

def test_train_without_data_offline_says_how_to_get_it(tmp_path):
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]   # nothing listens there: "offline"
    empty = tmp_path/"empty"; empty.mkdir()
    r = _run_cli("minbert_train", ["--preset", "quick", "--out", str(tmp_path/"run")],
                 env={"MINBERT_DATA": str(empty), "MINBERT_DATA_URL": f"http://127.0.0.1:{port}/"})
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("minbert_train: the training data is missing: ids-sst-train.csv"), err
    assert "could not be reached (offline?)" in err and "MINBERT_DATA" in err and "minbert_data --out DIR" in err
    assert not (tmp_path/"run").exists()
