"""nbval integration for nbdev notebooks.

nbdev-clean stores notebooks with their outputs but without execution counts; nbval then refuses every cell with an
output ("Unrun reference cell has outputs"). We number the code cells as nbval collects them, so outputs are kept for
the docs and readers, and `--nbval-lax` only checks that every cell runs. Cells flagged with nbdev's test flags
(`#| notest`, `#| gpu`, see `tst_flags` in pyproject.toml) are skipped, exactly as `nbdev-test` skips them.
"""
import os, re, shutil, tempfile
import pytest
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_SKIP = re.compile(r"^#\|\s*(notest|gpu)\b", re.M)

try:
    from nbval.plugin import IPyNbFile
except ImportError:  # nbval not installed: notebooks are simply not collected
    IPyNbFile = None

if IPyNbFile is not None and not getattr(IPyNbFile, "_minbert_patched", False):
    _collect = IPyNbFile.collect
    def collect(self):
        for item in _collect(self):
            if item.cell.get("execution_count") is None: item.cell.execution_count = item.cell_num + 1
            if _SKIP.search(item.cell.source): item.options["skip"] = True
            yield item
    IPyNbFile.collect, IPyNbFile._minbert_patched = collect, True

collect_ignore_glob = ["nbs/_proc/*", "_proc/*"]

# Each notebook's kernel gets a temporary folder of its own (TMPDIR, read by its `tempfile` calls), removed when the
# notebook's last cell has run and its kernel has stopped. The notebooks demonstrate trainings in `tempfile.mkdtemp()`
# folders; without this, a whole nbval pass would leave several GB behind in the system's temporary folder (5.7 GB in
# one `.ci/run` of e9e5e68, when these hooks sat in tests/conftest.py, which reaches no notebook).
_NB_TMP = {}

@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    nb = item.parent
    if item.path.suffix == ".ipynb" and nb not in _NB_TMP:   # before the first cell's setup starts the kernel
        _NB_TMP[nb] = (tempfile.mkdtemp(prefix=f"nbval-{item.path.stem}-"), os.environ.get("TMPDIR"))
        os.environ["TMPDIR"] = _NB_TMP[nb][0]
    return (yield)

@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try: return (yield)                                       # the notebook's kernel stops here when the next item is elsewhere
    finally:
        nb = item.parent
        if nb in _NB_TMP and (nextitem is None or nextitem.parent is not nb):
            d, old = _NB_TMP.pop(nb)
            if old is None: os.environ.pop("TMPDIR", None)
            else: os.environ["TMPDIR"] = old
            shutil.rmtree(d, ignore_errors=True)
