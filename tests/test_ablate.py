"The ablation runner: the registry against the reports, resuming an interrupted table, figures from a tiny run"
import json, shutil, re
from pathlib import Path
import pytest
import minbert_nb.ablate as A
from datapaths import ROOT, SAMPLE, tiny_backbone_dir

SEEDS = ROOT.parent / "shared" / "seeds"
needs_seeds = pytest.mark.skipif(not SEEDS.is_dir(), reason=f"needs the four reports in {SEEDS} (the project's spec)")

def _numbers(line:str) -> list:
    "Every number of a line of a report, '- 0.048' (as Chan (003) prints one) included"
    return [float(x.replace(" ", "")) for x in re.findall(r"-[ ]?\d+\.\d+|-?\d+(?:\.\d+)?", line)]

def _contains(seq, sub) -> bool:
    return any(all(abs(a - b) < 1e-9 for a, b in zip(seq[i:i + len(sub)], sub)) for i in range(len(seq) - len(sub) + 1))

@needs_seeds
@pytest.mark.parametrize("tid", list(A.TABLES))
def test_registry_numbers_are_the_reports(tid):
    "Every row's printed numbers occur, in the table's column order, on one line of the report inside the table's lines"
    t = A.TABLES[tid]
    seed, lo, hi = re.fullmatch(r"(\d{3}) lines (\d+)-(\d+)", t.source).groups()
    (path,) = SEEDS.glob(f"{seed}_*.txt")
    lines = path.read_text().splitlines()[int(lo) - 1:int(hi)]
    assert any(t.caption[:40] in l for l in lines), f"{tid}: caption not within {t.source}"
    for r in t.rows:
        want = [v for v in r.paper.values() if v is not None]
        hits = [l for l in lines if _contains(_numbers(l), want)]
        assert hits, f"{tid} / {r.name}: {want} is not on any line of {path.name} {lo}-{hi}"

def test_numbers_parser():
    assert _numbers("R3\tMultitask RR\tad910f4\t0.279\t0.260\t- 0.048\t0.625")[-4:] == [0.279, 0.26, -0.048, 0.625]
    assert _contains([1.0, 2.0, 3.0], [2.0, 3.0]) and not _contains([1.0, 2.0, 3.0], [3.0, 2.0])

def test_an_interrupted_table_resumes_without_rerunning_finished_rows(tmp_path, monkeypatch):
    calls, real = [], A.run_training
    def counting(cfg, *a, **k): calls.append(cfg.preset); return real(cfg, *a, **k)
    monkeypatch.setattr(A, "run_training", counting)
    out, data, tiny = tmp_path/"t10", str(SAMPLE), tiny_backbone_dir()     # the rows' bookkeeping, not their scores: a tiny BERT
    A.run_table("000-T10", out, "tiny", rows=[1, 2], data_dir=data, backbone=tiny, progress=False)
    assert calls == ["000-T10/Round Robin", "000-T10/Proportional"]
    done = {p: p.stat().st_mtime_ns for p in out.rglob("row.json")}
    def failing(cfg, *a, **k):                      # the run is killed while training row 4
        calls.append(cfg.preset)
        if cfg.preset.endswith("Annealed"): raise KeyboardInterrupt
        return real(cfg, *a, **k)
    monkeypatch.setattr(A, "run_training", failing); calls.clear()
    with pytest.raises(KeyboardInterrupt): A.run_table("000-T10", out, "tiny", data_dir=data, backbone=tiny, progress=False)
    assert calls == ["000-T10/Square Root", "000-T10/Annealed"]
    monkeypatch.setattr(A, "run_training", counting); calls.clear()
    df = A.run_table("000-T10", out, "tiny", data_dir=data, backbone=tiny, progress=False)
    assert calls == ["000-T10/Annealed"]            # only the unfinished row trains again
    assert {p: p.stat().st_mtime_ns for p in done} == done
    assert df["status"].str.startswith("ok").all() and df["ours Avg"].notna().all()
    md = (out/"table.md").read_text()
    assert md.count("\n| ") == 1 + 4 and "000-T10" in md and "67.47" in md   # header + one line per paper row

