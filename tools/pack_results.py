"""Keep `results/` small enough to travel: prediction files only where something reads them, gzip-compressed.

What reads a run's predictions, and so keeps them:
  - an ensemble saved in results/ (its config.json lists its members): the members' *-output.csv of every split, and their
    *-raw.csv when the ensemble averages raw outputs (method `logits`); a member path that no longer exists (a run made in
    /tmp and copied into results/) is the folder of the same name beside the ensemble;
  - the best runs the README reports (`--headline`, default results/best-offline and results/best-mpnet): their dev
    predictions and their test predictions, the CS224N submission files (`results/quick`, the five-minute `make train`
    run, keeps config, metrics and history only: run it again for its predictions);
  - an ensemble folder keeps its own test predictions (the CS224N submission files); its dev predictions are dropped, as
    `minbert_ensemble` writes them again exactly from the kept members and metrics.json keeps their scores.
A kept file that its run's pack already gives back byte for byte (the run's own pack, or, for a row copied from another
table's run, that run's) is removed too. Every other prediction file is removed (run folders keep config.json,
metrics.json, history.csv and figures/; headroom.json keeps each run's dev scores). Kept files become FILE.csv.gz (gzip, mtime 0: the same bytes every time), and a kept run's dev
prediction files are then packed into its dev-predictions.json.gz (`pack_predictions`, 08f_evaluate: the ids once, in
results/dev-ids/, raw outputs as float32; checked to give every file back byte for byte), which every reader reads as it
reads the files. Packs made before raw outputs were stored as float32 (format 1) are packed again the same way. Rows of
the tables (results/ablate*) pack their own when an ensemble reads them.

Earlier runs: a table folder of results/ablate-scale-rates (runs made while the scales set every row's optimiser) that the
report reads no more, because every claim of its table has its three seeds under results/ablate at its paper's settings
(`superseded_earlier`), is removed; git history keeps it. Before it goes, the lines its claims get from those runs alone
are written into results/ablate-scale-rates/claims.csv (`keep_earlier_verdicts`), where the report reads them to set each
verdict at the papers' settings beside the one the earlier settings gave.

Figures: every PNG under results/ is stored with a palette of at most 256 colours (`pack_png`): a plot's lines, points and
text lose nothing visible, the file about 60% of its bytes. Its text chunks (the key a report figure keeps in `Comment`)
are kept; a PNG that is already a palette image, or that would not shrink, is left as it is.

    python tools/pack_results.py              # show what would change, and the sizes
    python tools/pack_results.py --apply      # do it
"""
import argparse, gzip, io, json, os, shutil, sys
from pathlib import Path
from PIL import Image, PngImagePlugin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minbert_nb.data import plain_or_gz
from minbert_nb.evaluate import PACK, pack_format, pack_predictions, packed_text, unpack_predictions, _pack_files
RAW_METHODS = {"logits"}
# earlier table folders the docs show as they are (nbs/tutorials/19_reproduce_a_table: "the quick results we measured"):
# kept when the report reads them no more
SHOWN = {"000-T10-quick", "004-T2-quick"}

def ensembles(results:Path) -> list:
    return sorted(p.parent for p in results.rglob("config.json") if "members" in json.loads(p.read_text()))

def skipped(f:Path, skip) -> bool:
    "Whether `f` lies in one of the `skip` folders (left as they are)"
    return any(f.resolve().is_relative_to((ROOT/s).resolve()) for s in skip)

def plan(results:Path, headline, skip) -> dict:
    "{prediction file: 'keep' | 'drop'} for every prediction file under `results` outside the `skip` folders"
    read, raw_read, ens = set(), set(), ensembles(results)
    for e in ens:
        c = json.loads((e/"config.json").read_text())
        # a member saved elsewhere first (e.g. /tmp/runs/opt-x/base) and copied beside its ensemble: found there by its name
        members = {(ROOT/m).resolve() if (ROOT/m).is_dir() else (e.parent/Path(m).name).resolve() for m in c["members"]}
        read |= members
        if set(c.get("methods", {}).values()) & RAW_METHODS: raw_read |= members
    read |= {(ROOT/h).resolve() for h in headline}
    out = {}
    for f in sorted(results.rglob("predictions/*.csv*")):
        if skipped(f, skip): continue
        run = f.parent.parent.resolve()
        if run in {e.resolve() for e in ens}: keep = "-test-" in f.name and "-output" in f.name
        elif "-raw" in f.name: keep = run in raw_read
        else: keep = run in read
        out[f] = "keep" if keep and not in_pack(f) else "drop"
    return out

def in_pack(f:Path) -> bool:
    """Whether its run's pack gives prediction file `f` back byte for byte: the run's own pack, or, for a copy of another run
    (`copied_from`: a table row built exactly like another table's), that run's (`pack_of`); the file is then not needed"""
    try: text = packed_text(f)
    except (FileNotFoundError, ValueError): return False
    return text is not None and (gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()).decode("utf-8") == text

def to_pack(pl:dict, results:Path) -> dict:
    "{run folder: its kept dev prediction files} of the runs outside the tables' folders (results/ablate*), which pack their own"
    runs = {}
    for f, what in pl.items():
        if what == "keep" and "-dev-" in f.name and not f.relative_to(results).parts[0].startswith("ablate"):
            runs.setdefault(f.parent.parent, []).append(f.with_name(f.name.removesuffix(".gz")))
    return runs

