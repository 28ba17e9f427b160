"The committed results: no machine's folders in any run file, and a size a clone can carry"
import importlib.util, json, subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("portable_results", ROOT/"tools"/"portable_results.py")
PR = importlib.util.module_from_spec(spec); spec.loader.exec_module(PR)
LIMIT_MB = 15


def _tracked() -> list:
    out = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p]


def test_no_absolute_paths_under_results():
    bad = [(r, p[0]) for r in PR.tracked() if (p := PR.machine_paths(r))]
    assert not bad, f"{len(bad)} tracked files under results/ name a machine's folder, e.g. {bad[:3]}: run python tools/portable_results.py"


def test_the_rule_finds_them():
    "What the check looks for: absolute folders, not relative paths, URLs or the ~ and $TMPDIR forms the rewrite leaves"
    found = lambda s: PR.ABSOLUTE.findall(s)
    assert found('"out": "/work/main/results/x"') and found("data /tmp/gpu-results/a") and found("(/root/.cache/m)")
    assert not found('"out": "results/ablate/x"') and not found("https://minbert-nb.github.io/x") and not found("~/.cache/m $TMPDIR/runs/x")
    assert PR.portable("/work/main/results/ablate/002-T2-short/x", "results/ablate/002-T2-short/y") == "results/ablate/002-T2-short/x"
    assert PR.portable("/work/runner/results/ablate/002-T2-short/x", "results/ablate-scale-rates/002-T2-short/y") == "results/ablate-scale-rates/002-T2-short/x"
    assert (PR.portable("/work/shared/data/cs224n", "results/a"), PR.portable("/root/.cache/m", "results/a")) == ("../shared/data/cs224n", "~/.cache/m")


def test_results_fit_in_a_clone():
    files = [ROOT/p for p in _tracked() if (ROOT/p).is_file()]
    mb = sum(f.stat().st_size for f in files) / 1e6
    assert mb < LIMIT_MB, f"tracked results/ is {mb:.1f} MB (limit {LIMIT_MB}): a run's own figures are drawn on demand (minbert_analyze RUN), not committed"
    runs_png = [f for f in files if f.suffix == ".png" and "/rows/" in str(f)]
    assert not runs_png, f"per-run figures are committed: {runs_png[:3]}"


def test_pack_png_keeps_the_figure_and_its_key(tmp_path):
    "pack_results stores a figure with a palette: smaller, the same picture to the eye, the report's key (Comment) kept"
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt, numpy as np
    from PIL import Image
    spec = importlib.util.spec_from_file_location("pack_results", ROOT/"tools"/"pack_results.py")
    PK = importlib.util.module_from_spec(spec); spec.loader.exec_module(PK)
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.linspace(0, 6, 200)
    for k in range(4): ax.plot(x, np.sin(x + k), label=f"line {k}"); ax.scatter(x[::20], np.cos(x[::20] + k), s=12, alpha=0.5)
    ax.legend(); ax.set_title("claims")
    f = tmp_path/"fig.png"; fig.savefig(f, dpi=110, metadata={"Comment": "key-123"}); plt.close(fig)
    before = np.asarray(Image.open(f).convert("RGB"), dtype=float); size = f.stat().st_size
    assert PK.pack_png(f, apply=False) > 0 and f.stat().st_size == size          # a dry run changes nothing
    saved = PK.pack_png(f)
    with Image.open(f) as im:
        assert im.mode == "P" and im.text.get("Comment") == "key-123" and im.size == before.shape[1::-1]
        after = np.asarray(im.convert("RGB"), dtype=float)
    assert saved == size - f.stat().st_size and f.stat().st_size < 0.7 * size
    d = np.abs(after - before).max(axis=2)                                       # per pixel, the largest channel's change
    assert d.mean() < 0.5 and np.percentile(d, 99.9) < 32                        # all but a few anti-aliased edge pixels as drawn
    assert PK.pack_png(f) == 0                                                    # once is enough: a palette PNG is left alone


def test_committed_figures_carry_a_palette():
    "Every tracked figure under results/ is stored as pack_results leaves it: a landing that drew figures after packing shows here"
    from PIL import Image
    spec = importlib.util.spec_from_file_location("pack_results", ROOT/"tools"/"pack_results.py")
    PK = importlib.util.module_from_spec(spec); spec.loader.exec_module(PK)
    pngs = [ROOT/p for p in _tracked() if p.endswith(".png") and (ROOT/p).is_file()]
    def full_colour(f):
        with Image.open(f) as im: mode = im.mode
        return mode not in ("P", "L", "1") and PK.pack_png(f, apply=False) > 0      # a dry run: measures, changes nothing
    big = [str(f.relative_to(ROOT)) for f in pngs if full_colour(f)]
    assert pngs and not big, f"{len(big)} figures under results/ are stored in full colour, e.g. {big[:3]}: run python tools/pack_results.py --apply"