def test_a_row_whose_checkpoint_is_gone_trains_again_and_says_so(tmp_path, monkeypatch, capsys):
    "A row folder with epochs in history.csv and no last.pt (deleted, or the run began on another machine) starts over, named"
    calls, real = [], A.run_training
    def counting(cfg, *a, **k): calls.append((cfg.preset, k.get("resume"))); return real(cfg, *a, **k)
    monkeypatch.setattr(A, "run_training", counting)
    out, data, tiny = tmp_path/"t10", str(SAMPLE), tiny_backbone_dir()
    A.run_table("000-T10", out, "tiny", rows=[1], data_dir=data, backbone=tiny, progress=False)
    row = next((out/"rows").iterdir())
    (row/"metrics.json").unlink(); (row/"row.json").unlink()     # as a run stopped after its epochs whose checkpoint did not travel
    assert not any(row.rglob("last.pt")) and len((row/"history.csv").read_text().splitlines()) > 1
    calls.clear(); capsys.readouterr()
    df = A.run_table("000-T10", out, "tiny", rows=[1], data_dir=data, backbone=tiny, progress=False)
    assert calls == [("000-T10/Round Robin", False)] and df.loc[0, "status"].startswith("ok")
    said = capsys.readouterr().out
    assert f"{row}: history.csv has" in said and "no checkpoint (last.pt)" in said and "trains again from its start" in said, said

def test_a_stop_asked_between_rows_ends_the_call_there(tmp_path, monkeypatch):
    "SIGINT or SIGTERM that arrives while no row trains (a background job ignores SIGINT there) is kept and ends the call before the next row"
    import os, signal
    from minbert_nb.checkpoint import TrainingInterrupted
    ran = []
    def row(table, r, folder, *a, **k):            # a row finishes, and a stop arrives before the next one starts
        ran.append(r.name)
        if len(ran) == 2: os.kill(os.getpid(), signal.SIGTERM)
        return dict(table=table.id, row=r.name, status="ok")
    monkeypatch.setattr(A, "_row_or_stop", row); before = signal.getsignal(signal.SIGTERM)
    with pytest.warns(UserWarning, match="SIGTERM received"), pytest.raises(TrainingInterrupted) as e:
        A.run_table("000-T10", tmp_path/"t10", "tiny", data_dir=str(SAMPLE), backbone=tiny_backbone_dir(), progress=False, seeds="0")
    assert len(ran) == 2 and e.value.signal == "SIGTERM" and e.value.exit_code == 143
    assert "2 of 4 rows" in str(e.value) and "the rest not started" in str(e.value)
    assert signal.getsignal(signal.SIGTERM) is before      # the handler before the call is back

def test_a_stop_a_row_caught_in_its_last_evaluation_ends_the_call_after_it(tmp_path, monkeypatch):
    "A row's own GracefulStop catches the signal when the row has no step left to stop at: the row finishes, the table stops there"
    import os, signal
    from minbert_nb.checkpoint import GracefulStop, TrainingInterrupted
    ran = []
    def row(table, r, folder, *a, **k):
        ran.append(r.name)
        with GracefulStop() as own:                 # the row's training: the signal comes during its last evaluation
            if len(ran) == 2: os.kill(os.getpid(), signal.SIGINT)
        assert own.requested == (len(ran) == 2)
        return dict(table=table.id, row=r.name, status="ok")
    monkeypatch.setattr(A, "_row_or_stop", row)
    with pytest.warns(UserWarning, match="SIGINT received"), pytest.raises(TrainingInterrupted) as e:
        A.run_table("000-T10", tmp_path/"t10", "tiny", data_dir=str(SAMPLE), backbone=tiny_backbone_dir(), progress=False, seeds="0")
    assert len(ran) == 2 and e.value.exit_code == 130 and "2 of 4 rows" in str(e.value)

