"""Settings that cannot make sense are refused by `TrainConfig` (and `minbert_train`) in one line naming the flag, the value
and the valid range, before anything is built or written; damaged config files give one line naming the file"""
import json, math, os, typing
from dataclasses import asdict, fields
from pathlib import Path
import pytest
from minbert_nb.config import (TrainConfig, FIELD_RANGES, PRESETS, preset_config, saved_config, config_from_args,
                               parse_train_args, backbone_positions)
from minbert_nb.phases import phase_configs

ROOT = Path(__file__).resolve().parents[2]


def _numeric_fields() -> list:
    "`(name, whole)` for every int or float field of TrainConfig (Optional ones included), from the dataclass itself"
    hints, out = typing.get_type_hints(TrainConfig), []
    for f in fields(TrainConfig):
        allowed = typing.get_args(hints[f.name]) or (hints[f.name],)
        if {int, float} & set(allowed): out.append((f.name, int in allowed and float not in allowed))
    return out

NUMERIC = _numeric_fields()


def _outside(r, whole:bool) -> list:
    "Values just outside `Range` r: below its low end and above its high end"
    out = []
    if r.lo is not None: out.append(r.lo if r.ends[0] == "(" else r.lo - 1)
    if r.hi is not None: out.append(r.hi if r.ends[1] == ")" else r.hi + 1)
    return [int(v) if whole else float(v) for v in out]


def _one_line_naming(msg:str, name:str):
    assert "\n" not in msg.strip(), f"not one line: {msg!r}"
    assert f"--{name} " in msg or f"--{name}:" in msg, f"{msg!r} does not name --{name}"


def test_numeric_fields_are_found():
    names = {n for n, _ in NUMERIC}
    assert {"lr_backbone", "max_length", "train_limit", "hidden_dropout", "lora_dropout", "pal_heads", "grad_clip"} <= names
    assert len(NUMERIC) >= 50


@pytest.mark.parametrize("name,whole", NUMERIC, ids=[n for n, _ in NUMERIC])
def test_every_numeric_field_has_a_range_that_is_enforced(name, whole):
    assert name in FIELD_RANGES, f"numeric field {name} has no declared range: add it to the table of its class (FIELD_RANGES)"
    r = FIELD_RANGES[name]
    bad = _outside(r, whole)
    assert bad, f"{name}: its range {r} has no bound"
    for v in bad + ([math.nan, math.inf] if not whole else []):
        with pytest.raises(ValueError) as e: TrainConfig(**{name: v})
        _one_line_naming(str(e.value), name)
        assert r.describe(whole) in str(e.value) or name == "max_length"


def test_no_range_for_a_field_that_is_not_numeric():
    assert set(FIELD_RANGES) == {n for n, _ in NUMERIC}


@pytest.mark.parametrize("name,whole", NUMERIC, ids=[n for n, _ in NUMERIC])
def test_closed_ends_are_accepted(name, whole):
    r = FIELD_RANGES[name]
    for v, closed in ((r.lo, r.ends[0] == "["), (r.hi, r.ends[1] == "]")):
        if v is None or not closed: continue
        kw = {name: int(v) if whole else float(v)}
        if name == "distill_weight" and v: kw["distill_from"] = "runs/x"
        if name == "contrastive_weight" and not v: continue
        assert getattr(TrainConfig(**kw), name) == v


