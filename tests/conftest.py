import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The tokenized-data cache of the tests goes to a folder of their own (also for the processes they start), removed at exit:
# tests never read or fill the user's ~/.cache/minbert_nb
import atexit, shutil, tempfile
if "MINBERT_CACHE" not in os.environ:
    os.environ["MINBERT_CACHE"] = tempfile.mkdtemp(prefix="minbert-test-cache-")
    atexit.register(shutil.rmtree, os.environ["MINBERT_CACHE"], True)

import re
from pathlib import Path
import pytest
from datapaths import SAMPLE

SMALL_N = 60   # rows kept from each sample file by the `small_data` fixture

@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    "The first SMALL_N rows of every sample data file, in the same layout: the whole pipeline runs in seconds, on any machine"
    d = tmp_path_factory.mktemp("data")
    for sub in ("cs224n", "extra"):
        (d / sub).mkdir()
        for f in (SAMPLE / sub).glob("*.csv"):
            (d / sub / f.name).write_text("".join(f.read_text().splitlines(keepends=True)[:SMALL_N + 1]))
    # The SST training trees, cut at the same rows: line i is the tree of ids-sst-train.csv's row i (no header here)
    trees = (SAMPLE / "extra" / "sst-trees" / "train.txt").read_text(encoding="utf-8").split("\n")
    (d / "extra" / "sst-trees").mkdir()
    (d / "extra" / "sst-trees" / "train.txt").write_text("".join(s + "\n" for s in trees[:SMALL_N]), encoding="utf-8")
    return d

@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    """`module_tmp(name)`: a new folder for a test module's shared fixtures (trained runs, hundreds of MB of checkpoints each),
    all removed once the module's tests are done. Per-test `tmp_path` folders go when their test passes
    (pyproject.toml: tmp_path_retention_policy), and each notebook's temporary files when its last cell has run (below):
    the suite's disk use stays near that of its largest module instead of the sum of them all."""
    root = tmp_path_factory.mktemp("module")
    yield lambda name: Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    shutil.rmtree(root, ignore_errors=True)

# Each notebook's kernel gets a TMPDIR of its own: the hooks are in the repository's root conftest.py, since the
# notebooks (nbs/) are outside this folder and a conftest's hooks reach only the tests below it.


# Test files whose code never looks data up (pure functions of the package): identical in both passes
_NO_DATA_LOOKUP = {"test_bert.py", "test_optimizer.py", "test_losses.py", "test_samplers.py", "test_evaluate.py", "test_multitask.py",
                   "test_notebooks.py", "test_docs.py", "test_peft_reference.py", "test_adapter_pal_reference.py",
                   "test_smart_reference.py",
                   "test_ablate.py", "test_data_cache.py"}   # ... or that pass the committed sample explicitly

# A notebook that names none of these never reads the data folder (nor the sample): it runs the same in both passes
_DATA_WORDS = re.compile(r"data_or_sample|find_data_dir|MINBERT_DATA|load_split|ensure_data|data_dir|sample_data|shared/data")
_LOOKS = {}
def _looks_data_up(path) -> bool:
    if path not in _LOOKS: _LOOKS[path] = bool(_DATA_WORDS.search(path.read_text(encoding="utf-8")))
    return _LOOKS[path]

ROOT = Path(__file__).resolve().parents[1]

def _data_trace():
    "(files the last complete first pass ran, those of them that read the full data), or None without such a record"
    d = ROOT / ".data-trace"   # written by the root conftest.py
    if not (d / "complete").is_file(): return None
    read = lambda f: set(f.read_text().split()) if f.is_file() else set()
    reads = read(d / "reads.txt")
    if "?" in reads: return None   # a read outside any test file or notebook: which one cannot be said, so no record
    return set().union(*(read(f) for f in d.glob("ran-*.txt"))), reads

def pytest_collection_modifyitems(config, items):
    """`make test-nodata` (MINBERT_NODATA_PASS=1) is CI's second pass, with the data lookup pointed at an empty folder. It runs
    what can behave differently there. When the first pass just ran on this checkout with the full data, its record says
    which test files and notebooks read the data (the root conftest.py): the rest ran there and give the same result here,
    so they are left out. Without that record the rule is static: tests that read only the committed sample (the
    `small_data` fixture), and test files and notebooks that never look data up, are left out."""
    if os.environ.get("MINBERT_NODATA_PASS") != "1": return
    trace = _data_trace()
    if trace is not None:
        ran, read = trace
        rel = lambda it: os.path.relpath(it.path, ROOT)
        same = lambda it: rel(it) in ran and rel(it) not in read
    else:
        same = lambda it: ("small_data" in getattr(it, "fixturenames", ()) or it.path.name in _NO_DATA_LOOKUP
                           or (it.path.suffix == ".ipynb" and not _looks_data_up(it.path)))
    drop = [it for it in items if same(it)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [it for it in items if not same(it)]