def test_figures_and_frontier_from_a_tiny_run(tmp_path):
    "Table 4: three fine-tuned Sentence-BERT rows and their ensemble; the table figure and the parameter frontier"
    out, tiny = tmp_path/"t4", tiny_backbone_dir()      # the rows' bookkeeping and figures, not their scores: a tiny BERT
    df = A.run_table("000-T4", out, "tiny", rows=[13, 14, 15, 17], backbone=tiny, data_dir=str(SAMPLE), progress=False)
    assert list(df["row"]) == [r.name for r in A.TABLES["000-T4"].rows]
    run = df.set_index("row")
    assert run.loc["Ensemble x3", "status"].startswith("ok")
    assert run.loc["Pretrain / Base BERT / -", "status"] == "not run: not selected (--rows)"
    members = [run.loc[n, "ours Trainable Param (M)"] for n in A.TABLES["000-T4"].row("Ensemble x3").ensemble]
    assert abs(run.loc["Ensemble x3", "ours Trainable Param (M)"] - sum(members)) < 1e-6
    assert run.loc["Finetune / Sentence-BERT / PAL", "ours Trainable Param (M)"] > run.loc["Finetune / Sentence-BERT / -", "ours Trainable Param (M)"]
    assert run.loc["Ensemble x3", "device"] == run.loc["Finetune / Sentence-BERT / -", "device"] != ""   # where its members ran
    for f in ("figures/table.png", "figures/frontier.png"):
        p = out/f
        assert p.is_file() and p.stat().st_size > 10_000, f
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out/"rows"/"17-Ensemble_x3"/"row.json").read_text())["runs"] == ["ensemble"]   # stored relative to the row
    ens = A.row_record(out, A.TABLES["000-T4"], A.TABLES["000-T4"].row("Ensemble x3"))
    assert len(ens["metrics"]) and Path(ens["runs"][0]).joinpath("metrics.json").is_file()
    # on another machine only what is committed came: the members' packs of their dev predictions, not the files
    pal, before = out/"rows"/"14-Finetune_Sentence-BERT_PAL", run.loc["Ensemble x3", "ours Avg"]
    assert (pal/A.PACK).is_file() and (out.parent/"dev-ids").is_dir()
    shutil.rmtree(out/"rows"/"17-Ensemble_x3")
    for f in (pal/"predictions").glob("*"): f.unlink()
    df = A.run_table("000-T4", out, "tiny", rows=[17], backbone=tiny, data_dir=str(SAMPLE), progress=False)
    assert df.set_index("row").loc["Ensemble x3", "ours Avg"] == before      # the same ensemble, from the pack
    # without the pack either (a run made before runs packed them): the ensemble says so instead of scoring less
    shutil.rmtree(out/"rows"/"17-Ensemble_x3"); (pal/A.PACK).unlink()
    for f in (pal/"predictions").glob("*"): f.unlink()
    df = A.run_table("000-T4", out, "tiny", rows=[17], backbone=tiny, data_dir=str(SAMPLE), progress=False)
    st = df.set_index("row").loc["Ensemble x3", "status"]
    assert st.startswith("not run: the dev predictions of members") and "14-Finetune_Sentence-BERT_PAL" in st and "delete" in st, st

def test_rows_that_cannot_run_are_marked_with_the_reason(tmp_path):
    df = A.run_table("003-T2", tmp_path/"t", "tiny", rows=[9, 10], data_dir=str(SAMPLE), progress=False)
    assert df.loc[8, "status"].startswith("not run: the best of a sweep")
    assert df.loc[9, "status"].startswith("not run: 'layer changes'")
    assert df.loc[0, "status"] == "not run: not selected (--rows)" and len(df) == 11

def test_a_copy_row_shows_the_run_of_its_original(tmp_path):
    "003-T2's R7 and R11 are built exactly like R4 (`same_as`): a call that selects R4 alone shows its run on their lines too"
    df = A.run_table("003-T2", tmp_path/"t", "tiny", rows=[4], data_dir=str(SAMPLE), progress=False).set_index("row")
    for r in ("R7", "R11"):
        assert df.loc[r, "status"].startswith("ok (same run as R4"), df.loc[r, "status"]
        assert df.loc[r, "ours SST Dev"] == df.loc["R4", "ours SST Dev"] and df.loc[r, "wall_s"] == 0
    assert df.loc["R1", "status"] == "not run: not selected (--rows)" and not (tmp_path/"t"/"rows"/"07-R7").exists()

def test_offline_backbone_is_marked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    df = A.run_table("000-T10", tmp_path/"t", "tiny", rows=[1], backbone="no-such-org/no-such-bert", data_dir=str(SAMPLE), progress=False)
    assert df.loc[0, "status"].startswith("not run: backbone 'no-such-org/no-such-bert' is not available here")

def _fake(folder, **m):
    folder.mkdir(parents=True, exist_ok=True)
    (folder/"metrics.json").write_text(json.dumps(m)); (folder/"row.json").write_text(json.dumps(dict(status="ok", metrics=m)))

def _table_dir(root, tid, name, scale):
    d = root/"results"/"ablate"/name; d.mkdir(parents=True)
    (d/"ablate.json").write_text(json.dumps(dict(table=tid, scale=scale, backbone=None))); return d

