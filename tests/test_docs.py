"The offline docs site and the README are built from the notebooks"
import importlib, importlib.util, inspect, re
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("minbert_docs", ROOT / "tools" / "docs.py")
docs = importlib.util.module_from_spec(spec); spec.loader.exec_module(docs)

def _modules():
    "(notebook, module name) for every notebook that exports a module"
    out = []
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        m = re.search(r"#\|\s*default_exp\s+([\w.]+)", nb.read_text())
        if m: out.append((nb.stem, m.group(1)))
    return out

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    pages = docs.site(out)
    return out, pages

def test_index_page(site):
    out, pages = site
    assert "index.html" in pages
    text = (out / "index.html").read_text()
    assert "minbert_nb" in text and "make test" in text

def test_every_module_has_a_page_with_show_doc(site):
    out, _ = site
    mods = _modules()
    assert len(mods) >= 5
    for nb, mod in mods:
        page = out / f"{mod.split('.')[-1] if '.' not in mod else mod}.html"
        assert page.exists(), f"no page for {nb} ({mod}); pages: {sorted(p.name for p in out.iterdir())}"
        text = page.read_text()
        m = importlib.import_module(f"minbert_nb.{mod}")
        documented = [n for n in m.__all__ if (inspect.isclass(getattr(m, n)) or inspect.isfunction(getattr(m, n)))]
        assert documented, mod
        for name in documented:
            assert re.search(rf"<h[2-4][^>]*>\s*{re.escape(name)}\s*(<a[^>]*>[^<]*</a>)?\s*</h[2-4]>", text), f"{page.name}: no rendered show_doc section for {name}"

def test_readme_is_generated_from_index():
    assert (ROOT / "README.md").read_text() == docs.readme_text(proc=False), \
        "README.md is out of date: run `python tools/docs.py readme` (or `make readme`)"
