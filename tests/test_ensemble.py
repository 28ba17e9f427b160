"Ensembles of fixture runs (votes with both tie-break levels, means, medians, weighted raw outputs), their errors, the command, and an ensemble of two real tiny runs"
import json, os, subprocess, sys, tomllib
from collections import Counter
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
from minbert_nb.data import load_split
from datapaths import tiny_backbone_dir, run_command
from minbert_nb.evaluate import (write_predictions, read_predictions, prediction_path, write_raw, read_raw, raw_path, accuracy,
                                 pearson, overall_score)
from minbert_nb.ensemble import (vote, mean_scores, median_scores, average_raw, ensemble_split, ensemble_runs, minbert_ensemble,
                                 TIE_RULE)

ROOT = Path(__file__).resolve().parents[1]
BIAS = [0.0, 0.4, -0.3, 0.0]     # the fixture members' Quora prior corrections (para_logit_bias)


def ref_vote(P, w=None):
    "The tie rule written out example by example: most votes, then largest summed weight, then the earliest member's class"
    P = np.asarray(P); w = np.ones(len(P)) if w is None else np.asarray(w, float)
    out = []
    for col in P.T:
        n = Counter(col.tolist()); tied = [c for c in n if n[c] == max(n.values())]
        ws = {c: round(sum(wi for wi, v in zip(w, col) if v == c), 9) for c in tied}
        tied = [c for c in tied if ws[c] == max(ws.values())]
        out.append(next(v for v in col.tolist() if v in tied))
    return np.array(out)


def member(root, name, frames:dict, bias=0.0, **reported):
    "A fixture run folder: prediction files (and raw files when the frame has raw columns) plus a metrics.json"
    run = Path(root) / name
    for (t, split), df in frames.items():
        write_predictions(df, t, prediction_path(run, t, split))
        if any(c.startswith("raw") for c in df.columns): write_raw(df, t, raw_path(run, t, split))
    (run / "metrics.json").parent.mkdir(parents=True, exist_ok=True)
    (run / "metrics.json").write_text(json.dumps(dict(para_logit_bias=bias, **reported)))
    return run


# ---------------------------------------------------------------- the combining rules on arrays

def test_vote_majority_and_both_tie_levels():
    P = [[2, 1, 0, 3, 1],
         [2, 0, 1, 4, 1],
         [1, 0, 1, 4, 0],
         [2, 1, 0, 3, 0]]
    pred, how = vote(P, detail=True)
    # majority 2; 0 vs 1 tie 2-2, equal weights -> member 0 voted 1; 0 vs 1 -> member 0 voted 0; 3 vs 4 -> 3; 1 vs 0 -> 1
    assert pred.tolist() == [2, 1, 0, 3, 1] and how.tolist() == [0, 2, 2, 2, 2]
    pred, how = vote(P, weights=[1, 1, 2, 1], detail=True)
    # weights break the 2-2 ties: member 2 (weight 2) sides with 0, 1, 4, 0 -> summed weight 3 against 2
    assert pred.tolist() == [2, 0, 1, 4, 0] and how.tolist() == [0, 1, 1, 1, 1]
    pred, how = vote(P, weights=[1, 2, 2, 1], detail=True)
    # columns 1-3: members 1 and 2 (weight 4) beat members 0 and 3 (weight 2); column 4: 1+2 against 2+1, still tied -> member 0
    assert pred.tolist() == [2, 0, 1, 4, 1] and how.tolist() == [0, 1, 1, 1, 2]
    assert vote([[1], [0], [1]]).tolist() == [1]                      # Quora, three members
    assert vote([[0], [1]]).tolist() == [0] and vote([[1], [0]]).tolist() == [1]   # two members disagree: the first wins
    assert vote([[3], [1], [2], [0], [4]], weights=[1, 1, 1.5, 1, 1]).tolist() == [2]   # five-way SST tie, one heavier member

@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("weights", [None, [1, 2, 1, 2], [0.5, 0.25, 0.25, 1.0]])
def test_vote_matches_the_written_out_rule(seed, weights):
    rng = np.random.default_rng(seed)
    P = rng.integers(0, 5 if seed % 2 else 2, size=(4, 400))
    assert (vote(P, weights) == ref_vote(P, weights)).all()

