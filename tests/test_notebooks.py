"House rules for the notebooks, checked so that docs and tests keep working"
import json, re
from pathlib import Path
import pytest

NBS = sorted((Path(__file__).resolve().parents[1] / "nbs").glob("[0-9]*.ipynb"))
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
    assert sum("#| default_exp" in _src(c) for c in _cells(nb)) == 1, f"{nb.name}: exactly one `#| default_exp`"
    assert "nbdev_export()" in _src(_cells(nb)[-1]), f"{nb.name}: last cell must be `#| hide` `import nbdev; nbdev.nbdev_export()`"

@pytest.mark.parametrize("nb", NBS, ids=lambda p: p.stem)
def test_notebooks_are_clean(nb):
    "nbdev-clean was run: no execution counts or cell metadata that would make noisy diffs"
    for c in _cells(nb):
        assert c.get("execution_count") is None, f"{nb.name}: run nbdev-clean before committing"