def test_no_earlier_table_that_nothing_reads():
    "A table folder of results/ablate-scale-rates whose every claim has re-run at 3 seeds under results/ablate is not carried"
    spec = importlib.util.spec_from_file_location("pack_results", ROOT/"tools"/"pack_results.py")
    PK = importlib.util.module_from_spec(spec); spec.loader.exec_module(PK)
    tracked = {str(Path(p).parent) for p in _tracked()}
    left = [d for d in PK.superseded(ROOT/"results") if d.name not in PK.SHOWN and any((t + "/").startswith(f"{d.relative_to(ROOT)}/") for t in tracked)]
    assert not left, f"{[str(d.relative_to(ROOT)) for d in left]}: no claim reads these any more; run python tools/pack_results.py --apply"

def test_earlier_tables_the_docs_show_are_kept():
    "The quick-scale tables the reproduce-a-table walkthrough shows are pack_results' SHOWN, kept and committed"
    import re
    spec = importlib.util.spec_from_file_location("pack_results", ROOT/"tools"/"pack_results.py")
    PK = importlib.util.module_from_spec(spec); spec.loader.exec_module(PK)
    src = "".join("".join(c["source"]) for c in json.loads((ROOT/"nbs"/"tutorials"/"19_reproduce_a_table.ipynb").read_text())["cells"])
    shown = {f"{t}-quick" for t in re.findall(r'"(\d{3}-T\d+)"', re.search(r"for tid in \(([^)]*)\)", src).group(1))}
    assert shown == PK.SHOWN, f"nbs/tutorials/19_reproduce_a_table shows {sorted(shown)}; tools/pack_results.py keeps {sorted(PK.SHOWN)}"
    tracked = set(_tracked())
    for name in shown:
        assert f"results/ablate-scale-rates/{name}/table.md" in tracked and f"results/ablate-scale-rates/{name}/figures/table.png" in tracked, name

def test_pack_results_keeps_a_tables_earlier_lines_before_it_removes_its_folder(tmp_path, monkeypatch):
    "The lines a table's claims got at the earlier settings outlive its folder: written into claims.csv beside it, then it goes"
    import minbert_nb.verdicts as V
    spec = importlib.util.spec_from_file_location("pack_results", ROOT/"tools"/"pack_results.py")
    PK = importlib.util.module_from_spec(spec); spec.loader.exec_module(PK)
    old = tmp_path/"results"/"ablate-scale-rates"/"000-T11-short"; (old/"seed-0"/"rows").mkdir(parents=True)
    (old/"ablate.json").write_text(json.dumps(dict(table="000-T11", scale="short", backbone=None)))
    seen = []
    def keep(earlier, tables, root): seen.append((Path(earlier), tables, Path(root), old.is_dir()))
    monkeypatch.setattr(V, "keep_earlier_verdicts", keep)
    monkeypatch.setattr(PK, "superseded", lambda results: [old])
    PK.main(["--results", str(tmp_path/"results")])                           # a dry run keeps and removes nothing
    assert seen == [] and old.is_dir()
    PK.main(["--results", str(tmp_path/"results"), "--apply"])
    assert seen == [(old.parent, ["000-T11"], tmp_path, True)] and not old.exists()   # kept while the folder was there, then removed


def test_check_passes_over_a_file_deleted_since_the_last_commit(tmp_path, monkeypatch):
    "A run folder removed in the work tree (pack_results --apply removes superseded ones) is still in `git ls-files`: the check skips it"
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path/"results/a").mkdir(parents=True)
    for n, t in (("gone.json", '{"out": "results/a"}'), ("kept.json", '{"out": "/work/main/results/a"}')): (tmp_path/"results/a"/n).write_text(t)
    subprocess.run(["git", "-C", str(tmp_path), "add", "results"], check=True)
    (tmp_path/"results/a/gone.json").unlink()
    monkeypatch.setattr(PR, "ROOT", tmp_path)
    assert PR.tracked() == ["results/a/kept.json"]
    assert [r for r in PR.tracked() if PR.machine_paths(r)] == ["results/a/kept.json"]   # what is there is still checked