@pytest.mark.parametrize("argv,expect", [
    (["--lr_backbone", "-0.001"], "--lr_backbone -0.001: expected a number >= 0 (a learning rate)."),
    (["--hidden_dropout", "1.5"], "--hidden_dropout 1.5: expected a probability in [0, 1)."),
    (["--grad_clip", "-1"], "--grad_clip -1.0: expected a number >= 0"),
    (["--warmup", "-5"], "--warmup -5.0: expected a number >= 0"),
    (["--max_length", "0"], "--max_length 0: expected a whole number >= 3"),
    (["--max_length", "100000"], "--max_length 100000: expected a whole number in [3, 512]"),
    (["--train_limit", "0"], "--train_limit 0: expected a whole number >= 1."),
    (["--preset", "quick", "--lora_dropout", "1"], "--lora_dropout 1.0: expected a probability in [0, 1)."),
    (["--task_weights", '{"qura": 0.5}'], "--task_weights {\"qura\": 0.5}: 'qura' is not a task"),
    (["--schedule", "bogus"], "--schedule 'bogus': expected one of linear, noam, constant."),
    (["--tasks", "sst", "--pcgrad"], "--pcgrad: PCGrad projects"),
])
def test_command_line_refuses_in_one_line(argv, expect, capsys):
    with pytest.raises(SystemExit) as e: config_from_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith("minbert_train: error: ") and expect in line, err
    assert err.count("error:") == 1


# --- each finding of the issue

@pytest.mark.parametrize("name", ["lr_backbone", "lr_heads", "lr_adapters"])
def test_negative_learning_rates(name):
    with pytest.raises(ValueError, match=f"--{name} -0.001: expected a number >= 0 \\(a learning rate\\)"): TrainConfig(**{name: -1e-3})
    assert getattr(TrainConfig(**{name: 0.0}), name) == 0.0   # a frozen group is allowed


def test_negative_grad_clip_warmup_weight_decay():
    with pytest.raises(ValueError, match="--grad_clip -1.0"): TrainConfig(grad_clip=-1)
    with pytest.raises(ValueError, match="--warmup -5.0"): TrainConfig(warmup=-5)
    with pytest.raises(ValueError, match="--weight_decay -0.01"): TrainConfig(weight_decay=-0.01)
    assert (TrainConfig(grad_clip=None).grad_clip, TrainConfig(grad_clip=0).grad_clip, TrainConfig(warmup=500).warmup) == (None, 0.0, 500.0)


def test_max_length_bounds():
    for v in (0, 1, 2, -5):
        with pytest.raises(ValueError, match=f"--max_length {v}: expected a whole number >= 3"): TrainConfig(max_length=v)
    with pytest.raises(ValueError, match=r"--max_length 100000: expected a whole number in \[3, 512\].*cross-encoder pair counts both"):
        TrainConfig(max_length=100000)
    assert TrainConfig(max_length=512).max_length == 512 and backbone_positions(None) == 512
    with pytest.raises(ValueError, match=r"\[3, 512\]"): TrainConfig(max_length=513, backbone="bert-base-uncased")   # a known hub id
    assert TrainConfig(max_length=5000, backbone="no-such-org/no-such-bert").max_length == 5000   # unknown offline: left to the build


def test_max_length_from_a_local_backbone_folder(tmp_path):
    (tmp_path/"config.json").write_text(json.dumps(dict(max_position_embeddings=64, hidden_size=32)))
    assert backbone_positions(tmp_path) == 64
    assert TrainConfig(backbone=str(tmp_path), max_length=64).max_length == 64
    with pytest.raises(ValueError, match=r"--max_length 65: expected a whole number in \[3, 64\]"): TrainConfig(backbone=str(tmp_path), max_length=65)


@pytest.mark.parametrize("model_type, pad, usable", [("mpnet", 1, 512), ("roberta", 1, 512), ("xlm-roberta", None, 512), ("mpnet", 0, 513), ("bert", 0, 514)])
def test_max_length_counts_positions_from_the_padding_row(tmp_path, model_type, pad, usable):
    "MPNet and RoBERTa number positions from pad_token_id + 1: a 514-row table holds 512 tokens (pad_token_id 1 when unset)"
    (tmp_path/"config.json").write_text(json.dumps(dict(model_type=model_type, max_position_embeddings=514, **({} if pad is None else dict(pad_token_id=pad)))))
    assert backbone_positions(tmp_path) == usable
    assert TrainConfig(backbone=str(tmp_path), max_length=usable).max_length == usable
    with pytest.raises(ValueError, match=rf"--max_length {usable + 1}: expected a whole number in \[3, {usable}\]"):
        TrainConfig(backbone=str(tmp_path), max_length=usable + 1)


