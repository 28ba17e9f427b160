"House rules for the notebooks, checked so that docs and tests keep working"
import json, re
from pathlib import Path
import pytest

_NBS = Path(__file__).resolve().parents[1] / "nbs"
NBS = sorted(_NBS.glob("[0-9]*.ipynb")) + sorted(_NBS.glob("tutorials/*.ipynb"))   # the modules, then the walkthroughs (nbs/tutorials/)
_IMPORT = re.compile(r"^\s*(from\s+\S+\s+)?import\s+\S+", re.M)

def _cells(nb): return [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
def _src(c): return "".join(c["source"])

@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_imports_only_in_export_and_setup_cells(nb):
    """nbdev-proc-nbs (the docs) executes every cell that contains an import; such a cell must not depend on earlier
    example cells, so imports belong in the `#| export` imports cell or the `#| hide` setup cell."""
    for i, c in enumerate(_cells(nb)):
        s = _src(c)
        if re.search(r"^#\|\s*export", s, re.M) or "nbdev_export()" in s or re.search(r"^#\|\s*hide", s, re.M): continue
        assert not _IMPORT.search(s), f"{nb.name}, code cell {i}: move the import into the notebook's `#| hide` setup cell"

@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_notebook_skeleton(nb):
    "Title cell, one default_exp, and the export cell at the end"
    cells = json.loads(nb.read_text())["cells"]
    assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# "), f"{nb.name}: first cell must be '# Title'"
    if "".join(cells[0]["source"]).startswith("# Walkthrough"):   # a walkthrough uses the package and exports nothing
        assert not any(re.search(r"^#\|\s*(default_exp|export)", _src(c), re.M) for c in _cells(nb)), f"{nb.name}: a walkthrough exports nothing"
        return
    assert sum("#| default_exp" in _src(c) for c in _cells(nb)) == 1, f"{nb.name}: exactly one `#| default_exp`"
    assert "nbdev_export()" in _src(_cells(nb)[-1]), f"{nb.name}: last cell must be `#| hide` `import nbdev; nbdev.nbdev_export()`"

@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_notebooks_are_clean(nb):
    "nbdev-clean was run: no execution counts or cell metadata that would make noisy diffs"
    for c in _cells(nb):
        assert c.get("execution_count") is None, f"{nb.name}: run nbdev-clean before committing"

_CHECK = re.compile(r"\b(assert|test_\w+|pytest\.raises)\b")

@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_every_export_cell_is_followed_by_a_check(nb):
    """House rule: after each `#| export` cell (other than the imports), before the next one, a code cell checks the result
    with an assert or a fastcore test (nbval runs lax: a cell that only prints would catch nothing)"""
    cells = [_src(c) for c in _cells(nb)]
    exports = [i for i, s in enumerate(cells) if re.match(r"#\|\s*exports?\b", s) and not re.match(r"#\|\s*exports?\s*\nfrom __future__", s)]
    for i in exports:
        nxt = [s for s in cells[i + 1:]]
        until = next((k for k, s in enumerate(nxt) if re.match(r"#\|\s*exports?\b", s) or "nbdev_export()" in s), len(nxt))
        assert any(_CHECK.search(s) for s in nxt[:until]), f"{nb.name}, code cell {i}: add a check after `{cells[i].splitlines()[1][:60]}`"

@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_no_empty_code_cells(nb):
    for i, c in enumerate(_cells(nb)): assert _src(c).strip(), f"{nb.name}, code cell {i} is empty"

def test_nbval_removes_a_notebooks_temporary_files(tmp_path):
    """A notebook's demos write into `tempfile.mkdtemp()` folders; under pytest its kernel gets a TMPDIR of its own, removed
    after its last cell (the root conftest.py's hooks: a tests/ conftest would not reach nbs/). 04f_task_files makes one such
    folder (its demo task files), and runs in two seconds"""
    import os, subprocess, sys
    pytest.importorskip("nbval")
    nb = _NBS / "04f_task_files.ipynb"
    assert "mkdtemp" in nb.read_text()
    tmp = tmp_path / "tmp"; tmp.mkdir()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", str(nb), "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider"],
                       cwd=_NBS.parent, env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    left = [p.name for p in tmp.iterdir() if p.name.startswith(("tmp", "nbval-"))]
    assert left == [], f"the notebook's temporary folders were left in TMPDIR: {left}"

def _root_conftest():
    "The repository's conftest.py (nbval's hooks for the notebooks) as a module of its own"
    import importlib.util
    spec = importlib.util.spec_from_file_location("root_conftest", _NBS.parent / "conftest.py")
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m

def test_checked_outputs_compare_numbers_within_a_tolerance():
    """A `#| check_output` cell's numbers may move by 0.1% (or 1e-5) and nothing else may: the cases are those seen between an
    AVX2 and an AVX-512 CPU, both in fp32"""
    import copy, nbformat
    root = _root_conftest(); align = root._align
    assert align("corr=0.7674 overall=0.5654", "corr=0.7678 overall=0.5655") == "corr=0.7678 overall=0.5655"
    assert align("largest difference 2.2e-06 (pooler 1.4e-07)", "largest difference 3.8e-06 (pooler 1.9e-07)") == \
        "largest difference 3.8e-06 (pooler 1.9e-07)"                                 # fp32 noise: within 1e-5
    assert align("overall=0.5554 acc=0.7678", "overall=0.5655 acc=0.7679") == "overall=0.5554 acc=0.7679"   # 1.8% stays, so the diff shows it
    assert align("<td>2.935273</td>", "<td>2.849961</td>") == "<td>2.935273</td>"      # bf16 against fp32 there: 3%
    assert align("rows 13", "rows 12") == "rows 13" and align("12 of 13", "12 of 13.0") == "12 of 13"   # integers exactly
    assert align("sts 0.5", "sst 0.5") == "sts 0.5"                                     # the text around the numbers exactly
    class Cell:                                                                          # nbval's cell, as far as the alignment uses it
        sanitize = staticmethod(lambda s: s.replace("/tmp/abc", "<tmp>"))
    out = lambda **kw: nbformat.from_dict(kw)
    test = [out(output_type="stream", name="stdout", text="saved to /tmp/abc: 0.13574093\n"),
            out(output_type="execute_result", data={"text/plain": "0.568906", "text/html": "<td>0.568906</td>", "image/png": "iVBO1"}, metadata={})]
    ref = [out(output_type="stream", name="stdout", text="saved to <tmp>: 0.13574089\n"),
           out(output_type="execute_result", data={"text/plain": "0.568648", "text/html": "<td>0.568648</td>", "image/png": "iVBO2"}, metadata={})]
    t, r = root._align_outputs(Cell(), copy.deepcopy(test), ref)
    assert t[0].text == r[0].text == "saved to <tmp>: 0.13574089\n" and t[1]["data"]["text/html"] == "<td>0.568648</td>"
    assert t[1]["data"]["image/png"] == "iVBO1"                                          # figures: compared as they are
    assert root._align_outputs(Cell(), test[:1], ref) == (test[:1], ref)    # another number of outputs: as given

def test_a_notebook_kernel_that_dies_at_start_is_started_again():
    """jupyter_client's port race (a port it picked is taken before the kernel binds it) kills a kernel at start now and
    then under two workers: nbval's start is tried three times, and a kernel that dies every time still fails"""
    import nbval.kernel
    root = _root_conftest()
    assert nbval.kernel.start_new_kernel.retrying                       # the session's conftest put the retry in place
    assert not getattr(root._nbval_start_new_kernel, "retrying", False)   # and a second load does not wrap it twice
    calls = []
    def dies_once(*a, **kw):
        calls.append(1)
        if len(calls) == 1: raise RuntimeError("Kernel died before replying to kernel_info")
        return root._nbval_start_new_kernel(*a, **kw)                   # then a real kernel
    km, kc = root._start_kernel_retrying(startup_timeout=60, kernel_name=nbval.kernel.CURRENT_ENV_KERNEL_NAME, _start=dies_once)
    try:
        assert len(calls) == 2 and km.is_alive()
        msg = kc.execute_interactive("x = 6 * 7", timeout=30)
        assert msg["content"]["status"] == "ok"
    finally:
        kc.stop_channels(); km.shutdown_kernel(now=True)
    def always_dies(*a, **kw):
        calls.append(1); raise RuntimeError("Kernel died before replying to kernel_info")
    calls.clear()
    with pytest.raises(RuntimeError, match="Kernel died"):
        root._start_kernel_retrying(_start=always_dies)
    assert len(calls) == root.KERNEL_STARTS == 3


def test_make_nbs_scratch_names_do_not_shift(tmp_path):
    """`make nbs` seeds tempfile's names (tools/nbs_site) so a re-saved notebook prints the same scratch folders: a name drawn
    once for another folder (the data cache's file on a miss) must not shift the names of the folders a notebook prints"""
    import os, shutil, subprocess, sys
    probe = ("import os, sys, tempfile\n"
             "a = tempfile.mkdtemp()\n"
             "if sys.argv[1] == '1': os.close(tempfile.mkstemp(dir=sys.argv[2])[0])\n"
             "b = tempfile.mkdtemp()\n"
             "print(os.path.basename(a), os.path.basename(b))\n")
    site = Path(__file__).resolve().parents[1]/"tools"/"nbs_site"
    def names(extra):                                   # a re-run: the same TMPDIR as `make nbs` names it, made anew
        tmp, other = tmp_path/"minbert-nbs-x", tmp_path/"cache"
        for d in (tmp, other): shutil.rmtree(d, ignore_errors=True); d.mkdir()
        env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(site))
        return subprocess.run([sys.executable, "-c", probe, extra, str(other)], env=env, capture_output=True, text=True, check=True).stdout.split()
    first, again, shifted = names("0"), names("0"), names("1")
    assert first == again and first[0] != first[1]      # the same names at every re-run, unique within one
    assert shifted == first, f"a name drawn for another folder moved the scratch names: {first} then {shifted}"
