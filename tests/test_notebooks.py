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
