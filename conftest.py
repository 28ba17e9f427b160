"""nbval integration for nbdev notebooks.

nbdev-clean stores notebooks with their outputs but without execution counts; nbval then refuses every cell with an
output ("Unrun reference cell has outputs"). We number the code cells as nbval collects them, so outputs are kept for
the docs and readers, and `--nbval-lax` only checks that every cell runs. Cells flagged with nbdev's test flags
(`#| notest`, `#| gpu`, see `tst_flags` in pyproject.toml) are skipped, exactly as `nbdev-test` skips them, and so is
a notebook's closing `nbdev.nbdev_export()` (below).

Stored outputs stay true: a cell marked `#| check_output` (a cell whose output is deterministic: a value, a table, a
prediction) has its fresh output compared with the stored one, as nbval's strict mode does, and the test fails when they
differ; `make nbs NB=nbs/X.ipynb` refreshes a notebook's outputs. Numbers may differ within a tolerance (0.1%, or 1e-5: another
CPU's fp32 kernels round differently), the rest of the text not at all, and everything trains in fp32 under test. The stored outputs were made with the full data, so the
comparison is made only where the full data is found (and not in CI's no-data pass).
"""
import copy, os, re, shutil, tempfile
from pathlib import Path
import pytest
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `amp auto` trains in fp32 on every CPU under test (and `make nbs`), as the stored outputs were made: on a CPU with native
# bf16 it would train in bf16 (00_core) and every checked score would move. The bf16 paths have tests of their own that ask
# for bf16; MINBERT_CPU_BF16=1 runs the suite in bf16 (the checked outputs then differ).
os.environ.setdefault("MINBERT_CPU_BF16", "0")
# The commands the tests start as processes do not start themselves again with jemalloc (00_core: a second interpreter
# and torch import each); tests/test_malloc.py checks that restart on its own.
os.environ.setdefault("MINBERT_MALLOC", "glibc")

_SKIP = re.compile(r"^#\|\s*(notest|gpu)\b", re.M)
# A notebook's closing `nbdev.nbdev_export()` rewrites the package's modules: under test it would race the other
# notebooks' kernels importing them (a no-data CI pass once imported a half-written lora.py). Tests export nothing.
_EXPORT = re.compile(r"^\s*(import nbdev;\s*)?nbdev\.nbdev_export\(\)\s*$", re.M)

try:
    from nbval.plugin import IPyNbFile
    import nbval.kernel
except ImportError:  # nbval not installed: notebooks are simply not collected
    IPyNbFile = None

# A notebook's kernel is started up to three times. jupyter_client picks five free TCP ports for a kernel, closes them and
# lets the kernel bind them; with two workers starting kernels (and tests opening connections) another process can take
# one in between, and the kernel exits ("Kernel died before replying to kernel_info"; ZMQ's "Address already in use").
# One such start failed all 15 cells of 05a_lora in a CI run of 6b6aa83 that otherwise passed. A kernel that dies three
# times is a real failure, reported as before.
KERNEL_STARTS = 3

def _start_kernel_retrying(*args, _start=None, **kwargs):
    "nbval's `start_new_kernel`, tried `KERNEL_STARTS` times when the kernel dies or does not answer"
    import sys, time
    start = _start or _nbval_start_new_kernel
    for attempt in range(1, KERNEL_STARTS + 1):
        try: return start(*args, **kwargs)
        except RuntimeError as e:
            if attempt == KERNEL_STARTS: raise
            print(f"conftest.py: a notebook kernel failed to start ({e}); starting it again ({attempt + 1} of {KERNEL_STARTS})",
                  file=sys.stderr)
            time.sleep(attempt)

_start_kernel_retrying.retrying = True
if IPyNbFile is not None:
    _nbval_start_new_kernel = nbval.kernel.start_new_kernel
    if getattr(_nbval_start_new_kernel, "retrying", False):   # this file loaded a second time (a test reads its helpers)
        _nbval_start_new_kernel = _nbval_start_new_kernel.__globals__["_nbval_start_new_kernel"]
    nbval.kernel.start_new_kernel = _start_kernel_retrying   # `RunningKernel` looks the name up in its module at each start

_CHECK = re.compile(r"^#\|\s*check_output\b", re.M)

def _full_data_here() -> bool:
    "Whether the notebooks read the full data in this run, as when their outputs were stored"
    if os.environ.get("MINBERT_NODATA_PASS") == "1": return False
    try:
        from minbert_nb.data import find_data_dir, has_full_data
        return has_full_data(find_data_dir())
    except Exception: return False