def test_mean_median_and_weights():
    P = np.array([[0.0, 5.0, 2.0, 1.0], [1.0, 4.0, 2.5, 1.0], [5.0, 4.5, 2.5, 4.0]])
    assert mean_scores(P) == pytest.approx([2.0, 4.5, 7 / 3, 2.0])
    assert mean_scores(P, [1, 1, 2]) == pytest.approx([11 / 4, 18 / 4, 9.5 / 4, 10 / 4])
    assert median_scores(P).tolist() == [1.0, 4.5, 2.5, 1.0]
    assert median_scores(P[:2]).tolist() == [0.5, 4.5, 2.25, 1.0]
    with pytest.raises(ValueError, match="one weight per member"): mean_scores(P, [1, 1])
    with pytest.raises(ValueError, match=">= 0"): vote(P.astype(int), [1, -1, 1])

def test_average_raw_per_task():
    a, b = np.array([[4.0, 0, 0, 0, 1.0]]), np.array([[0, 0, 0, 0, 3.5]])
    assert average_raw("sst", [a, b]).tolist() == [4]               # 2.25 beats 2.0 (a vote would tie and take member 0's class 0)
    assert average_raw("sst", [a, b], [2, 1]).tolist() == [0]       # 8/3 beats 5.5/3
    assert average_raw("cfimdb", [[[0.2, 0.1]], [[0.0, 0.4]]]).tolist() == [1]
    # Quora: each member's logit plus its own prior correction, weighted, then > 0
    assert average_raw("para", [[-0.2], [0.1]]).tolist() == [0]
    assert average_raw("para", [[-0.2], [0.1]], biases=[0.3, 0.0]).tolist() == [1]
    assert average_raw("para", [[-0.2], [0.1]], weights=[3, 1], biases=[0.0, 0.4]).tolist() == [0]   # (-0.6 + 0.5)/4
    assert average_raw("sts", [[5.8, -1.0, 3.0], [4.8, 0.4, 2.0]], weights=[1, 3]).tolist() == pytest.approx([5.0, 0.05, 2.25])


# ---------------------------------------------------------------- fixture run folders on the small data's dev ids

@pytest.fixture(scope="module")
def dev(small_data):
    return {t: load_split(t, "dev", small_data) for t in ("sst", "para", "sts")}

@pytest.fixture(scope="module")
def fixture_runs(module_tmp, dev, small_data):
    "Four members with random predictions consistent with random raw outputs (float32, so the raw files round-trip exactly)"
    root, rng = module_tmp("members"), np.random.default_rng(0)
    sst_test = load_split("sst", "test", small_data).id.tolist()
    runs = []
    for i in range(4):
        fr = {}
        ids = {t: df.id.tolist()[::-1] if i == 2 else df.id.tolist() for t, df in dev.items()}   # member 2 lists them in reverse
        logits = rng.normal(0, 1, (len(ids["sst"]), 5)).astype(np.float32)
        fr[("sst", "dev")] = pd.DataFrame({"id": ids["sst"], "pred": logits.argmax(1), **{f"raw_{j}": logits[:, j] for j in range(5)}})
        z = rng.normal(0, 1, len(ids["para"])).astype(np.float32)
        fr[("para", "dev")] = pd.DataFrame({"id": ids["para"], "pred": (z + BIAS[i] > 0).astype(int), "raw": z})
        s = rng.uniform(-0.5, 5.5, len(ids["sts"])).astype(np.float32)
        fr[("sts", "dev")] = pd.DataFrame({"id": ids["sts"], "pred": s.clip(0, 5), "raw": s})
        fr[("sst", "test")] = pd.DataFrame({"id": sst_test, "pred": i % 5, **{f"raw_{j}": float(j == i % 5) for j in range(5)}})
        if i != 3: fr[("para", "test")] = pd.DataFrame({"id": ["q1", "q2"], "pred": [0, 1]})   # member 3 has none (offline)
        runs.append(member(root, f"m{i}", fr, BIAS[i], sst_acc=0.2 + i / 100, split="dev"))
    return runs

def _members(runs, task, split="dev"):
    "Each member's predictions in member 0's id order (the ensemble's row order)"
    dfs = [read_predictions(prediction_path(r, task, split), task).set_index("id") for r in runs]
    return np.stack([d.loc[dfs[0].index, "pred"].to_numpy() for d in dfs]), dfs[0].index.tolist()

def _raws(runs, task, ids):
    return [read_raw(raw_path(r, task, "dev"), task).set_index("id").loc[ids].to_numpy() for r in runs]

def _labels(dev, task, ids):
    return pd.to_numeric(dev[task].set_index("id").loc[ids, "label"]).astype(float).to_numpy()

