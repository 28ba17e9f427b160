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