def repack(pack:Path, results:Path) -> int:
    "Pack `pack` again in the current format (raw outputs as float32) where it is older; bytes saved"
    if pack_format(pack) >= 2: return 0
    run, old = pack.parent, pack.stat().st_size
    written = unpack_predictions(run)                              # its files, byte for byte (those missing here)
    try: pack_predictions(run, [run/"predictions"/n for n in _pack_files(pack)], results)
    finally:
        for f in written: f.unlink()
    return old - pack.stat().st_size

def superseded(results:Path) -> list:
    "The table folders of results/ablate-scale-rates that no claim reads any more (`superseded_earlier`)"
    from minbert_nb.verdicts import superseded_earlier
    return superseded_earlier(results/"ablate", results/"ablate-scale-rates", results.parent)

def pack_png(path:Path, apply:bool=True) -> int:
    "Bytes saved by storing the PNG `path` with a palette of at most 256 colours, its text chunks kept (0: left as it is)"
    with Image.open(path) as im:
        if im.format != "PNG" or im.mode in ("P", "L", "1"): return 0
        info = PngImagePlugin.PngInfo()
        for k, v in im.text.items(): info.add_text(k, v)
        rgba = im.convert("RGBA")
        opaque = rgba.getchannel("A").getextrema()[0] == 255
        q = (rgba.convert("RGB").quantize(256) if opaque else rgba.quantize(256, method=Image.Quantize.FASTOCTREE))
        buf = io.BytesIO(); q.save(buf, "PNG", optimize=True, pnginfo=info, dpi=im.info.get("dpi", (72, 72)))
    data, old = buf.getvalue(), path.stat().st_size
    if len(data) >= old: return 0
    if apply:                                  # a new file beside it, then one rename: never half a figure
        tmp = path.with_name(path.name + ".packing"); tmp.write_bytes(data); os.replace(tmp, path)
    return old - len(data)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default=str(ROOT/"results"))
    p.add_argument("--headline", nargs="*", default=["results/best-offline", "results/best-mpnet"])
    p.add_argument("--skip", nargs="*", default=[], help="folders left as they are (e.g. runs being redone)")
    p.add_argument("--apply", action="store_true", help="change the files (default: only report)")
    a = p.parse_args(argv)
    results = Path(a.results)
    before = sum(f.stat().st_size for f in results.rglob("*") if f.is_file())
    gone = [d for d in superseded(results) if not skipped(d, a.skip) and d.name not in SHOWN]
    skip = [*a.skip, *gone]                    # removed folders need no packing
    pl, freed = plan(results, a.headline, skip), 0
    for d in gone:
        freed += sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        print(f"{d.relative_to(results.parent)}: every claim of its table has its seeds under {results.name}/ablate; "
              + ("its claims' earlier lines kept in claims.csv beside it, and removed" if a.apply else "to be removed (its claims' earlier lines kept first)"))
        if a.apply:
            from minbert_nb.verdicts import keep_earlier_verdicts
            keep_earlier_verdicts(d.parent, [json.loads((d/"ablate.json").read_text())["table"]], results.parent)
            shutil.rmtree(d)
    for f, what in pl.items():
        if what == "drop":
            freed += f.stat().st_size
            if a.apply: f.unlink()
        elif f.suffix == ".csv":
            z = f.with_name(f.name + ".gz")
            data = gzip.compress(f.read_bytes(), compresslevel=9, mtime=0)
            freed += f.stat().st_size - len(data)
            if a.apply:
                z.write_bytes(data)
                if gzip.decompress(z.read_bytes()) != f.read_bytes(): sys.exit(f"{z}: does not decompress to {f}; left both in place")
                f.unlink()
    runs = to_pack(pl, results)
    for run, files in sorted(runs.items()):
        if a.apply:
            size = sum(plain_or_gz(f).stat().st_size for f in files)
            pack_predictions(run, files, results)                   # (it checks every file comes back byte for byte)
            for f in files: plain_or_gz(f).unlink()
            freed += size - (run/PACK).stat().st_size
    old = [p for p in sorted(results.rglob(PACK)) if not skipped(p, skip) and pack_format(p) < 2]
    if a.apply: freed += sum(repack(p, results) for p in old)
    packed = [b for f in sorted(results.rglob("*.png")) if not skipped(f, skip) and (b := pack_png(f, a.apply))]
    freed += sum(packed)
    for d in sorted({f.parent for f in pl}, reverse=True):
        if a.apply and d.is_dir() and not any(d.iterdir()): d.rmdir()
    n = {w: sum(v == w for v in pl.values()) for w in ("keep", "drop")}
    done = "" if a.apply else "to be "         # a dry run says what it would do, in the same words
    print(f"{n['keep']} prediction files {done}kept (gzip), the dev ones of {len(runs)} runs {done}packed, {len(old)} older packs "
          f"{done}packed again, {n['drop']} {done}removed, {len(packed)} figures {done}given "
          f"a palette, {len(gone)} earlier table folders {done}removed; results/ {before / 2**20:.1f} MB -> "
          f"{(before - freed) / 2**20:.1f} MB" + ("" if a.apply else " (dry run: --apply to do it)"))

if __name__ == "__main__": main()