def test_fixture_votes_means_medians(fixture_runs):
    for task in ("sst", "para"):
        P, ids = _members(fixture_runs, task)
        for w in (None, [1, 1, 2, 1]):
            e = ensemble_split(fixture_runs, task, "dev", "vote", w)
            assert e["pred"].id.tolist() == ids and (e["pred"].pred.to_numpy() == ref_vote(P, w)).all()
            assert e["info"]["ties_by_order" if w is None else "ties_by_weight"] > 0    # four members: ties happen, and are counted
    P, ids = _members(fixture_runs, "sts")
    assert ensemble_split(fixture_runs, "sts", "dev", "mean")["pred"].pred.to_numpy() == pytest.approx(P.mean(0))
    assert ensemble_split(fixture_runs, "sts", "dev", "mean", [1, 1, 2, 1])["pred"].pred.to_numpy() == pytest.approx(P.T @ [1, 1, 2, 1] / 5)
    assert ensemble_split(fixture_runs, "sts", "dev", "median")["pred"].pred.to_numpy() == pytest.approx(np.median(P, 0))

def test_fixture_weighted_raw_outputs(fixture_runs):
    w = np.array([1, 2, 1, 0.5])
    _, ids = _members(fixture_runs, "sst")
    e = ensemble_split(fixture_runs, "sst", "dev", "logits", w)
    assert (e["pred"].pred.to_numpy() == np.average(np.stack(_raws(fixture_runs, "sst", ids)), axis=0, weights=w).argmax(1)).all()
    _, ids = _members(fixture_runs, "para")
    R = np.stack(_raws(fixture_runs, "para", ids))[:, :, 0] + np.array(BIAS)[:, None]   # each member's own correction
    e = ensemble_split(fixture_runs, "para", "dev", "logits", w)
    assert (e["pred"].pred.to_numpy() == (np.average(R, axis=0, weights=w) > 0)).all() and e["info"]["para_logit_biases"] == BIAS
    # one member alone: the ensemble reproduces that member's own (corrected) decisions
    P, _ = _members(fixture_runs[1:2], "para")
    assert (ensemble_split(fixture_runs[1:2], "para", "dev", "logits")["pred"].pred.to_numpy() == P[0]).all()
    _, ids = _members(fixture_runs, "sts")
    R = np.stack(_raws(fixture_runs, "sts", ids))[:, :, 0]
    got = ensemble_split(fixture_runs, "sts", "dev", "weighted", w)["pred"].pred.to_numpy()
    assert got == pytest.approx(np.clip(np.average(R, axis=0, weights=w), 0, 5)) and got.min() >= 0 and got.max() <= 5

