"""Try bad inputs and faults against minbert_nb's command-line tools, as a careful user would, and classify each outcome.

Each case runs in a fresh temporary folder (its working directory), on a 60-row copy of the committed sample data
(tests/sample_data, as the `small_data` fixture of tests/conftest.py makes it), offline, single-threaded, with a
tokenized-data cache of its own. A tiny trained run (3 optimizer steps) and a run killed mid-way (SIGKILL after its first
`last.pt`) are made once at the start and copied into each case that needs them.

A case declares its setup, the command, what should happen ("refuse": a non-zero exit with a one-line message; "ok":
success) and the files that must survive it unchanged. Outcomes:

  clear      refused as it should be: non-zero exit, no Traceback, a message naming the problem
  vague      refused without a Traceback, but the message does not name the problem (or the exit code is not the expected one)
  traceback  a Python traceback reached the user
  silent     exit 0 where a refusal was due, or a wrong result (a stale file left, a path not expanded, ...)
  lost       a file that existed before the command is gone or changed, and should not be
  ok         an "ok" case that succeeded (with the right result)
  refused    an "ok" case that was refused (cleanly)
  timeout    the command ran past the case's time limit (killed)
  not tried  the case cannot be simulated here (e.g. permissions when running as root)

Usage (from the repository root; the checkout under test goes first on PYTHONPATH):

    python tools/tries.py --python .venv/bin/python --pythonpath /path/to/checkout --out tries.md
    python tools/tries.py ... --only export,config     # only the cases whose name contains one of these
    python tools/tries.py ... --only export --update   # rerun those cases into the existing report (tries.json beside it)
    python tools/tries.py --list                       # print the cases and exit

Commands are started as `python -c "from minbert_nb.commands import minbert_train; minbert_train()" ARGS...` (and the
same for minbert_eval, minbert_predict, minbert_export, minbert_ensemble, minbert_ablate); Predictor cases are small
`python -c` programs. Nothing outside the harness's own temporary folder is written or deleted; that folder is removed
at the end (--keep leaves it, to look at a case's files). A full run takes 10-20 minutes on 2 CPU cores.
"""
from __future__ import annotations
import argparse, hashlib, json, os, re, shutil, signal, subprocess, sys, tempfile, time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "tests" / "sample_data"
SMALL_N = 60   # rows kept from each sample file (tests/conftest.py's small_data)

TOOLS = {"train": ("minbert_nb.commands", "minbert_train"), "eval": ("minbert_nb.commands", "minbert_eval"),
         "predict": ("minbert_nb.commands", "minbert_predict"), "export": ("minbert_nb.export", "minbert_export"),
         "ensemble": ("minbert_nb.ensemble", "minbert_ensemble"), "ablate": ("minbert_nb.reproduce", "minbert_ablate")}

# A few optimizer steps on the small data: accepted nonsense really trains (and shows as "silent"), in seconds
TINY = ["--preset", "quick", "--epochs", "1", "--steps_per_epoch", "2", "--batch_size", "4", "--train_limit", "40",
        "--dev_limit", "24", "--eval_batch_size", "24", "--predict_test", "false", "--data_dir", "{data}"]
NEW = ["--out", "{runs}/new"]


# ----------------------------------------------------------------------------------------------------------- the cases
@dataclass
class Case:
    name: str
    expect: str                         # "refuse" or "ok"
    tool: str | None = None             # a key of TOOLS; "py": args[0] is a Python program; None: `runner` does it all
    args: list = field(default_factory=list)   # with {run} {run2} {runs} {data} {other} {T} placeholders
    setup: list = field(default_factory=list)  # callables f(T, h) run in order before the command
    keep: list = field(default_factory=list)   # paths (relative to T) that must exist, unchanged, afterwards
    names: list = field(default_factory=list)  # words of which one must appear in the refusal's last lines
    check: Callable | None = None       # f(T, output) -> reason the result is wrong, or None
    runner: Callable | None = None      # f(case, T, h) -> (outcome, exit code, message) for cases that are not one command
    skip: Callable | None = None        # f() -> reason the case cannot be tried here, or None
    teardown: Callable | None = None    # f(T) after the case, whatever happened
    timeout: int | None = None