def test_report_verdicts_from_fabricated_run_folders(tmp_path, monkeypatch):
    "`minbert_ablate --report` on run folders written here: every verdict and interval against numbers computed by hand"
    import pandas as pd
    import minbert_nb.claims as C
    from minbert_nb.reproduce import minbert_ablate
    t3, t10, t0 = A.TABLES["003-T2"], A.TABLES["000-T10"], A.TABLES["000-T3"]
    d = _table_dir(tmp_path, "003-T2", "003-T2-quick", "quick")           # three seeds
    for i, s in enumerate((0, 1, 2)):
        r4 = dict(sst_acc=0.5, para_acc=0.7, sts_corr=(0.50, 0.55, 0.60)[i])
        _fake(A.row_dir(A.seed_dir(d, s), t3, t3.row("R4")), **r4)
        _fake(A.row_dir(A.seed_dir(d, s), t3, t3.row("R2")), sst_acc=0.5, para_acc=0.7, sts_corr=(0.40, 0.41, 0.42)[i])
        _fake(A.row_dir(A.seed_dir(d, s), t3, t3.row("R6")), **{k: v + 0.03 for k, v in r4.items()})
    d = _table_dir(tmp_path, "000-T10", "000-T10-quick", "quick")         # two seeds
    for s, sst in ((0, 0.50), (1, 0.53)):
        _fake(A.row_dir(A.seed_dir(d, s), t10, t10.row("Annealed")), sst_acc=sst, para_acc=0.8, sts_corr=0.7)
        _fake(A.row_dir(A.seed_dir(d, s), t10, t10.row("Round Robin")), sst_acc=0.4, para_acc=0.7, sts_corr=0.6)
    d = _table_dir(tmp_path, "000-T3", "tiny/000-T3", "tiny")             # the single-seed layout, a row of two parts
    for row, sst in (("Finetune", 0.5), ("Pretrain", 0.4)):
        f = A.row_dir(d, t0, t0.row(row)); f.mkdir(parents=True); (f/"row.json").write_text("{}")
        _fake(f/"part1-sst", sst_acc=sst); _fake(f/"part2-cfimdb", cfimdb_acc=0.9)
    monkeypatch.chdir(tmp_path)
    minbert_ablate(["--report", "--results", "results/ablate", "--report_out", "results/reproduction"])
    csv = pd.read_csv("results/reproduction/claims.csv")
    assert tuple(csv.columns) == ("claim", "table", "metric", "a_rows", "b_rows", "paper_diff", "ours_diff", "ci_low", "ci_high", "seeds",
                                  "verdict", "a_runs", "b_runs", "settings", "agreement", "equivalence", "p_value", "holm_verdict", "members",
                                  "seeds_needed", "seed_diffs", "seeds_added", "last_gain_a", "last_gain_b",
                                  "moved_low", "moved_high")   # the 13 columns first, the readings after them
    got = csv.set_index("claim")
    h = 4.302653 * 0.04 / 3 ** 0.5                                         # t(0.975, 2) * sd / sqrt(3); diffs 0.10, 0.14, 0.18
    r = got.loc["003-T2-cosine-sts"]
    assert (r.verdict, r.seeds, r.metric) == ("reproduced", 3, "sts_corr")
    assert abs(r.ours_diff - 0.14) < 1e-9 and abs(r.ci_low - (0.14 - h)) < 1e-5 and abs(r.ci_high - (0.14 + h)) < 1e-5
    assert abs(r.paper_diff - (0.486 - 0.417)) < 1e-9
    assert r.a_runs == ";".join(f"results/ablate/003-T2-quick/seed-{s}/rows/04-R4" for s in (0, 1, 2))
    r = got.loc["003-T2-cosine-avg"]                                       # the same seeds on the average of three tasks: a third of it
    assert r.verdict == "reproduced" and abs(r.ours_diff - 0.14 / 3) < 1e-9 and abs(r.ci_low - (0.14 - h) / 3) < 1e-5
    r = got.loc["003-T2-smart"]                               # the paper: R6 < R7 (lambda 0: R4's runs here); R6 is 0.03 better at every seed
    assert r.verdict == "contradicted" and abs(r.ours_diff - 0.03) < 1e-9 and abs(r.ci_low - 0.03) < 1e-9
    assert r.b_rows == "R7" and r.b_runs == ";".join(f"results/ablate/003-T2-quick/seed-{s}/rows/04-R4" for s in (0, 1, 2))
    r = got.loc["000-T10-annealed"]                                         # percentages; diffs 10 and 11 points, two seeds only
    h2 = 12.706205 * 0.5 ** 0.5 / 2 ** 0.5
    assert (r.verdict, r.seeds) == ("inconclusive", 2) and abs(r.ours_diff - 10.5) < 1e-6 and abs(r.ci_low - (10.5 - h2)) < 1e-4
    r = got.loc["000-T3-finetune-sst"]                                      # one seed: no interval
    assert (r.verdict, r.seeds) == ("inconclusive", 1) and pd.isna(r.ci_low) and abs(r.ours_diff - 10.0) < 1e-9
    assert r.a_runs == "results/ablate/tiny/000-T3/rows/01-Finetune/part1-sst;results/ablate/tiny/000-T3/rows/01-Finetune/part2-cfimdb"
    assert got.loc["004-T2-concat-sts", "verdict"] == "not run" and len(csv) == len(C.CLAIMS)
    md = Path("results/reproduction/report.md").read_text()
    assert md.splitlines()[2].startswith("**reproduced** 2 · **contradicted** 1 · **inconclusive** ")
    assert "### 000-T10-annealed: inconclusive (too few seeds)" in md
    assert Path("results/reproduction/figures/003-T2.png").is_file()