if IPyNbFile is not None and not getattr(IPyNbFile, "_minbert_patched", False):
    _collect = IPyNbFile.collect
    def collect(self):
        check = None
        for item in _collect(self):
            if item.cell.get("execution_count") is None: item.cell.execution_count = item.cell_num + 1
            if _SKIP.search(item.cell.source) or _EXPORT.search(item.cell.source): item.options["skip"] = True
            if _CHECK.search(item.cell.source):
                if check is None: check = _full_data_here()
                item.options["check"] = check
            yield item
    IPyNbFile.collect, IPyNbFile._minbert_patched = collect, True
    from nbval.plugin import IPyNbCell
    _repr_failure = IPyNbCell.repr_failure
    def repr_failure(self, excinfo, *a, **k):
        msg = _repr_failure(self, excinfo, *a, **k)
        if "Cell outputs differ" in str(msg):
            msg = (f"{msg}\n{self.path.name}, code cell {self.cell_num} (marked `#| check_output`): its stored output no longer matches "
                   f"what it produces. If the change is intended, refresh the notebook's outputs: make nbs NB={os.path.relpath(self.path, ROOT)}")
        return msg
    IPyNbCell.repr_failure = repr_failure

    # What a checked cell's output is compared on: its results (values, tables, printed lines, figures), not the warnings a
    # library prints on stderr (they depend on what else ran first in the process). Paths of the machine that ran it are
    # compared as placeholders (the repository, the data folder, temporary run folders, site-packages, the data cache), and so are durations.
    # Numbers are compared within a tolerance (`_align`): another CPU's fp32 kernels round differently (AVX2 and AVX-512
    # give different last digits, and a training carries them into its scores).
    _compare = IPyNbCell.compare_outputs
    def compare_outputs(self, test, ref, skip_compare=None):
        keep = lambda outs: [o for o in outs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
        return _compare(self, *_align_outputs(self, keep(test), keep(ref)), skip_compare)
    IPyNbCell.compare_outputs = compare_outputs
    _setup_sanitize = IPyNbFile.setup_sanitize_files
    def setup_sanitize_files(self):
        _setup_sanitize(self)
        self.sanitize_patterns.update(_sanitize_patterns())
    IPyNbFile.setup_sanitize_files = setup_sanitize_files

# A checked output's numbers may differ from the stored ones by 0.1% of their size, or by 1e-5 (the rounding noise of fp32:
# "largest difference 2.2e-06"); integers and all the text around the numbers must be the same.
REL_TOL, ABS_TOL = 1e-3, 1e-5
_NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")

def _close(a:str, b:str) -> bool:
    if a == b: return True
    if re.fullmatch(r"[-+]?\d+", a) or re.fullmatch(r"[-+]?\d+", b): return False    # counts, indices, seeds: exactly
    x, y = float(a), float(b)
    return abs(x - y) <= max(REL_TOL * max(abs(x), abs(y)), ABS_TOL)

def _align(test:str, ref:str) -> str:
    """`test` with each of its numbers that is close to `ref`'s number in the same place written as `ref` writes it; unchanged
    where the text around the numbers differs. Numbers beyond the tolerance stay as they are, so the failure's diff shows them"""
    if test == ref or _NUM.split(test) != _NUM.split(ref): return test
    nums = iter(_NUM.findall(ref))
    return _NUM.sub(lambda m: (r if _close(m.group(), r := next(nums)) else m.group()), test)

def _align_outputs(cell, test:list, ref:list) -> tuple:
    """The fresh outputs `test` and the stored ones `ref`, sanitized as nbval sanitizes them, with `test`'s numbers aligned to
    `ref`'s (`_align`); as given where their number or kinds differ (nbval then reports the difference)"""
    if len(test) != len(ref) or any(t.get("output_type") != r.get("output_type") for t, r in zip(test, ref)): return test, ref
    text = lambda k, v: isinstance(v, str) and not k.startswith("image/")
    def one(t, r):
        t, r = copy.copy(t), copy.copy(r)
        if text("text", t.get("text")) and text("text", r.get("text")):                 # a stream's printed lines
            r["text"] = cell.sanitize(r["text"]); t["text"] = _align(cell.sanitize(t["text"]), r["text"])
        if isinstance(t.get("data"), dict) and isinstance(r.get("data"), dict):        # a result's MIME bundle
            r["data"] = {m: (cell.sanitize(v) if text(m, v) else v) for m, v in r["data"].items()}
            t["data"] = {m: (_align(cell.sanitize(v), r["data"][m]) if text(m, v) and text(m, r["data"].get(m)) else v)
                         for m, v in t["data"].items()}
        return t, r
    pairs = [one(t, r) for t, r in zip(test, ref)]
    return [t for t, _ in pairs], [r for _, r in pairs]

def _sanitize_patterns() -> dict:
    "regex -> placeholder, applied to stored and fresh outputs alike before they are compared"
    pats = {r"(?:/[\w.+-]+)+?/(?:site|dist)-packages/": "site-packages/",
            r"(?:/private)?(?:/tmp|/var/tmp|/var/folders/[\w.-]+/[\w.-]+/T)(?:/[\w.-]+)*?/tmp[\w.-]+": "<tmp>",
            r"(?:/[\w.+-]+)+?/\.cache/minbert_nb/": "<cache>/",
            r"(?:/[\w.+-]+)+?/(?=(?:minbert_nb|nbs|tests|results|tools)/)": "<repo>/",
            r"\b\d+(?:\.\d+)? ?s\b": "<t>s"}                     # durations in training logs ("(5s train)", "2.4 s"): never the same twice
    try:
        from minbert_nb.data import find_data_dir
        pats = {re.escape(str(find_data_dir())): "<data>", **pats}
    except Exception: pass
    # the data folder the outputs were stored with: the checkout's sibling `shared/data`, wherever the checkout was
    pats = {r"(?:/[\w.+-]+)*?/shared/data(?![\w-])": "<data>", **pats}
    return pats

collect_ignore_glob = ["nbs/_proc/*", "_proc/*"]

# CI's first pass records which test files and notebooks read the full data (`make test` sets MINBERT_DATA_TRACE and puts
# tests/trace on PYTHONPATH: its sitecustomize.py hooks every process of the suite). The second pass, without the data,
# then runs those and leaves out what ran here without reading the data: that gives the same result in both passes.
ROOT = Path(__file__).resolve().parent
TRACE_DIR = ROOT / ".data-trace"   # ignored by git; `reads.txt`, `ran-*.txt` and `complete`, remade by each first pass

def _worker(config): return getattr(config, "workerinput", {}).get("workerid")

def _tracing(config) -> bool:
    "Whether this process records for the trace: the first pass's main process, or one of its workers (not a pytest a test starts)"
    return bool(os.environ.get("MINBERT_DATA_TRACE_ROOT")) and (config.stash.get(_OWNER, False) or bool(_worker(config)))

_OWNER = pytest.StashKey[bool]()

def pytest_configure(config):
    if os.environ.get("MINBERT_NODATA_PASS") == "1" or os.environ.get("MINBERT_DATA_TRACE") != "1" or _worker(config): return
    from minbert_nb.data import find_data_dir, has_full_data
    try: data = find_data_dir()
    except FileNotFoundError: data = None
    shutil.rmtree(TRACE_DIR, ignore_errors=True)
    if data is None or not has_full_data(data): return      # no data here: nothing to trace, and the second pass runs everything
    TRACE_DIR.mkdir()
    os.environ["MINBERT_DATA_TRACE"] = str(TRACE_DIR / "reads.txt")   # before the workers start: they and theirs inherit it
    os.environ["MINBERT_DATA_TRACE_ROOT"] = str(data)                  # (a pytest that a test starts then finds a path, not 1)
    config.stash[_OWNER] = True
    import importlib.util                                               # this process is traced too
    spec = importlib.util.spec_from_file_location("minbert_data_trace", ROOT / "tests" / "trace" / "sitecustomize.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))

# The longest files first (seconds of a first pass on 2 cores, measured). pytest-xdist's `--dist loadfile` then orders the
# files by their number of tests (its loadscope-reorder; the sort is stable, so this order stays among files with as many
# tests). In a fresh-clone CI run on 2 cores the two workers ended 23 s apart in xdist's order (first pass 756 s); this
# order, with `--no-loadscope-reorder`, took as long (759 s), so the Makefile keeps xdist's.
_LONG_FIRST = ("tests/test_docs.py", "nbs/16e_reproduce.ipynb", "tests/test_gpu_tables.py", "tests/reliability/test_folders.py",
               "tests/test_gpu_check.py", "nbs/24_bench.ipynb", "tests/test_adapter_pal_reference.py", "tests/test_ddp.py",
               "nbs/16b_ablate.ipynb", "nbs/15b_analysis.ipynb", "tests/test_optimisation.py", "tests/test_ablate.py",
               "nbs/09_train.ipynb", "nbs/tutorials/19_reproduce_a_table.ipynb", "tests/test_own_tasks.py",
               "nbs/tutorials/20_inspect_a_model.ipynb", "tests/test_peft_reference.py", "nbs/tutorials/25_train_your_own_tasks.ipynb",
               "nbs/tutorials/23_use_a_trained_model.ipynb", "tests/test_mpnet.py", "nbs/02a_pretrained.ipynb", "nbs/04b_trees.ipynb",
               "tests/reliability/test_faults.py", "nbs/22_export.ipynb", "nbs/14_phases.ipynb", "nbs/24a_gpu_check.ipynb")

# CI's second pass (`make test-nodata`, MINBERT_NODATA_PASS=1) points the data lookup at an empty folder and runs what can
# behave differently there. With the first pass's record, what that pass ran without reading the full data gives the same
# result here: it is not even collected (importing those test modules in each of the pass's processes cost 7 s of its 40).
# Without a record a static rule leaves out tests that read only the committed sample (the `small_data` fixture), and the
# test files and notebooks that never look data up.

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

_SAME = []
def _same_without_data() -> set|None:
    """The files (repository-relative) that the last complete first pass ran without reading the full data, from its record;
    None without a usable record. Read once a process"""
    if not _SAME:
        read = lambda f: set(f.read_text().split()) if f.is_file() else set()
        reads = read(TRACE_DIR / "reads.txt")
        ok = (TRACE_DIR / "complete").is_file() and "?" not in reads   # "?": a read outside any test file or notebook
        _SAME.append(set().union(*(read(f) for f in TRACE_DIR.glob("ran-*.txt"))) - reads if ok else None)
    return _SAME[0]

def _nodata_pass() -> bool: return os.environ.get("MINBERT_NODATA_PASS") == "1"

def pytest_ignore_collect(collection_path, config):
    if _nodata_pass() and (same := _same_without_data()) and os.path.relpath(collection_path, ROOT) in same: return True
    return None

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Without the first pass's record, the no-data pass leaves out by the static rule what runs the same in both passes.
    Then the long files first, each file's own order kept (a stable sort): every worker collects the same order"""
    if _nodata_pass() and _same_without_data() is None:
        same = lambda it: ("small_data" in getattr(it, "fixturenames", ()) or it.path.name in _NO_DATA_LOOKUP
                           or (it.path.suffix == ".ipynb" and not _looks_data_up(it.path)))
        if drop := [it for it in items if same(it)]:
            config.hook.pytest_deselected(items=drop)
            items[:] = [it for it in items if not same(it)]
    rank = {f: i for i, f in enumerate(_LONG_FIRST)}
    items.sort(key=lambda it: rank.get(os.path.relpath(it.path, ROOT).replace(os.sep, "/"), len(rank)))

def pytest_collectstart(collector):
    "Reads while a test file or notebook is collected (a module's import) are its own"
    if _tracing(collector.config) and getattr(collector, "path", None) is not None and collector.path.is_file():
        os.environ["MINBERT_TRACE_ITEM"] = os.path.relpath(collector.path, ROOT)

def pytest_collection_finish(session):
    "Which files this pass runs (each worker collects them all)"
    if _tracing(session.config) and TRACE_DIR.is_dir():
        files = sorted({os.path.relpath(it.path, ROOT) for it in session.items})
        (TRACE_DIR / f"ran-{_worker(session.config) or 'main'}.txt").write_text("".join(f + "\n" for f in files))

def pytest_sessionfinish(session, exitstatus):
    if session.config.stash.get(_OWNER, False) and exitstatus == 0 and TRACE_DIR.is_dir(): (TRACE_DIR / "complete").write_text("")

# Each notebook's kernel gets a temporary folder of its own (TMPDIR, read by its `tempfile` calls), removed when the
# notebook's last cell has run and its kernel has stopped. The notebooks demonstrate trainings in `tempfile.mkdtemp()`
# folders; without this, a whole nbval pass would leave several GB behind in the system's temporary folder (5.7 GB in
# one `.ci/run` of e9e5e68, when these hooks sat in tests/conftest.py, which reaches no notebook).
_NB_TMP = {}

@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if _tracing(item.config): os.environ["MINBERT_TRACE_ITEM"] = os.path.relpath(item.path, ROOT)   # what the trace names (above)
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