def test_committed_packs_read_back_from_committed_ids():
    "Every committed dev-predictions pack gives back each of its files from the dev ids committed beside it (a clone can ensemble them)"
    from minbert_nb.evaluate import PACK, pack_format, packed_text, _pack_files
    packs = [ROOT/p for p in _tracked() if p.endswith("/" + PACK) and (ROOT/p).is_file()]
    assert packs, "no committed packs: the ensembles of results/ read them"
    for pack in packs:
        files = _pack_files(pack)
        assert pack_format(pack) == 2, f"{pack}: python tools/pack_results.py --apply packs it again"
        for name in files:
            text = packed_text(pack.parent/"predictions"/name)   # FileNotFoundError where its ids are not committed
            assert text.count("\n") >= 1 and text.split("\n", 1)[0] == files[name]["header"], (pack, name)


def test_pack_results_packs_a_kept_runs_dev_predictions(tmp_path):
    "pack_results --apply packs the dev predictions an ensemble reads, removes the files, and the ensemble reads the same rows"
    spec = importlib.util.spec_from_file_location("pack_results", ROOT/"tools"/"pack_results.py")
    PK = importlib.util.module_from_spec(spec); spec.loader.exec_module(PK)
    from minbert_nb.evaluate import PACK, write_predictions, write_raw, prediction_path, raw_path, read_predictions, read_raw
    import numpy as np, pandas as pd
    res = tmp_path/"results"; run, ens = res/"member", res/"ens"
    ids = [f"{k:025x}" for k in range(300)]
    df = pd.DataFrame(dict(id=ids, pred=np.arange(300) % 2, raw=np.random.default_rng(0).normal(size=300).astype(np.float32)))
    for split in ("dev", "test"): write_predictions(df, "para", prediction_path(run, "para", split))
    write_raw(df, "para", raw_path(run, "para", "dev"))
    ens.mkdir(parents=True); (ens/"config.json").write_text(json.dumps(dict(members=[str(run)], methods=dict(para="logits"))))
    before = read_predictions(prediction_path(run, "para", "dev"), "para"), read_raw(raw_path(run, "para", "dev"), "para")
    PK.main(["--results", str(res), "--headline", "--apply"])
    assert (run/PACK).is_file() and (res/"dev-ids").is_dir()
    assert sorted(f.name for f in (run/"predictions").iterdir()) == ["para-test-output.csv.gz"]   # the test file stays a file
    after = read_predictions(prediction_path(run, "para", "dev"), "para"), read_raw(raw_path(run, "para", "dev"), "para")
    assert all(a.equals(b) for a, b in zip(before, after))


def test_pack_results_drops_what_a_pack_gives_back(tmp_path):
    """A table row copied from another table's run (`copied_from`) reads its dev predictions from that run's pack: the files an
    ensemble wrote back beside it are dropped, not committed a second time, and the ensemble's member still reads the same rows"""
    spec = importlib.util.spec_from_file_location("pack_results", ROOT/"tools"/"pack_results.py")
    PK = importlib.util.module_from_spec(spec); spec.loader.exec_module(PK)
    from minbert_nb.evaluate import PACK, write_predictions, write_raw, prediction_path, raw_path, read_predictions, pack_predictions
    import numpy as np, pandas as pd
    res = tmp_path/"results"; twin, copy, ens = res/"ablate"/"T3"/"twin", res/"ablate"/"T4"/"copy", res/"ablate"/"T4"/"ens"
    ids = [f"{k:025x}" for k in range(300)]
    df = pd.DataFrame(dict(id=ids, pred=np.arange(300) % 2, raw=np.random.default_rng(0).normal(size=300).astype(np.float32)))
    for run in (twin, copy):
        write_predictions(df, "para", prediction_path(run, "para", "dev")); write_raw(df, "para", raw_path(run, "para", "dev"))
    pack_predictions(twin, [prediction_path(twin, "para", "dev"), raw_path(twin, "para", "dev")], res)
    for f in (twin/"predictions").iterdir(): f.unlink()
    (copy/"metrics.json").write_text(json.dumps(dict(copied_from="T3/twin")))
    other = res/"ablate"/"T4"/"other"                                            # a member no pack holds: its files stay
    write_predictions(df, "para", prediction_path(other, "para", "dev"))
    ens.mkdir(parents=True); (ens/"config.json").write_text(json.dumps(dict(members=[str(copy), str(other)], methods=dict(para="vote"))))
    before = read_predictions(prediction_path(copy, "para", "dev"), "para")
    assert PK.in_pack(prediction_path(copy, "para", "dev")) and not PK.in_pack(prediction_path(other, "para", "dev"))
    PK.main(["--results", str(res), "--headline", "--apply"])
    assert not (copy/PACK).exists() and not any((copy/"predictions").glob("*")), "the copy's files are its twin's pack"
    assert [f.name for f in (other/"predictions").iterdir()] == ["para-dev-output.csv.gz"]
    assert read_predictions(prediction_path(copy, "para", "dev"), "para").equals(before)