# setup steps
def run_copy(name="run", base="run"):
    "Copy the base run `base` (run: finished; killed: SIGKILLed mid-way, with last.pt) to T/runs/NAME"
    def f(T, h): shutil.copytree(h.base / base, T / "runs" / name, symlinks=True)
    f.__name__ = f"copy {base} -> runs/{name}"; return f

def note(rel, text="keep me\n"):
    "An unrelated file the user owns at T/REL"
    def f(T, h): (T / rel).parent.mkdir(parents=True, exist_ok=True); (T / rel).write_text(text)
    return f

def edit_json(rel, edit):
    "Rewrite the JSON file T/REL: `edit(d)` returns the new content (a str is written as it is: damaged JSON)"
    def f(T, h):
        p = T / rel; new = edit(json.loads(p.read_text()))
        p.write_text(new if isinstance(new, str) else json.dumps(new, indent=2))
    return f

def remove(pattern):
    def f(T, h):
        for p in T.glob(pattern): p.unlink()
    return f

def write(rel, text):
    def f(T, h): (T / rel).parent.mkdir(parents=True, exist_ok=True); (T / rel).write_text(text)
    return f

def own_data(T, h):
    "A copy of the data that the case may change: T/data (use {T}/data in args)"
    shutil.copytree(h.data, T / "data")

def big_sst_row(T, h):
    "One SST training row whose sentence is 1,000,000 characters"
    f = T / "data" / "cs224n" / "ids-sst-train.csv"
    lines = f.read_text().splitlines(keepends=True)
    lines.insert(2, "999\tbig-row-id\t" + "x" * 1_000_000 + "\t3\n")
    f.write_text("".join(lines))

def tool_run(tool, *args):
    "Run a tool as a setup step (must succeed)"
    def f(T, h):
        r = h.call(tool, [h.fill(a, T) for a in args], T, timeout=300)
        if r.returncode != 0: raise RuntimeError(f"setup {tool} {' '.join(args)} failed: {last_line(r.stdout)}")
    return f

def set_home(T, h): (T / "home").mkdir(); h.env_extra["HOME"] = str(T / "home")

def mount_tiny_tmpfs(T, h):
    d = T / "full"; d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0: raise NotTried(f"cannot mount a 1 MB tmpfs as this user ({(r.stderr or r.stdout).strip()[:80]})")

def unmount_tmpfs(T):
    if os.path.ismount(T / "full"): subprocess.run(["umount", str(T / "full")], capture_output=True)

def as_root(): return "running as root: chmod does not stop root's writes" if os.geteuid() == 0 else None

def make_read_only(T, h):
    for p in [T / "runs" / "run", *(T / "runs" / "run").rglob("*")]:
        if p.is_dir(): p.chmod(0o555)

def eval_json_taken(T, h): (T / "runs" / "run" / "eval.json").mkdir()

def make_writable(T):
    for p in [T / "runs" / "run", *(T / "runs" / "run").rglob("*")] if (T / "runs" / "run").exists() else []:
        if p.is_dir(): p.chmod(0o755)

class NotTried(Exception): pass


# checks of an "ok" result (a reason when wrong)
def tilde_expanded(T, out):
    if (T / "~").exists(): return "a folder literally named '~' was created in the working directory"
    if not (T / "home" / "x").exists(): return "the run did not go to $HOME/x"

def stale_tmp_removed(T, out):
    if (T / "runs" / "run" / ".last.pt.tmp-99999").exists(): return "the stale .last.pt.tmp-99999 is still there after --resume"

RUN_FILES = ["runs/run/best.pt", "runs/run/config.json", "runs/run/metrics.json"]