def test_reproduce_exports_what_the_command_calls():
    "minbert_ablate --plan/--reproduce call these from the package (a notebook cell that lost `#| export` still passes nbval)"
    import minbert_nb.reproduce as R
    for n in ("claim_rows", "plan_frame", "plan_commands", "write_plan", "worker_env", "run_calls", "table_from_runs"):
        assert callable(getattr(R, n, None)) and n in R.__all__, n

def test_a_row_that_would_not_end_in_time_is_not_started_and_a_shorter_one_is(tmp_path, capsys):
    "With --hours / --until a row whose finished seeds took longer than the time left stays for later; the next row may still run"
    import time
    out, t10 = tmp_path/"t10", A.TABLES["000-T10"]
    f = A.row_dir(A.seed_dir(out, 0), t10, t10.rows[0]); f.mkdir(parents=True)   # seed 0 of row 1 took 90 minutes on this device
    dev = A.default_device(None).type
    m = dict(wall_time_s=5400, device=dev, sst_acc=.5, para_acc=.5, sts_corr=.5)
    (f/"metrics.json").write_text(json.dumps(m))
    (f/"row.json").write_text(json.dumps(dict(table=t10.id, row=t10.rows[0].name, status="ok", runs=["."], wall_s=5400, metrics=m,
                                              backbone="tiny", data="sample")))
    (out/"ablate.json").write_text(json.dumps(dict(table=t10.id, scale="tiny", backbone=tiny_backbone_dir())))
    A.run_table("000-T10", out, "tiny", rows=[1, 2], data_dir=str(SAMPLE), backbone=tiny_backbone_dir(), progress=False,
                seeds=[1], until=time.time() + 1800)
    said = capsys.readouterr().out
    assert "000-T10 / Round Robin: not started: its finished seeds took about 90 min (the median of 1), " in said and "min were left" in said, said
    s1 = A.seed_dir(out, 1)
    assert A.row_record(s1, t10, t10.rows[0]) is None                       # left for later
    assert A.row_record(s1, t10, t10.rows[1])["status"] == "ok"             # row 2 was never timed: it started

def test_hours_times_a_row_at_twice_the_budget_by_its_runs_at_the_reports(tmp_path, capsys):
    "minbert_ablate table --scale short2x --hours: a row never run at twice the budget is timed by its seeds at the report's, times two"
    import minbert_nb.reproduce as R
    t10, dev = A.TABLES["000-T10"], A.default_device(None).type
    short, double = tmp_path/"000-T10-short", tmp_path/"000-T10-short2x"
    f = A.row_dir(A.seed_dir(short, 0), t10, t10.rows[0]); f.mkdir(parents=True)   # 40 min at the report's budget: about 80 at twice it
    m = dict(wall_time_s=2400, device=dev, sst_acc=.5, para_acc=.5, sts_corr=.5)
    (f/"metrics.json").write_text(json.dumps(m))
    (f/"row.json").write_text(json.dumps(dict(table=t10.id, row=t10.rows[0].name, status="ok", runs=["."], wall_s=2400, metrics=m,
                                              backbone="tiny", data="sample")))
    R.ablate_table("000-T10", scale="short2x", out=str(double), rows="1", seeds="0", hours=1, quiet=True,
                   backbone=tiny_backbone_dir(), data_dir=str(SAMPLE))
    said = capsys.readouterr().out
    assert (f"000-T10 / Round Robin: not started: its finished seeds at scale short ({short}) took about 40 min (the median of 1), "
            "times 2, the ratio of the two scales' training examples") in said and "about 80 min here, 60 min were left" in said, said
    assert A.row_record(A.seed_dir(double, 0), t10, t10.rows[0]) is None         # left for a machine with the time