def test_max_length_of_an_installed_backbone(tmp_path, monkeypatch):
    "An installed backbone named by its name (or hub id) is read from its folder; not installed, the build says how to install it"
    from minbert_nb.pretrained import tiny_backbone
    from minbert_nb.bert import tiny_mpnet_config
    tiny_backbone(tmp_path/"all-mpnet-base-v2", tiny_mpnet_config(vocab_size=30527, max_position_embeddings=514))
    monkeypatch.setenv("MINBERT_BACKBONES", str(tmp_path))
    assert backbone_positions("sentence-transformers/all-mpnet-base-v2") == 512
    with pytest.raises(ValueError, match=r"--max_length 513: expected a whole number in \[3, 512\]"): TrainConfig(backbone="all-mpnet-base-v2", max_length=513)
    monkeypatch.setenv("MINBERT_BACKBONES", str(tmp_path/"elsewhere"))
    assert backbone_positions("all-mpnet-base-v2") is None and TrainConfig(backbone="all-mpnet-base-v2", max_length=513).max_length == 513


@pytest.mark.parametrize("name", ["hidden_dropout", "attention_dropout", "head_dropout", "lora_dropout"])
def test_dropouts_are_probabilities(name):
    for v in (1.5, 1.0, -0.1):
        with pytest.raises(ValueError, match=f"--{name} {v}: expected a probability in \\[0, 1\\)"): TrainConfig(**{name: v})
    assert getattr(TrainConfig(**{name: 0.0}), name) == 0.0


def test_train_and_dev_limit_zero():
    with pytest.raises(ValueError, match="--train_limit 0: expected a whole number >= 1"): TrainConfig(train_limit=0)
    with pytest.raises(ValueError, match="--dev_limit 0: expected a whole number >= 1"): TrainConfig(dev_limit=0)
    assert TrainConfig(train_limit=None, dev_limit=1).dev_limit == 1


def test_task_weight_keys_and_values():
    with pytest.raises(ValueError, match="'qura' is not a task; expected keys among sst, para, sts, cfimdb, sick"): TrainConfig(task_weights={"qura": 0.5})
    with pytest.raises(ValueError, match="--task_weights .*para: expected a number >= 0"): TrainConfig(task_weights={"para": -1})
    with pytest.raises(ValueError, match="--upweight .*'quora' is not a task"): TrainConfig(sampler="sqrt", upweight={"quora": 2})
    assert TrainConfig(task_weights={"para": 0.5, "sts": 0}).task_weights == {"para": 0.5, "sts": 0}


def test_pcgrad_needs_two_tasks_in_the_run():
    with pytest.raises(ValueError, match="--pcgrad: .* trains one task \\(sst\\)"): TrainConfig(tasks="sst", pcgrad=True)
    with pytest.raises(ValueError, match="--pcgrad"): TrainConfig(tasks="para", pcgrad=True, sampler="simultaneous")
    # a one-task phase inside a multitask phased run is fine: seed 004's Concat+SMART+Surgery+Pretrain
    run = preset_config("opt-para-pre", pcgrad=True)
    (n1, p1), (n2, p2) = phase_configs(run)
    assert p1.tasks == ("para",) and p1.pcgrad and len(p2.tasks) == 3
    assert TrainConfig(tasks="para", model_tasks=("sst", "para", "sts"), pcgrad=True).pcgrad


def test_schedule_is_checked_in_the_config():
    with pytest.raises(ValueError, match="--schedule 'bogus': expected one of linear, noam, constant"): TrainConfig(schedule="bogus")