# special runners
def two_trains(case, T, h):
    "Two minbert_train into the same --out at once: the second must be refused at once, naming the first's PID"
    args = [h.fill(a, T) for a in TINY + ["--steps_per_epoch", "20"] + NEW]
    a = h.popen("train", args, T); time.sleep(1.0); b = h.popen("train", args, T)
    outs = [h.wait(p, case.timeout) for p in (a, b)]
    (ra, oa), (rb, ob) = outs
    code = f"{ra}/{rb}"
    if ra == 0 and rb == 0: return "lost", code, "both exited 0: two trainings wrote the same run folder"
    if "timeout" in (ra, rb): return "timeout", code, ""
    other, out = (a, ob) if rb != 0 else (b, oa)
    msg = last_line(out)
    if "Traceback (most recent call last)" in out: return "traceback", code, msg
    return ("clear" if str(other.pid) in out else "vague"), code, msg

def interrupt(sig, want_rc):
    def f(case, T, h):
        "Signal a training once it has written last.pt; it should exit 128+signal, saying how to resume"
        args = [h.fill(a, T) for a in TINY + ["--steps_per_epoch", "40", "--checkpoint_every", "1"] + NEW]
        p = h.popen("train", args, T)
        if not h.wait_for(T / "runs" / "new" / "last.pt", p, 240):
            rc, out = h.wait(p, 5)
            return "timeout" if rc == "timeout" else "vague", rc, "no last.pt appeared: " + last_line(out)
        time.sleep(0.5)
        (os.killpg(p.pid, sig) if sig == signal.SIGINT else p.send_signal(sig))   # Ctrl-C reaches the group; kill PID the process
        rc, out = h.wait(p, 120)
        msg = last_line(out)
        if rc == "timeout": return "timeout", rc, msg
        if rc == 0: return "silent", rc, msg
        if "Traceback (most recent call last)" in out: return "traceback", rc, msg
        return ("clear" if rc == want_rc and "resume" in out.lower() else "vague"), rc, msg
    return f


PY_PRED = "from minbert_nb.predictor import Predictor; p = Predictor.from_run('{run}', device='cpu'{kw}); print({call})"
def pred(call, kw=""): return PY_PRED.replace("{call}", call).replace("{kw}", kw)
LONG = "' '.join(['wonderful'] * 1000)"

