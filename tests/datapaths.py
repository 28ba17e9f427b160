"Where the tests find data: the full CS224N files when present, else the committed sample"
import os
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
# The full data: $MINBERT_DATA, else ../shared/data beside the repository. CI runs the suite both with it and with
# MINBERT_DATA pointing at an empty folder; tests that need the full files are then skipped, each saying so by name.
DATA = Path(os.environ.get("MINBERT_DATA") or ROOT.parent / "shared" / "data")
FULL_DATA = (DATA / "cs224n" / "ids-sst-train.csv").is_file()
SAMPLE = ROOT / "tests" / "sample_data"   # the committed sample (tests/sample_data/README.md): every other test uses it

def needs_full_data(what: str):
    "Skip marker for a test that checks facts of the full CS224N files (row counts, hashes, known bad rows)"
    return pytest.mark.skipif(not FULL_DATA, reason=f"needs the full CS224N data ({what}); not found at {DATA}: "
                                                    "set MINBERT_DATA or run `minbert_data --out DIR`")


def tiny_backbone_dir() -> str:
    """A tiny random BERT (2 layers of width 32, the embedded backbone's tokenizer) made once per test process: for the
    trainings of tests that check plumbing (resume, stops, transforms, folders), not scores. Training MiniLM there cost
    minutes per test; the same code paths run on this model in seconds."""
    global _TINY
    if _TINY is None:
        import atexit, shutil, tempfile
        from minbert_nb.pretrained import tiny_backbone
        d = tempfile.mkdtemp(prefix="minbert-test-tiny-bert-"); atexit.register(shutil.rmtree, d, True)
        _TINY = str(tiny_backbone(Path(d) / "tiny-bert"))
    return _TINY

_TINY = None

def run_command(command, *args, env: dict | None = None):
    """A console command (`minbert_train`, `minbert_data`, ...) called with `args` in this process, as its console-script
    wrapper runs it (`sys.exit(command())`), where the process itself is not what a test checks (a process of its own
    costs seconds of imports on 2 cores). Returns its exit status, stdout and stderr; an exit message goes to stderr, as
    Python prints it. `env` is set around the call only."""
    import contextlib, io, sys, types
    out, err, saved = io.StringIO(), io.StringIO(), {k: os.environ.get(k) for k in (env or {})}
    os.environ.update({k: str(v) for k, v in (env or {}).items()})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = command([str(a) for a in args])
                rc = rc if isinstance(rc, int) else 0                     # the wrapper exits 0 when a command returns its result
            except SystemExit as e:
                rc = e.code
                if rc is not None and not isinstance(rc, int): print(rc, file=sys.stderr); rc = 1   # as sys.exit(message) does
    finally:
        for k, v in saved.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    return types.SimpleNamespace(returncode=rc or 0, stdout=out.getvalue(), stderr=err.getvalue())
