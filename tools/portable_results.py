"""Rewrite the machine paths in the committed run files under results/ as paths a clone can read.

    python tools/portable_results.py            # rewrite in place (tracked text files under results/)
    python tools/portable_results.py --check    # list the files that still name a machine's folder; exit 1 if any

Runs made before `write_json` wrote portable paths recorded the folders of the machine that made them: the checkout
(/work/main, a second checkout, a temporary worktree), the data beside it (/work/shared/data), the home cache, a GPU
machine's temporary folder. This maps each to what a reader can follow:

- a run file's own folder (`out` in config.json, `folder` and `runs` in row.json): where the file is now, from the
  repository's root (runs moved to results/ablate-scale-rates say so);
- a path inside a checkout: the same path from the repository's root (results/ablate/... of a moved table: its new folder);
- the data beside the checkout: ../shared/...; the home folder: ~/...; a temporary folder: $TMPDIR/...
"""
from __future__ import annotations
import argparse, json, os, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".json", ".csv", ".md", ".log", ".txt", ".jsonl", ".yaml", ".yml", ".tsv")
ABSOLUTE = re.compile(r"(?<![\w.~$/-])/(?:work|tmp|root|home|Users|mnt|var|opt|srv)/[^\s\"',;)\]|`]*")
MOVED = "results/ablate-scale-rates/"
CHECKOUTS = re.compile(r"^/(?:work/(?:main|runner\d*|ciclone)|tmp/wt-[^/]+)(?:/|$)")


def _moved(rel:str, here:str) -> str:
    "A checkout path `rel` as it is now: a table folder of results/ablate moved beside it, for files that moved with it"
    if here.startswith(MOVED) and rel.startswith("results/ablate/") and not rel.startswith("results/ablate/learning-curve"):
        return MOVED + rel[len("results/ablate/"):]
    return rel


def portable(s:str, here:str) -> str:
    "One absolute path `s` as a portable one (see the module's text); `here`: the repository path of the file it is in"
    if m := CHECKOUTS.match(s): return _moved(s[m.end():], here) or "."
    if s.startswith("/tmp/gpu-results/"): return _moved("results/" + s[len("/tmp/gpu-results/"):], here)
    if s.startswith("/work/.device/"): return re.sub(r"^/work/\.device/[^/]+/", "", s)
    if s.startswith("/work/"): return "../" + s[len("/work/"):]
    if s.startswith("/root/"): return "~/" + s[len("/root/"):]
    if s.startswith("/tmp/"): return "$TMPDIR/" + s[len("/tmp/"):]
    return s


def _text(t:str, here:str) -> str:
    t = ABSOLUTE.sub(lambda m: portable(m.group(0), here), t)
    if here.startswith(MOVED) and not here.endswith("README.md"):   # run files' paths recorded before the move: now beside it
        t = re.sub(r"(?<![\w/-])results/ablate/(?!learning-curve)", MOVED, t)
    return t


def _json_file(f:Path, rel:str) -> str:
    d = json.loads(f.read_text())
    folder = os.path.dirname(rel)
    if f.name == "config.json" and isinstance(d, dict) and "out" in d and "members" not in d: d["out"] = folder
    if f.name == "row.json" and isinstance(d, dict) and "folder" in d:
        old = str(d.get("folder") or "")
        if os.sep in old:    # an old record: folder and runs as its writer saw them; runs relative to the folder now
            d["runs"] = [os.path.normpath(os.path.relpath(r, old)) for r in d.get("runs", [])]
        d["folder"] = os.path.basename(folder)
    fix = lambda o: ({k: fix(v) for k, v in o.items()} if isinstance(o, dict) else [fix(v) for v in o] if isinstance(o, list)
                     else _text(o, rel) if isinstance(o, str) else o)
    return json.dumps(fix(d), indent=2, ensure_ascii=False) + "\n"


def tracked() -> list:
    out = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p and p.endswith(TEXT) and (ROOT/p).is_file()]   # not one deleted since the last commit


def machine_paths(rel:str) -> list:
    "The absolute paths a tracked file still names"
    return ABSOLUTE.findall((ROOT/rel).read_text(errors="replace"))


def main(argv=None):
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0]); a.add_argument("--check", action="store_true")
    a = a.parse_args(argv)
    if a.check:
        bad = [(r, p) for r in tracked() if (p := machine_paths(r))]
        for r, p in bad: print(f"{r}: {p[0]}" + (f" (and {len(p) - 1} more)" if len(p) > 1 else ""))
        sys.exit(1 if bad else 0)
    changed = 0
    for rel in tracked():
        f = ROOT/rel; old = f.read_text(errors="replace")
        try: new = _json_file(f, rel) if f.suffix == ".json" and f.name in ("config.json", "row.json") else _text(old, rel)
        except json.JSONDecodeError: new = _text(old, rel)
        if new != old: f.write_text(new); changed += 1
    print(f"{changed} files rewritten")


if __name__ == "__main__": main()