def test_home_is_expanded_in_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    c = TrainConfig(out="~/x", data_dir="~/data", backbone="~/bert", distill_from="~/t1, previous", distill_weight=1.0,
                    phases="~/phases.json", extra_train=[{"task": "sts", "path": "~/more.tsv", "columns": {}}])
    assert (c.out, c.data_dir, c.backbone, c.phases) == (f"{tmp_path}/x", f"{tmp_path}/data", f"{tmp_path}/bert", f"{tmp_path}/phases.json")
    assert c.distill_from == f"{tmp_path}/t1,previous" and c.extra_train[0]["path"] == f"{tmp_path}/more.tsv"
    assert config_from_args(["--out=~/x"]).out == f"{tmp_path}/x"
    same = [{"task": "sts", "path": "more.tsv", "columns": {}}]
    assert TrainConfig(extra_train=same, distill_from="a , b", distill_weight=1.0).distill_from == "a , b"   # untouched without ~
    assert TrainConfig(extra_train=same).extra_train is same


def test_other_ranges_of_the_issue():
    for kw, flag in ((dict(smart_eps=-0.1), "smart_eps"), (dict(smart_step=-1), "smart_step"), (dict(smart_noise=-1e-5), "smart_noise"),
                     (dict(smart_iters=0), "smart_iters"), (dict(bpp_beta=1.0), "bpp_beta"), (dict(ema=1.0), "ema"), (dict(ema=-0.5), "ema"),
                     (dict(mnrl_scale=0), "mnrl_scale"), (dict(contrastive_weight=-1), "contrastive_weight"), (dict(mnrl_weight=-1), "mnrl_weight"),
                     (dict(sts_cosent=-1), "sts_cosent"), (dict(smart_weight=-1), "smart_weight"), (dict(bpp_weight=-1), "bpp_weight"),
                     (dict(para_prior=0), "para_prior"), (dict(para_prior=1), "para_prior"), (dict(checkpoint_every=-1), "checkpoint_every"),
                     (dict(eval_batch_size=0), "eval_batch_size"), (dict(steps_per_epoch=0), "steps_per_epoch"), (dict(sync_every=0), "sync_every"),
                     (dict(cosine_floor=1.0), "cosine_floor"), (dict(cosine_floor=-1.5), "cosine_floor"), (dict(lora_alpha=0), "lora_alpha"),
                     (dict(phrases_per_epoch=0), "phrases_per_epoch"), (dict(layer_decay=0), "layer_decay"), (dict(seed=-1), "seed"),
                     (dict(distill_temp=0), "distill_temp"), (dict(head_layers=3), "head_layers"), (dict(pal_heads=0), "pal_heads")):
        with pytest.raises(ValueError) as e: TrainConfig(**kw)
        _one_line_naming(str(e.value), flag)


# --- what must still build

def test_presets_and_paper_rows_still_build():
    for k in PRESETS: preset_config(k)
    from minbert_nb.ablate import TABLES, SCALES, row_configs
    n = 0
    for t in TABLES.values():
        for row in t.rows:
            for scale in SCALES:
                for cfg in row_configs(t, row, scale):
                    c = TrainConfig(**cfg); n += 1
                    if c.phases: phase_configs(c)
    assert n > 100


def test_committed_run_configs_still_load():
    files = sorted((ROOT/"results").glob("**/config.json"))
    for f in files: saved_config(json.loads(f.read_text()))
    assert len(files) > 100


def test_valid_configs_are_unchanged():
    q = preset_config("quick")
    assert asdict(q) == asdict(TrainConfig(**{**PRESETS["quick"], "preset": "quick"}))
    assert (q.max_length, q.lr_backbone, q.warmup, q.grad_clip, q.out, q.schedule) == (64, 5e-5, 0.1, 1.0, None, "linear")


# --- damaged config files on the command line

def _error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e: parse_train_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith("minbert_train: error: ") and err.count("error:") == 1, err
    return line