CASES = [
    # 0. controls: the harness itself works
    Case("control: tiny training", "ok", "train", TINY + NEW),
    Case("control: minbert_eval RUN", "ok", "eval", ["{run}"], [run_copy()], keep=["runs/run/best.pt"]),
    Case("control: minbert_predict RUN --splits dev", "ok", "predict", ["{run}", "--splits", "dev"], [run_copy()], keep=["runs/run/best.pt"]),
    # 1. export into the wrong folder
    Case("export: OUT = the run folder itself", "refuse", "export", ["{run}", "{run}", "--overwrite", "--verify", "false"],
         [run_copy()], keep=RUN_FILES),
    Case("export: OUT = the folder holding the runs", "refuse", "export", ["{run}", "{runs}", "--overwrite", "--verify", "false"],
         [run_copy(), run_copy("run2"), note("runs/notes.txt")], keep=RUN_FILES + ["runs/run2", "runs/notes.txt"]),
    Case("export: OUT = an unrelated non-empty folder", "refuse", "export", ["{run}", "{other}", "--overwrite", "--verify", "false"],
         [run_copy(), note("other/thesis.tex"), note("other/sub/data.csv")], keep=RUN_FILES + ["other"]),
    Case("export: OUT = its own earlier export (replace)", "ok", "export", ["{run}", "{T}/exp", "--overwrite", "--verify", "false"],
         [run_copy(), tool_run("export", "{run}", "{T}/exp", "--verify", "false")], keep=RUN_FILES),
    Case("export: OUT = a non-empty folder without --overwrite", "refuse", "export", ["{run}", "{other}", "--verify", "false"],
         [run_copy(), note("other/thesis.tex")], keep=["other"]),
    Case("export: RUN_DIR missing", "refuse", "export", ["{T}/nope", "{T}/exp", "--verify", "false"], names=["nope"]),
    # 2. two trainings into one folder
    Case("train: two at once into the same --out", "refuse", runner=two_trains, timeout=400),
    # 3. a finished run's folder as --out
    Case("train: --out at a finished run without checkpoints, --schedule bogus", "refuse", "train",
         TINY + ["--out", "{run}", "--schedule", "bogus"], [run_copy(), remove("runs/run/*.pt")],
         keep=["runs/run/config.json", "runs/run/metrics.json"], names=["schedule", "bogus"]),
    Case("train: --out at a finished run (no --resume)", "refuse", "train", TINY + ["--out", "{run}"], [run_copy()],
         keep=RUN_FILES, names=["resume", "exists", "already", "holds a finished"]),
    # 4. settings
    *[Case(f"train: {' '.join(s)}", "refuse", "train", TINY + list(s) + NEW, names=[s[0].lstrip("-").split("=")[0]] + n) for s, n in [
        # argparse reads "-1e-3" after a space as an option, so the negative value is also given with "="
        (("--lr_backbone", "-1e-3"), []), (("--lr_backbone=-1e-3",), []), (("--lr_heads", "-1"), []), (("--lr_backbone", "nan"), []),
        (("--grad_clip", "-1"), []), (("--warmup", "-5"), []), (("--max_length", "0"), []), (("--max_length", "100000"), ["512"]),
        (("--task_weights", '{"sstt": 2}'), ["sstt"]), (("--pcgrad", "true", "--tasks", "sst"), []),
        (("--hidden_dropout", "1.5"), []), (("--train_limit", "0"), []), (("--dev_limit", "0"), []),
        (("--batch_size", "0"), []), (("--eval_batch_size", "0"), []), (("--epochs", "0"), []), (("--steps_per_epoch", "0"), []),
        (("--grad_accum", "0"), []), (("--head_layers", "7"), []), (("--tasks", "sstt"), ["sstt"]),
        (("--device", "gpu0"), ["gpu0"]), (("--schedule", "bogus"), ["bogus"]), (("--sampler", "bogus"), ["bogus"]),
        (("--preset", "quik"), ["quik"]), (("--data_dir", "/nonexistent/data"), ["/nonexistent/data"])]],
    Case("train: --out=~/x (HOME set) is expanded", "ok", "train", TINY + ["--out=~/x", "--dry_run", "true"], [set_home],
         check=tilde_expanded),
    # 5. interrupted training
    Case("train: SIGINT (Ctrl-C) after last.pt", "refuse", runner=interrupt(signal.SIGINT, 130), timeout=400),
    Case("train: SIGTERM after last.pt", "refuse", runner=interrupt(signal.SIGTERM, 143), timeout=400),
    # 6. damaged run folders and config files
    *[Case(f"{tool}: config.json {what}", "refuse", tool, args, [run_copy(base=base), edit_json("runs/run/config.json", ed)],
           keep=["runs/run/best.pt"] + (["runs/run/last.pt"] if tool == "train" else []), names=["config.json"] + n)
      for tool, args, base in [("train", ["--resume", "{run}"], "killed"), ("eval", ["{run}"], "run"),
                                ("predict", ["{run}", "--splits", "dev"], "run")]
      for what, ed, n in [("is not valid JSON", lambda d: json.dumps(d)[:-40], []), ("holds a JSON list", lambda d: [d], []),
                          ("has a wrong-typed field", (lambda d: {**d, "epochs": "three"}) if tool == "train"
                                                      else (lambda d: {**d, "max_length": "long"}), ["epochs", "max_length"])]],
    *[Case(f"train: --config {what}", "refuse", "train", TINY + ["--config", path, "--dry_run", "true"] + NEW, setup,
           names=["config", path.replace("{T}/", "")]) for what, path, setup in [
        ("holds a list", "{T}/cfg.json", [write("cfg.json", '[{"epochs": 1}]')]),
        ("holds a string", "{T}/cfg.json", [write("cfg.json", '"quick"')]),
        ("names a folder", "{T}/cfgdir", [write("cfgdir/x", "")]),
        ("is missing", "{T}/missing.json", [])]],
    Case("train: a full disk (--out on a 1 MB tmpfs)", "refuse", "train", TINY + ["--out", "{T}/full/run"], [mount_tiny_tmpfs],
         names=["space", "disk", "full"], teardown=unmount_tmpfs),
    Case("eval: config.json head_layers 1 -> 2 (does not match the weights)", "refuse", "eval", ["{run}"],
         [run_copy(), edit_json("runs/run/config.json", lambda d: {**d, "head_layers": 2})], keep=["runs/run/best.pt"]),
    Case("eval: config.json pooling changed (does not match the training)", "refuse", "eval", ["{run}"],
         [run_copy(), edit_json("runs/run/config.json", lambda d: {**d, "pooling": "cls" if d.get("pooling") == "mean" else "mean"})],
         keep=["runs/run/best.pt"], names=["pooling"]),
    Case("eval: a read-only run folder", "refuse", "eval", ["{run}"], [run_copy(), make_read_only], keep=RUN_FILES,
         skip=as_root, teardown=make_writable, names=["permission", "read-only", "write"]),
    # as root, a write that fails all the same: eval.json's place taken by a folder
    Case("eval: eval.json cannot be written (a folder in its place)", "refuse", "eval", ["{run}"], [run_copy(), eval_json_taken],
         keep=RUN_FILES, names=["not saved", "eval.json"]),
    Case("predict: --splits bogus", "refuse", "predict", ["{run}", "--splits", "bogus"], [run_copy()], keep=RUN_FILES, names=["bogus"]),
    Case("train: a data file with a 1 MB line", "ok", "train",   # phrases off: the SST trees are matched to the rows one by one
         [a.replace("{data}", "{T}/data") for a in TINY] + ["--sst_phrases", "false"] + NEW,
         [own_data, big_sst_row]),
    # Predictor from Python
    Case("Predictor: sentiment(dict)", "refuse", "py", [pred("p.sentiment({'r1': 'A gorgeous movie.'})")], [run_copy()], names=["dict"]),
    Case("Predictor: paraphrase(dict of pairs)", "refuse", "py", [pred("p.paraphrase({('a?', 'b?'): 1})")], [run_copy()], names=["dict"]),
    Case("Predictor: embed(dict)", "refuse", "py", [pred("p.embed({'r1': 'x'}).shape")], [run_copy()], names=["dict"]),
    Case("Predictor: similarity(one string)", "refuse", "py", [pred("p.similarity('a b')")], [run_copy()], names=["string"]),
    Case("Predictor: a 1,000-word text", "ok", "py", [pred(f"p.sentiment([{LONG}])")], [run_copy()]),
    Case("Predictor: a 1,000-word text, run max_length 100000", "ok", "py", [pred(f"p.sentiment([{LONG}])")],
         [run_copy(), edit_json("runs/run/config.json", lambda d: {**d, "max_length": 100000})]),
    Case("Predictor: batch_size=0", "refuse", "py", [pred("p.batch_size", ", batch_size=0")], [run_copy()], names=["batch_size"]),
    Case("Predictor: batch_size=-2", "refuse", "py", [pred("p.sentiment(['x'])", ", batch_size=-2")], [run_copy()], names=["batch_size"]),
    Case("Predictor: amp='fp16'", "refuse", "py", [pred("p", ", amp='fp16'")], [run_copy()], names=["amp"]),
    Case("Predictor: device='gpu'", "refuse", "py", [pred("p").replace("device='cpu'", "device='gpu'")], [run_copy()], names=["device"]),
    # 7. a SIGKILL's leftover temporary checkpoint
    Case("train: --resume after SIGKILL removes a stale .last.pt.tmp-PID", "ok", "train", ["--resume", "{run}"],
         [run_copy(base="killed"), write("runs/run/.last.pt.tmp-99999", "partial")], check=stale_tmp_removed, timeout=400),
    # 8. ensembles and ablations into the wrong folder
    Case("ensemble: --out = a member run", "refuse", "ensemble", ["{run}", "{run2}", "--out", "{run}"], [run_copy(), run_copy("run2")],
         keep=RUN_FILES + ["runs/run/predictions"]),
    Case("ensemble: --out = the runs' parent folder", "refuse", "ensemble", ["{run}", "{run2}", "--out", "{runs}"],
         [run_copy(), run_copy("run2"), note("runs/notes.txt")], keep=RUN_FILES + ["runs/run2/best.pt", "runs/notes.txt"]),
    Case("ensemble: --out = a new folder", "ok", "ensemble", ["{run}", "{run2}", "--out", "{T}/ens"], [run_copy(), run_copy("run2")],
         keep=RUN_FILES),
    Case("ablate: --out = an unrelated non-empty folder", "refuse", "ablate",
         ["--table", "000-T10", "--scale", "tiny", "--rows", "1", "--out", "{other}", "--data_dir", "{data}", "--quiet", "true"],
         [note("other/thesis.tex"), note("other/results.csv", "a,b\n1,2\n")], keep=["other"], timeout=300),
]