def test_ensemble_runs_scores_and_files(fixture_runs, dev, small_data, tmp_path, capsys):
    out = tmp_path / "ens"
    m = ensemble_runs(fixture_runs, out, data_dir=small_data)
    assert "note: para-test skipped" in capsys.readouterr().out and m["skipped"] == ["para-test"]
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == [".minbert-folder.json", "config.json", "figures/members.png", "metrics.json", "predictions/para-dev-output.csv",
                     "predictions/sst-dev-output.csv", "predictions/sst-test-output.csv", "predictions/sts-dev-output.csv"]
    P, ids = _members(fixture_runs, "sst")
    y = _labels(dev, "sst", ids)
    assert m["sst_acc"] == pytest.approx(accuracy(ref_vote(P), y)) and m["sst_n"] == len(ids)
    assert [r["sst_acc"] for r in m["members"]] == pytest.approx([accuracy(p, y) for p in P])
    assert [r["reported"]["sst_acc"] for r in m["members"]] == pytest.approx([0.2, 0.21, 0.22, 0.23])
    P, ids = _members(fixture_runs, "para")
    y = _labels(dev, "para", ids); k = ~np.isnan(y)
    assert m["para_acc"] == pytest.approx(accuracy(ref_vote(P)[k], y[k].astype(int)))
    P, ids = _members(fixture_runs, "sts")
    assert m["sts_corr"] == pytest.approx(pearson(P.mean(0), _labels(dev, "sts", ids)), abs=1e-5)
    assert m["overall"] == pytest.approx(overall_score(m["sst_acc"], m["para_acc"], m["sts_corr"]))
    assert m["gain_over_mean"]["sst_acc"] == pytest.approx(m["sst_acc"] - np.mean([r["sst_acc"] for r in m["members"]]))
    assert m["gain_over_best"]["overall"] == pytest.approx(m["overall"] - max(r["overall"] for r in m["members"]))
    assert json.loads((out / "metrics.json").read_text())["sst_acc"] == m["sst_acc"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["members"] == [str(r) for r in fixture_runs] and cfg["weights"] == [1.0] * 4 and cfg["tie_rule"] == TIE_RULE
    assert cfg["methods"] == dict(sst="vote", para="vote", sts="mean")
    sst_test = read_predictions(prediction_path(out, "sst", "test"), "sst")     # members predict 0, 1, 2, 3: a four-way tie
    assert set(sst_test.pred) == {0}                                            # -> member 0's class
    # an earlier ensemble folder may be overwritten; a member or a run folder may not
    ensemble_runs(fixture_runs[:3], out, data_dir=small_data)
    assert prediction_path(out, "para", "test").is_file() and json.loads((out / "config.json").read_text())["members"] == [str(r) for r in fixture_runs[:3]]
    with pytest.raises(ValueError, match="is one of the members"): ensemble_runs(fixture_runs, fixture_runs[0], data_dir=small_data)
    (tmp_path / "run").mkdir(); (tmp_path / "run" / "best.pt").write_text("x")
    with pytest.raises(FileExistsError, match="holds files that minbert_ensemble did not write"): ensemble_runs(fixture_runs, tmp_path / "run", data_dir=small_data)

def test_id_mismatch_names_the_member_and_count(fixture_runs, tmp_path):
    df = read_predictions(prediction_path(fixture_runs[0], "sts", "dev"), "sts")
    df.loc[[0, 1, 2], "id"] = ["zz1", "zz2", "zz3"]
    bad = member(tmp_path, "bad", {("sts", "dev"): df})
    with pytest.raises(ValueError, match=r"bad/predictions/sts-dev-output.csv: 6 id\(s\) differ .*3 not in it, 3 of its ids missing"):
        ensemble_split([fixture_runs[0], bad], "sts", "dev", "mean")

def test_missing_raw_file_names_the_run(fixture_runs, tmp_path, small_data):
    old = tmp_path / "old"                                          # a run from before raw files: predictions only
    for t in ("sst", "para", "sts"):
        p = prediction_path(old, t, "dev"); p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(prediction_path(fixture_runs[1], t, "dev").read_text())
    (old / "metrics.json").write_text(json.dumps(dict(para_logit_bias=0.0)))
    runs = [fixture_runs[0], old]
    for kw, t in ((dict(sst="logits"), "sst"), (dict(para="logits"), "para"), (dict(sts="weighted"), "sts")):
        with pytest.raises(FileNotFoundError, match=f"missing: {old}/predictions/{t}-dev-raw.csv"):
            ensemble_runs(runs, tmp_path / "e", data_dir=small_data, **kw)
    assert ensemble_runs(runs, tmp_path / "e", data_dir=small_data, sts="median")["sts_n"] > 0   # prediction files suffice here
    (old / "metrics.json").unlink()
    for t in ("para",): write_raw(read_raw(raw_path(fixture_runs[1], t, "dev"), t), t, raw_path(old, t, "dev"))
    with pytest.raises(FileNotFoundError, match="para_logit_bias"): ensemble_split(runs, "para", "dev", "logits")


# ---------------------------------------------------------------- the command

def _cli(*args):
    "`minbert_ensemble ARGS` in this process (`run_command`): its exit status, stdout and stderr"
    return run_command(minbert_ensemble, *args)

def test_command_end_to_end(fixture_runs, dev, small_data, tmp_path):
    out = tmp_path / "cli"
    r = _cli(*fixture_runs, "--out", out, "--sst", "logits", "--para", "vote", "--sts", "median", "--weights", "1,1,2,1",
             "--data-dir", small_data)
    assert r.returncode == 0, r.stderr
    assert "note: para-test skipped" in r.stdout and "ensemble of 4 runs, dev: sst_acc=" in r.stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["methods"] == dict(sst="logits", para="vote", sts="median") and m["weights"] == [1, 1, 2, 1]
    P, ids = _members(fixture_runs, "para")
    got = read_predictions(prediction_path(out, "para", "dev"), "para").set_index("id").loc[ids, "pred"].to_numpy()
    assert (got == ref_vote(P, [1, 1, 2, 1])).all()
    P, ids = _members(fixture_runs, "sts")
    got = read_predictions(prediction_path(out, "sts", "dev"), "sts").set_index("id").loc[ids, "pred"].to_numpy()
    assert got == pytest.approx(np.median(P, 0), abs=1e-5)
    assert (out / "figures" / "members.png").stat().st_size > 1000
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["minbert_ensemble"] == "minbert_nb.ensemble:minbert_ensemble"

def test_command_partial_votes_para_test_over_the_members_that_have_it(fixture_runs, small_data, tmp_path):
    "--partial: member 3 has no Quora test file, so it abstains there; with weights, only the members taking part count"
    out = tmp_path / "partial"
    r = _cli(*fixture_runs, "--out", out, "--partial", "--weights", "1,1,2,5", "--data-dir", small_data)
    assert r.returncode == 0, r.stderr
    assert "note: para-test from 3 of 4 members" in r.stdout and "warning: para test predictions come from other members" in r.stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["skipped"] == [] and m["abstained"] == {"para-test": [str(fixture_runs[3])]} and m["dev_test_members_differ"] == ["para"]
    P = np.array([[0, 1]] * 3)
    got = read_predictions(prediction_path(out, "para", "test"), "para").set_index("id").loc[["q1", "q2"], "pred"].to_numpy()
    assert (got == ref_vote(P, [1, 1, 2])).all()
    assert json.loads((out / "config.json").read_text())["partial"] is True


def test_partial_skips_what_only_weight_0_members_have(fixture_runs, small_data, tmp_path, capsys):
    "The same members, weight 0 on all who have Quora test: that split is skipped with a note naming them, not an error"
    m = ensemble_runs(fixture_runs, tmp_path / "zero", weights=[0, 0, 0, 1], data_dir=small_data, partial=True)
    assert "para-test" in m["skipped"] and "para-test" not in m["abstained"] and "para_acc" in m
    assert "para-test skipped: only members of weight 0 have it" in capsys.readouterr().out

def test_command_errors(fixture_runs, tmp_path):
    r = _cli(fixture_runs[0], tmp_path / "nowhere", "--out", tmp_path / "e")
    assert r.returncode != 0 and "minbert_ensemble:" in r.stderr and "nowhere: no such run folder" in r.stderr
    r = _cli(*fixture_runs, "--out", tmp_path / "e", "--weights", "1,2")
    assert r.returncode != 0 and "one weight per member (4)" in r.stderr
    r = _cli(*fixture_runs, "--out", tmp_path / "e", "--sts", "vote")
    assert r.returncode != 0 and "minbert_ensemble: --sts vote: expected one of mean, median, weighted" in r.stderr
    r = _cli("--out", tmp_path / "e")
    assert r.returncode == 2 and "RUN_DIR" in r.stderr


# ---------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
def real_runs(module_tmp, small_data):
    "Two tiny real runs that differ in their PEFT module (same seed, so the same dev_limit sample of dev)"
    from minbert_nb.config import preset_config
    from minbert_nb.train import train
    runs = []
    for name, kw in (("plain", {}), ("lora", dict(peft="lora", lora_r=2))):
        out = module_tmp(name)
        train(preset_config("quick", backbone=tiny_backbone_dir(), out=str(out), data_dir=str(small_data), steps_per_epoch=2, epochs=1, batch_size=4, train_limit=24,
                            dev_limit=24, eval_batch_size=32, predict_test=True, save_checkpoint=False, **kw), progress=False)
        runs.append(out)
    return runs

def test_real_runs_write_raw_files_that_match_their_predictions(real_runs):
    for run in real_runs:
        bias = json.loads((run / "metrics.json").read_text())["para_logit_bias"]
        for t, split in (("sst", "dev"), ("para", "dev"), ("sts", "dev"), ("sst", "test"), ("sts", "test")):
            raw = read_raw(raw_path(run, t, split), t)
            pred = read_predictions(prediction_path(run, t, split), t)
            assert raw.id.tolist() == pred.id.tolist() and len(raw) == (24 if split == "dev" else 60)
            if t == "sst": assert (raw[[f"raw_{j}" for j in range(5)]].to_numpy().argmax(1) == pred.pred).all()
            if t == "para": assert ((raw.raw + bias > 0).astype(int) == pred.pred).all()
            if t == "sts": assert raw.raw.clip(0, 5).to_numpy() == pytest.approx(pred.pred.to_numpy(), abs=1e-4)

def test_ensemble_of_real_runs(real_runs, small_data, tmp_path):
    m = ensemble_runs(real_runs, tmp_path / "vote", data_dir=small_data)
    m2 = ensemble_runs(real_runs, tmp_path / "logits", sst="logits", para="logits", sts="weighted", data_dir=small_data)
    for x in (m, m2):
        assert {"sst_acc", "para_acc", "sts_corr", "overall"} <= set(x) and x["sst_n"] == 24 and len(x["members"]) == 2
        assert x["skipped"] == [] and prediction_path(tmp_path / "vote", "sts", "test").is_file()
    for r, mem in zip(real_runs, m["members"]):     # each member scored on the same rows equals its own reported dev score
        rep = json.loads((r / "metrics.json").read_text())
        assert mem["sst_acc"] == pytest.approx(rep["sst_acc"]) and mem["sts_corr"] == pytest.approx(rep["sts_corr"], abs=1e-4)