@pytest.mark.parametrize("body,expect", [
    ('[{"epochs": 2}]', "c.json: holds a list, not a JSON object of TrainConfig fields"),
    ('"quick"', "c.json: holds a string, not a JSON object"),
    ('3', "c.json: holds a number, not a JSON object"),
    ('{"epochs": 2,\n}', "c.json:2: not valid JSON"),
    ('{"epochs": 3,\n "pooling": "mean",\n}', "c.json:3"),                  # bad JSON: file and line
    ('{"epochs": "three"}', "c.json: field epochs='three' (str): expected int"),
    ('{"epoch": 3}', "unknown field(s) ['epoch']"),
    ('{"lr_backbone": [1e-5]}', "field lr_backbone=[1e-05] (list): expected float"),
    ('{"sampler": "random"}', "sampler='random'"),
])
def test_config_file_that_is_not_an_object(tmp_path, capsys, body, expect):
    f = tmp_path/"c.json"; f.write_text(body)
    assert expect in _error(["--config", str(f)], capsys)


def test_config_file_that_is_a_folder_or_missing_or_unreadable(tmp_path, capsys):
    assert f"{tmp_path}: a folder, not a JSON file" in _error(["--config", str(tmp_path)], capsys)
    assert f"{tmp_path/'nope.json'}: not found" in _error(["--config", str(tmp_path/"nope.json")], capsys)
    f = tmp_path/"bin.json"; f.write_bytes(b"\xff\xfe\x00garbage")
    assert "bin.json: not text" in _error(["--config", str(f)], capsys)


def test_config_and_resume_expand_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path/"c.json").write_text('{"epochs": 2}')
    assert config_from_args(["--config", "~/c.json"]).epochs == 2
    run = tmp_path/"run"; run.mkdir(); (run/"config.json").write_text(json.dumps(asdict(preset_config("quick", epochs=2))))
    c, resume = parse_train_args(["--resume", "~/run"])
    assert resume and c.out == str(run) and c.epochs == 2


@pytest.mark.parametrize("body,expect", [
    ('{"epochs": 2,\n "pooling": "mean",\n}', "config.json:3: not valid JSON"),
    ('[{"epochs": 2}]', "config.json: holds a list, not a JSON object"),
    ('{"epochs": "two"}', "config.json: field epochs='two' (str): expected int"),
    ('{"lr_backbone": -1}', "config.json: --lr_backbone -1.0: expected a number >= 0"),
    ('{"epochz": 2}', "config.json: unknown field(s) ['epochz']"),
])
def test_resume_with_a_damaged_config(tmp_path, capsys, body, expect):
    (tmp_path/"config.json").write_text(body)
    line = _error(["--resume", str(tmp_path)], capsys)
    assert expect in line and str(tmp_path) in line and "last.pt" in line and "start a new run" in line


def test_resume_with_a_config_folder(tmp_path, capsys):
    (tmp_path/"config.json").mkdir()
    assert "config.json: a folder, not a JSON file" in _error(["--resume", str(tmp_path)], capsys)


def test_a_saved_run_above_the_position_table_still_loads():
    "A run saved before max_length was checked against the backbone's table (it trained on texts that fit) still loads"
    assert saved_config(dict(max_length=100_000)).max_length == 100_000
    with pytest.raises(ValueError, match="--max_length 0"): saved_config(dict(max_length=0))
    with pytest.raises(ValueError, match=r"\[3, 512\]"): TrainConfig(max_length=100_000)   # a new run is refused


def test_a_negative_number_in_exponent_form_is_a_value(capsys):
    "`--lr_backbone -1e-3` (with a space) reaches the range check; argparse took it for an option and said 'expected one argument'"
    with pytest.raises(SystemExit): config_from_args(["--lr_backbone", "-1e-3"])
    assert "--lr_backbone -0.001: expected a number >= 0" in capsys.readouterr().err