# ----------------------------------------------------------------------------------------------------------- machinery
def last_line(out: str) -> str:
    lines = [l.strip() for l in (out or "").splitlines() if l.strip()]
    return lines[-1] if lines else ""

def small_data(dest: Path) -> Path:
    "The first SMALL_N rows of every sample data file (tests/conftest.py's small_data fixture)"
    for sub in ("cs224n", "extra"):
        (dest / sub).mkdir(parents=True)
        for f in (SAMPLE / sub).glob("*.csv"):
            (dest / sub / f.name).write_text("".join(f.read_text().splitlines(keepends=True)[:SMALL_N + 1]))
    trees = (SAMPLE / "extra" / "sst-trees" / "train.txt").read_text(encoding="utf-8").split("\n")
    (dest / "extra" / "sst-trees").mkdir()
    (dest / "extra" / "sst-trees" / "train.txt").write_text("".join(s + "\n" for s in trees[:SMALL_N]), encoding="utf-8")
    return dest

def snapshot(T: Path, rels: list) -> dict:
    "sha256 of every file under the protected paths"
    out = {}
    for rel in rels:
        p = T / rel
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else []
        if not files: out[rel] = None
        for f in files: out[str(f.relative_to(T))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out

def lost_files(T: Path, before: dict) -> list:
    lost = []
    for rel, h in before.items():
        f = T / rel
        if h is None: continue
        if not f.is_file(): lost.append(f"{rel} gone")
        elif hashlib.sha256(f.read_bytes()).hexdigest() != h: lost.append(f"{rel} changed")
    return lost


class Harness:
    def __init__(self, python, pythonpath, work: Path, timeout: int):
        self.python, self.work, self.timeout = python, work, timeout
        self.data = small_data(work / "data")
        self.base = work / "base"; self.base.mkdir()
        self.env = {**os.environ, "PYTHONPATH": str(pythonpath), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MINBERT_CACHE": str(work / "cache"), "MINBERT_DATA": str(self.data),
                    "MPLBACKEND": "Agg", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        self.env_extra = {}

    def fill(self, a: str, T: Path) -> str:
        "`a` with its placeholders replaced (str.replace, not format: arguments hold JSON and Python braces)"
        for k, v in {"{run}": T / "runs" / "run", "{run2}": T / "runs" / "run2", "{runs}": T / "runs", "{data}": self.data,
                     "{other}": T / "other", "{T}": T}.items(): a = a.replace(k, str(v))
        return a

    def argv(self, tool, args):
        if tool == "py": return [self.python, "-c", args[0]]
        mod, fn = TOOLS[tool]
        return [self.python, "-c", f"from {mod} import {fn}; {fn}()", *args]

    def call(self, tool, args, cwd, timeout=None):
        return subprocess.run(self.argv(tool, args), cwd=cwd, env={**self.env, **self.env_extra}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout or self.timeout)

    def popen(self, tool, args, cwd):
        log = open(Path(cwd) / f".tries-{time.monotonic_ns()}.log", "w+")
        p = subprocess.Popen(self.argv(tool, args), cwd=cwd, env={**self.env, **self.env_extra}, stdout=log, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        p.log = log
        return p

    def wait(self, p, timeout=None):
        "(exit code or 'timeout', output) of a process started by popen; killed (its own process group) on timeout"
        try: rc = p.wait(timeout or self.timeout)
        except subprocess.TimeoutExpired:
            self.kill(p); rc = "timeout"
        p.log.seek(0); out = p.log.read(); p.log.close()
        return rc, out

    def kill(self, p):
        try: os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError: pass
        p.wait()

    def wait_for(self, path: Path, p, timeout) -> bool:
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            if path.exists(): return True
            if p.poll() is not None: return False
            time.sleep(0.2)
        return False

    def make_bases(self):
        "The tiny finished run, and a run SIGKILLed after its first last.pt (for --resume)"
        T = self.work / "base-tmp"; T.mkdir()
        r = self.call("train", [self.fill(a, T) for a in TINY + ["--steps_per_epoch", "3", "--out", str(self.base / "run")]], T, 600)
        if r.returncode != 0: sys.exit(f"tries: the tiny base run failed; nothing can be tried:\n{r.stdout[-3000:]}")
        p = self.popen("train", [self.fill(a, T) for a in TINY + ["--steps_per_epoch", "30", "--checkpoint_every", "1",
                                                                    "--out", str(self.base / "killed")]], T)
        ok = self.wait_for(self.base / "killed" / "last.pt", p, 300)
        time.sleep(1.0)   # let the rename settle: last.pt is complete once it exists (written to a temporary, then renamed)
        self.kill(p); p.log.close()
        if not ok: sys.exit("tries: the run to kill never wrote last.pt")

    def run_case(self, case: Case, i: int) -> dict:
        row = dict(case=case.name, expected=case.expect, outcome="", code="", message="", note="")
        if case.skip and (why := case.skip()):
            return {**row, "outcome": "not tried", "message": why}
        T = self.work / f"case-{i:02d}"; T.mkdir(); (T / "runs").mkdir()
        self.env_extra = {}
        t0 = time.monotonic()
        try:
            for step in case.setup: step(T, self)
            if case.runner:
                outcome, code, msg = case.runner(case, T, self)
                return {**row, "outcome": outcome, "code": code, "message": msg, "secs": time.monotonic() - t0}
            before = snapshot(T, case.keep)
            try:
                r = self.call(case.tool, [self.fill(a, T) for a in case.args], T, case.timeout)
                rc, out = r.returncode, r.stdout
            except subprocess.TimeoutExpired as e:
                rc, out = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            lost = lost_files(T, before)
            outcome, why = classify(case, rc, out, lost, case.check(T, out) if case.check and rc == 0 else None)
            return {**row, "outcome": outcome, "code": rc, "message": last_line(out), "note": why, "secs": time.monotonic() - t0}
        except NotTried as e:
            return {**row, "outcome": "not tried", "message": str(e)}
        except Exception as e:   # the harness's own failure, reported as such
            return {**row, "outcome": "harness error", "message": f"{type(e).__name__}: {e}"}
        finally:
            if case.teardown: case.teardown(T)
            shutil.rmtree(T, ignore_errors=True)


def classify(case: Case, rc, out: str, lost: list, wrong: str | None) -> tuple:
    "(outcome, why) of one command's result"
    if lost: return "lost", "; ".join(lost[:3])
    if rc == "timeout": return "timeout", f"killed after {case.timeout}s"
    tb = "Traceback (most recent call last)" in out
    if case.tool == "py":   # a Python API refuses by raising: a traceback ending in a one-line ValueError/TypeError is its message
        tb = not re.match(r"(ValueError|TypeError|FileNotFoundError): ", last_line(out))
    if case.expect == "ok":
        if rc == 0: return ("silent", wrong) if wrong else ("ok", "")
        return ("traceback" if tb else "refused"), ""
    if rc == 0: return "silent", "exit 0: accepted" + (f"; {wrong}" if wrong else "")
    if tb: return "traceback", ""
    tail = " ".join([l for l in out.splitlines() if l.strip()][-3:]).lower()
    if not tail: return "vague", "no message"
    if case.names and not any(n.lower() in tail for n in case.names): return "vague", f"the message names none of {case.names}"
    return "clear", ""


def md(s) -> str: return str(s).replace("|", "\\|").replace("\n", " ")

def report(rows: list, args, secs: float) -> str:
    counts = {}
    for r in rows: counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    head = subprocess.run(["git", "-C", str(args.pythonpath), "log", "-1", "--format=%h %s"], capture_output=True, text=True).stdout.strip()
    out = [f"# tries: bad inputs and faults against the command-line tools", "",
           f"Checkout: `{args.pythonpath}` ({head[:100] or 'not a git checkout'}); python `{args.python}`; "
           f"{len(rows)} cases; this invocation took {secs / 60:.1f} min ({time.strftime('%Y-%m-%d %H:%M')}).", "",
           "Summary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])), "",
           "| # | case | expected | outcome | exit | last line of the output | note |", "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        msg = r["message"] if len(r["message"]) <= 160 else r["message"][:157] + "..."
        out.append(f"| {i} | {md(r['case'])} | {r['expected']} | **{r['outcome']}** | {r['code']} | {md(msg)} | {md(r.get('note', ''))} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the tools (with torch etc.)")
    ap.add_argument("--pythonpath", default=str(REPO), help="the checkout whose minbert_nb is tried (first on PYTHONPATH)")
    ap.add_argument("--out", default="tries.md", help="the markdown report to write")
    ap.add_argument("--only", help="comma-separated substrings: only the cases whose name contains one")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per command (default 300)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (printed)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--update", action="store_true", help="rerun the --only cases into the existing report (OUT and OUT.json)")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.only or any(s.strip() in c.name for s in args.only.split(","))]
    if args.list:
        for c in cases: print(f"{c.expect:6}  {c.name}")
        return
    old = {}
    if args.update:   # rerun the selected cases into an earlier report (its .json), keeping the other rows
        old = {r["case"]: r for r in json.loads(Path(args.out).with_suffix(".json").read_text())}
    order = {c.name: i for i, c in enumerate(CASES)}
    merged = lambda rows: sorted({**old, **{r["case"]: r for r in rows}}.values(), key=lambda r: order.get(r["case"], len(order)))
    work = Path(tempfile.mkdtemp(prefix="minbert-tries-"))
    t0, rows = time.monotonic(), []
    try:
        h = Harness(args.python, Path(args.pythonpath).resolve(), work, args.timeout)
        print(f"tries: making the base runs in {work}", flush=True)
        h.make_bases()
        for i, c in enumerate(cases, 1):
            r = h.run_case(c, i); rows.append(r)
            print(f"[{i}/{len(cases)}] {r['outcome']:10} {c.name}  ({r.get('secs', 0):.0f}s) {r['message'][:100]}", flush=True)
            Path(args.out).write_text(report(merged(rows), args, time.monotonic() - t0))   # a partial report survives an interrupted run
            Path(args.out).with_suffix(".json").write_text(json.dumps(merged(rows), indent=1, default=str))
    finally:
        if args.keep: print(f"tries: kept {work}")
        else: shutil.rmtree(work, ignore_errors=True)
    print(f"tries: wrote {args.out}")


if __name__ == "__main__":
    main()
