"""Offline documentation for minbert_nb, without Quarto.

    python tools/docs.py site [--out _site]   # nbdev-proc-nbs, then nbconvert each processed notebook to an HTML page
    python tools/docs.py readme               # README.md from nbs/index.ipynb
    python tools/docs.py check-readme         # exit 1 if README.md is out of date

Users who have Quarto keep using `nbdev-docs` / `nbdev-preview` (the Quarto config is nbs/_quarto.yml).
The HTML pages here come from the same processed notebooks (`_proc/`), so `show_doc` sections, prose and outputs match
what Quarto would render; only the theme differs. The site works offline from any folder or a plain static server:
- the sidebar lists the notebooks in the story's sections as nbs/sidebar.yml gives them (the one place that maps notebooks to
  sections, read by Quarto too; an entry is found by its path or, after a move to a sub-folder, by its file name), the
  current page highlighted; below 960 px it folds behind a Menu button;
- every page has an "on this page" list (its ## / ### headings), copy buttons on code, and a search box; search.html and
  assets/search-index.js (every page's text split at its headings, built here) search offline, from file:// too;
- notebook names in the text (`08b_step`, 08g_smart) link to their pages; show_doc's "source" links go to the notebook page
  that defines the name (nbs/nbdev.yml's repository address is not a published repository);
- stored outputs are tidied: paths of the machine that ran them are shown relative to the repository, the run folder or
  site-packages, and a warning repeated on a page is shown once;
- the theme (tools/docs_theme/: the nbconvert template and site.css) and pygments' CSS are written to assets/;
- math is typeset by MathJax 3 copied into assets/mathjax/ from the PyPI package django-static-mathjax (dev extras);
  no page loads anything from the web;
- figures stored as notebook outputs are written to figures/ and shown with <img>.
"""
import html, json, os, re, shutil, subprocess, sys, urllib.parse
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter, MarkdownExporter
from nbconvert.preprocessors import CoalesceStreamsPreprocessor, ExtractOutputPreprocessor, TagRemovePreprocessor

ROOT = Path(__file__).resolve().parents[1]
NBS, PROC = ROOT / "nbs", ROOT / "_proc"
THEME = ROOT / "tools" / "docs_theme"   # page template (nbconvert) and site.css

# nbdev's processors, run in one process (nbdev-proc-nbs takes 2.5x as long: it re-reads settings.ini/pyproject for each
# of its ~1,800 cells, and its exit waits half a minute on the shells it started). Same _proc/ output, checked file by file.
_PROC_SCRIPT = """
import functools, os, sys
import nbdev.config, nbdev.serve, nbdev.processors, nbdev.serve_drv, nbdev.process, nbdev.doclinks, nbdev.showdoc
get = nbdev.config.get_config
fast = functools.lru_cache(maxsize=None)(get)          # the settings do not change while the notebooks are processed
for m in [m for n, m in list(sys.modules.items()) if n.startswith("nbdev")]:
    if getattr(m, "get_config", None) is get: m.get_config = fast
# nbdev runs every cell with an import to render show_doc; a hidden cell is a test's (fastcore.test, transformers, peft: seconds
# of imports), and an exported cell never needs its imports (the module must import what it uses), so hidden cells are not run
_do_eval, _run_too = nbdev.processors._do_eval, {"export", "exports", "exporti", "exec_doc"}
nbdev.processors._do_eval = lambda cell: None if "hide" in cell.directives_ and not cell.directives_.keys() & _run_too else _do_eval(cell)
nbdev.serve.proc_nbs(n_workers=0, force=True)
sys.stdout.flush(); sys.stderr.flush(); os._exit(0)     # the files are written; skip the shells' slow teardown
"""

def proc_nbs():
    "Run nbdev's processors (show_doc cells, frontmatter, hidden cells) into _proc/"
    shutil.rmtree(PROC, ignore_errors=True)
    r = subprocess.run([sys.executable, "-c", _PROC_SCRIPT], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not PROC.exists():
        sys.exit(f"nbdev's notebook processing failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return sorted(PROC.glob("*.ipynb"))

def _clean(nb):
    "Drop nbdev-only fields (e.g. `has_sd`) that nbformat's schema refuses; split off the frontmatter"
    front = {}
    for c in nb.cells:
        for k in list(c.keys()):
            if k not in ("cell_type", "source", "metadata", "outputs", "execution_count", "attachments", "id"): del c[k]
        c.metadata = {}
        if c.cell_type == "code":
            c.setdefault("outputs", []); c.setdefault("execution_count", None)
            for o in c.outputs:
                md = o.get("data", {}).get("text/markdown")
                if md: o["data"]["text/markdown"] = re.sub(r'\{target="_blank"[^}]*\}', "", md if isinstance(md, str) else "".join(md))
                for k in list(o.keys()):
                    if k not in ("output_type", "data", "metadata", "execution_count", "name", "text", "ename", "evalue", "traceback"): del o[k]
    if nb.cells and nb.cells[0].cell_type == "raw" and nb.cells[0].source.lstrip().startswith("---"):
        import yaml   # nbdev writes YAML (quoted titles such as 'a paper''s table'), so read it as YAML
        front = {k: " ".join(str(v).split()) for k, v in (yaml.safe_load(nb.cells[0].source.strip().strip("-")) or {}).items()}
        nb.cells = nb.cells[1:]
    # quarto's `#| echo: false` hides the input of show_doc cells
    for c in nb.cells:
        if c.cell_type == "code" and re.search(r"^#\|\s*echo:\s*false", c.source, re.M): c.metadata["jupyter"] = {"source_hidden": True}; c.metadata["transient"] = {"remove_source": True}
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}, "language_info": {"name": "python"}}
    return nb, front

def _load(path):
    "Read a processed notebook without schema validation (nbdev adds fields such as `has_sd`), then clean it"
    d = json.loads(Path(path).read_text())
    for c in d["cells"]: c.pop("has_sd", None)
    return _clean(nbformat.reads(json.dumps(d), as_version=4))

def notebooks(nbs=NBS):
    "Every notebook under `nbs/` (sub-folders too, e.g. nbs/tutorials/), by path; not `_proc`-style or hidden ones"
    return sorted(p for p in Path(nbs).rglob("*.ipynb")
                  if not any(part.startswith(("_", ".")) for part in p.relative_to(nbs).parts))

def nb_number(name):
    "The reading-order number of a notebook file name: '01' for 01_attention.ipynb, '02a' for 02a_pretrained.ipynb, '' for index"
    m = re.match(r"(\d+[a-zA-Z0-9]*)_", Path(name).name)
    return m.group(1) if m else ""

def nb_page(name):
    "The page nbdev names a notebook's docs after (its `output-file`): the file name without the number, lower case, `.html`"
    return re.sub(r"^\d+[a-zA-Z0-9]*_", "", Path(name).name.lower()).rsplit(".", 1)[0] + ".html"

def sidebar_sections(nbs=NBS):
    """The story's table of contents from nbs/sidebar.yml (Quarto's sidebar format, the one place that maps notebooks to
    sections): [(section or None, [notebook path relative to nbs/, ...]), ...]. An entry is found by its path, else by its file
    name anywhere under nbs/ (a notebook moved to nbs/tutorials/ needs no edit); notebooks not listed go to a last "Other" section"""
    import yaml
    nbs = Path(nbs); have = [p.relative_to(nbs).as_posix() for p in notebooks(nbs)]
    by_name = {Path(h).name: h for h in have}
    def find(entry):
        e = str(entry).strip()
        if not e.endswith(".ipynb"): e += ".ipynb"
        if e in have: return e
        if Path(e).name in by_name: return by_name[Path(e).name]
        sys.exit(f"nbs/sidebar.yml lists {entry!r}, which is not a notebook under nbs/")
    data = yaml.safe_load((nbs / "sidebar.yml").read_text()) or {}
    out, seen = [], set()
    for item in data.get("website", {}).get("sidebar", {}).get("contents", []):
        if isinstance(item, dict):
            got = [find(x) for x in item.get("contents", [])]; out.append((item.get("section", ""), got))
        else:
            got = [find(item)]
            if out and out[-1][0] is None: out[-1][1].extend(got)
            else: out.append((None, got))
        seen.update(got)
    rest = [h for h in have if h not in seen]
    if rest:
        print(f"docs: nbs/sidebar.yml does not place {', '.join(rest)}: listed under 'Other'", file=sys.stderr)
        out.append(("Other", rest))
    return out

def story(nbs=NBS):
    "Notebook paths (relative to nbs/) in the sidebar's reading order"
    return [n for _, ns in sidebar_sections(nbs) for n in ns]

def _yml_value(key, default=""):
    "A top-level-ish `key: value` from nbs/nbdev.yml (site-url, repo-url, repo-branch, title)"
    f = NBS / "nbdev.yml"
    m = re.search(rf"^\s*{re.escape(key)}:\s*\"?([^\"\n]+)\"?\s*$", f.read_text(), re.M) if f.exists() else None
    return m.group(1).strip() if m else default

def mathjax_dir():
    "MathJax 3's browser build (es5/), shipped by the PyPI package django-static-mathjax (a dev dependency); MINBERT_MATHJAX overrides"
    import importlib.util, os
    cands = [Path(os.environ["MINBERT_MATHJAX"])] if os.environ.get("MINBERT_MATHJAX") else []
    spec = importlib.util.find_spec("mathjax")
    for loc in (spec.submodule_search_locations or []) if spec else []: cands.append(Path(loc) / "static" / "mathjax" / "es5")
    for c in cands:
        if (c / "tex-chtml-full.js").exists(): return c
    sys.exit("MathJax 3 not found: the docs bundle it from the PyPI package django-static-mathjax "
             "(pip install 'django-static-mathjax==3.2.2.1', part of the dev extras), or set MINBERT_MATHJAX to a MathJax es5/ folder")

def write_assets(out):
    "assets/: the theme's CSS, pygments' CSS for code, and MathJax (one script, its CHTML fonts, its licence); nothing is loaded from the web"
    from pygments.formatters import HtmlFormatter
    a = Path(out) / "assets"; (a / "mathjax").mkdir(parents=True, exist_ok=True)
    shutil.copy(THEME / "site.css", a / "site.css"); shutil.copy(THEME / "site.js", a / "site.js")
    (a / "pygments.css").write_text(HtmlFormatter(style="default").get_style_defs(".highlight"))
    mj = mathjax_dir()
    shutil.copy(mj / "tex-chtml-full.js", a / "mathjax" / "tex-chtml-full.js")
    shutil.copytree(mj / "output" / "chtml" / "fonts" / "woff-v2", a / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2")
    lic = next((p for p in (mj.parent / "LICENSE", mj / "LICENSE") if p.exists()), None)
    if lic: shutil.copy(lic, a / "mathjax" / "LICENSE")
    return a

def _inline_md(text):
    "A front-matter description as HTML: escaped, with `code`, **bold** and *italic* (as Quarto renders the title block)"
    t = html.escape(text, quote=False)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", t)
    return re.sub(r"(?<![*\w])\*([^*\s][^*]*)\*(?![*\w])", r"<em>\1</em>", t)

def _sidebar(entries, current, project, tagline):
    "The sidebar: brand, search box, and the story's sections (a menu button folds it away on narrow screens)"
    items, section = [], object()
    for e in entries:
        if e["section"] != section:
            if items: items.append("</ol></li>")
            section = e["section"]
            cur = " current" if any(x["page"] == current and x["section"] == section for x in entries) else ""
            head = f'<p class="section-label">{html.escape(section)}</p>' if section else ""
            items.append(f'<li class="section{cur}" data-section="{html.escape(section or "", quote=True)}">{head}<ol>')
        act = ' class="active" aria-current="page"' if e["page"] == current else ""
        num = f'<span class="num">{e["num"]}</span><span class="sep"> · </span>' if e["num"] else ""
        items.append(f'<li><a href="{e["page"]}"{act}>{num}<span class="label">{html.escape(e["label"])}</span></a></li>')
    items.append("</ol></li>")
    search = ('<form class="search" action="search.html" role="search"><label class="visually-hidden" for="search-q">Search the docs</label>'
              '<input id="search-q" type="search" name="q" placeholder="Search the docs" autocomplete="off">'
              '<div class="search-live" hidden></div></form>')
    return (f'<nav class="sidebar" aria-label="Notebooks"><div class="sidebar-top"><a class="brand" href="index.html">{html.escape(project)}</a>'
            '<button class="menu-toggle" type="button" aria-expanded="false" aria-controls="sidebar-body">Menu</button></div>'
            f'<div class="sidebar-body" id="sidebar-body">'
            + (f'<p class="tagline">{html.escape(tagline)}</p>' if tagline else "") + search
            + '<ol class="toc">' + "".join(items) + "</ol></div></nav>")

def _pager(entries, i):
    def link(e, cls, word):
        label = f'{e["num"]} · {e["label"]}' if e["num"] else e["label"]
        return f'<a class="{cls}" href="{e["page"]}"><small>{word}</small>{html.escape(label)}</a>'
    prev = link(entries[i - 1], "prev", "← Previous") if i > 0 else ""
    nxt = link(entries[i + 1], "next", "Next →") if i + 1 < len(entries) else ""
    return f'<nav class="pager" aria-label="Previous and next notebook">{prev}{nxt}</nav>'

# ---- stored outputs a reader can use: no machine paths, a repeated warning once ----
_TMP = r"(?:/private)?(?:/tmp|/var/tmp|/var/folders/[\w.-]+/[\w.-]+/T)(?:/minbert-nbs-[\w]+|/nbval-[\w.-]+)?/tmp[\w.-]+"   # `make nbs` / the tests give each run a folder of its own
_SITE_PKG = re.compile(r"(?<![\w.~:/])(?:/[\w.+-]+)+?/(?:site|dist)-packages/")

def machine_roots(nbs_list):
    "The repository folders stored outputs were run in (this checkout, and any `/…/` before `minbert_nb/`, `tests/`, `nbs/`)"
    roots = {str(ROOT)}
    pat = re.compile(r"(?<![\w.~:/])((?:/[\w.+-]+)+?)/(?:minbert_nb|tests|nbs|results|tools)/")
    for nb in nbs_list:
        for c in nb.cells:
            for o in c.get("outputs", []) if c.cell_type == "code" else []:
                for t in _output_texts(o):
                    roots.update(r for r in pat.findall(t) if "-packages" not in r and not re.match(_TMP, r))
    return sorted(roots, key=len, reverse=True)

def scrub_paths(text, roots):
    "Paths of the machine that ran a cell, shown relative: to the repository (`minbert_nb/data.py`, `../shared/data`), to a temporary run folder, to site-packages"
    text = _SITE_PKG.sub("site-packages/", text)
    text = re.sub(_TMP + r"/", "", text)                 # a temporary folder's contents: relative to it (`run/eval.json`)
    text = re.sub(_TMP + r"(?![\w/])", "<tmp>", text)    # the temporary folder itself
    for base, rel in [(r, "") for r in roots] + [(str(Path(r).parent), "../") for r in roots]:   # the repositories first, then beside them
        if base in ("/", ""): continue
        text = re.sub(re.escape(base) + r"/(?=[\w.~-])", rel, text)
        text = re.sub(re.escape(base) + r"(?![\w/.-])", rel.rstrip("/") or ".", text)
    return text

def _output_texts(o):
    if "text" in o: yield o["text"] if isinstance(o["text"], str) else "".join(o["text"])
    for k, v in (o.get("data") or {}).items():
        if k.startswith("text/") or k == "application/json": yield v if isinstance(v, str) else "".join(v) if isinstance(v, list) else ""
    for t in o.get("traceback", []) or []: yield t

_WARN_HEAD = re.compile(r"^\S.*?:\d+: \w*Warning: ")
def _warning_records(text):
    "Split stderr into records: a `file:line: XWarning: message` line with its indented source line(s), or one other line"
    recs = []
    for line in text.splitlines(keepends=True):
        if recs and _WARN_HEAD.match(recs[-1][0]) and line.startswith((" ", "\t")) and not _WARN_HEAD.match(line): recs[-1].append(line)
        else: recs.append([line])
    return ["".join(r) for r in recs]

def _shown(text):
    "What a terminal shows of `text`: each line's carriage-return segments written over one another"
    def line(l):
        buf = ""
        for seg in l.split("\r"): buf = seg + buf[len(seg):]
        return buf
    return "\n".join(line(l) for l in text.split("\n"))

def tidy_outputs(nb, roots):
    "Scrub machine paths from every output; show each warning once per page (later repeats, in one block or another, are dropped)"
    seen = set()
    for c in nb.cells:
        if c.cell_type != "code": continue
        keep = []
        for o in c.outputs:
            if "text" in o:
                t = scrub_paths(o["text"] if isinstance(o["text"], str) else "".join(o["text"]), roots)
                if o.get("name") == "stderr":
                    out = []
                    for r in _warning_records(t):
                        if _WARN_HEAD.match(r):
                            key = _WARN_HEAD.sub("", r.splitlines()[0])
                            if key in seen: continue
                            seen.add(key)
                        out.append(r)
                    t = "".join(out)
                    if not _shown(t).strip(): continue      # nothing left, or a progress bar that clears itself ("\r   \r")
                o["text"] = t
            for k, v in list((o.get("data") or {}).items()):
                if k.startswith("text/") or k == "application/json":
                    if isinstance(v, list): v = "".join(v)
                    if isinstance(v, str): o["data"][k] = scrub_paths(v, roots)
            if o.get("traceback"): o["traceback"] = [scrub_paths(t, roots) for t in o["traceback"]]
            if "evalue" in o: o["evalue"] = scrub_paths(o["evalue"], roots)
            keep.append(o)
        c.outputs = keep
    return nb

def heading_slug(anchor):
    "A heading's id as the site writes it: lower case, letters, digits, `.` and `_`, other runs of characters as one `-`"
    import urllib.parse
    s = html.unescape(urllib.parse.unquote(anchor)).lower()
    return re.sub(r"[^a-z0-9._]+", "-", s).strip("-") or "section"

def _fix_page(body, page, pages, nb_pages, out, site_url, repo_url, branch):
    """Links and images that work offline: the doc site's own absolute URLs and links to notebooks become relative pages, links to
    other repository files go to the repository, markdown images are copied in, heading ids are lower case as Quarto (and nbdev's
    links, e.g. `train.html#trainconfig`) expect"""
    ids = {}
    def low_id(m):
        new = heading_slug(m.group(2)); ids[m.group(2)] = ids[html.unescape(m.group(2))] = new
        return m.group(1) + new + m.group(3)
    body = re.sub(r'(<h[1-6][^>]*?\bid=")([^"]+)(")', low_id, body)
    def href(m):
        url = html.unescape(m.group(2))
        if url.startswith("#"): url = "#" + ids.get(url[1:], heading_slug(url[1:]))
        else:
            if site_url and url.startswith(site_url + "/") and url[len(site_url) + 1:].split("#")[0] in pages: url = url[len(site_url) + 1:]
            path, frag = (url.split("#", 1) + [""])[:2]
            frag, pfrag = ("#" + frag, "#" + heading_slug(frag)) if frag else ("", "")   # headings' ids are slugs (above)
            if re.match(r"^[a-z][a-z0-9+.-]*:", url, re.I) or url.startswith("//") or not path: pass
            elif Path(path).name in nb_pages: url = nb_pages[Path(path).name] + pfrag
            elif path in pages: url = path + pfrag
            else:
                f = (NBS / path).resolve()
                if f.exists() and f.is_relative_to(ROOT) and repo_url: url = f"{repo_url}/blob/{branch}/{f.relative_to(ROOT).as_posix()}{frag}"
        return m.group(1) + html.escape(url, quote=True) + m.group(3)
    body = re.sub(r'(<a\b[^>]*?\bhref=")([^"]*)(")', href, body)
    def img(m):
        src = html.unescape(m.group(2))
        if not re.match(r"^([a-z][a-z0-9+.-]*:|/|figures/)", src, re.I):
            f = (NBS / src.split("#")[0].split("?")[0]).resolve()
            if f.is_file() and f.is_relative_to(ROOT):
                dest = Path(out) / "figures" / f"{Path(page).stem}-{f.name}"
                dest.parent.mkdir(exist_ok=True); shutil.copy(f, dest)
                src = f"figures/{dest.name}"
        return m.group(1) + html.escape(src, quote=True) + m.group(3)
    body = re.sub(r'(<img\b[^>]*?\bsrc=")([^"]*)(")', img, body)
    return body.replace('alt="No description has been provided for this image"', 'alt="A figure output by a cell of this notebook"')

class PageExporter(HTMLExporter):
    """nbconvert's HTML exporter without its last step, a BeautifulSoup pass over the whole page that adds alt text (and
    tabindex, to cells of a `.jp-Notebook` this theme does not have): `enhance_page` adds the alt text on the parse it makes anyway"""
    def from_notebook_node(self, nb, resources=None, **kw):
        from nbconvert.exporters.templateexporter import TemplateExporter
        from nbconvert.filters.highlight import Highlight2HTML
        from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
        info = nb.metadata.get("language_info", {})
        self.register_filter("highlight_code", self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=info.get("pygments_lexer", info.get("name")), parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources))
        return TemplateExporter.from_notebook_node(self, nb, resources, **kw)

# ---- the code on the page: each API entry's source, folded under it ----
_SHOW_DOC = re.compile(r"^\s*show_doc\(\s*([\w.]+)\s*[,)]", re.M)

def _exp_module(rel):
    "The module a notebook exports (`#| default_exp smart` -> minbert_nb.smart), or None"
    m = re.search(r"#\|\s*default_exp\s+([\w.]+)", (NBS / rel).read_text())
    return f"minbert_nb.{m.group(1)}" if m else None

def source_of(module, expr):
    "The source of `expr` (a name in `module`'s namespace, e.g. `PCGrad.apply`) as `inspect` finds it, or None"
    import importlib, inspect
    try:
        obj = eval(expr, vars(importlib.import_module(module)))
        obj = getattr(obj, "fget", None) or getattr(obj, "__func__", None) or obj   # properties, classmethods
        return inspect.cleandoc("\n" + inspect.getsource(obj)) if not isinstance(obj, (int, float, str, tuple, dict, list)) else None
    except Exception: return None

def source_block(code, name):
    "A folded block with `code` highlighted, shown under an API entry (one click opens it)"
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer
    n = code.count("\n") + 1
    return (f'<details class="api-source"><summary>Source of <code>{html.escape(name)}</code> <span class="lines">({n} lines)</span></summary>'
            + highlight(code, PythonLexer(), HtmlFormatter(cssclass="highlight")) + "</details>")

def add_sources(nb, module, folds=None):
    """Under every show_doc entry, its source folded (`<details>`), unless the page shows the defining code right after it
    (an `#| exports` cell, as the chapters that teach an algorithm do); returns (entries, entries with a fold).
    With `folds` (a list), the output holds a placeholder `<!--API-SOURCE:i-->` and the block goes to `folds[i]`: the
    highlighted source is thousands of tags a page, which nbconvert and `enhance_page` would otherwise parse (twice the
    build's time); `site` puts the blocks in after both"""
    n_entries = n_folds = 0
    cells = nb.cells
    for i, c in enumerate(cells):
        if c.cell_type != "code" or not c.metadata.get("transient", {}).get("remove_source"): continue
        m = _SHOW_DOC.search(c.source)
        if not m or not module: continue
        n_entries += 1
        name = m.group(1); short = name.split(".")[-1]
        is_doc = lambda x: x.cell_type == "code" and x.metadata.get("transient", {}).get("remove_source")
        nxt = next((x for x in cells[i + 1:] if not is_doc(x)), None)
        prv = next((x for x in reversed(cells[:i]) if not is_doc(x)), None)   # nbdev moves a cell of two names after the first's entry
        defines = lambda x: x is not None and x.cell_type == "code" and re.search(rf"^\s*(?:def|class)\s+{re.escape(short)}\b|^\s*{re.escape(short)}\s*=", x.source, re.M)
        if defines(nxt) or defines(prv): continue               # the code is on the page, in the flow
        code = source_of(module, name)
        if not code: continue
        block = source_block(code, name)
        if folds is not None: folds.append(block); block = f"<!--API-SOURCE:{len(folds) - 1}-->"
        c.outputs.append(nbformat.v4.new_output("display_data", data={"text/html": block})); n_folds += 1
    return n_entries, n_folds

# ---- repository paths a reader can open: `results/reproduction/report.md` links to a page of the site showing it ----
REPO_DIR = "repo"          # _site/repo/<path>.html: a file's text (or image), a folder's list of files
_REPO_PATH = re.compile(r"(?:(?:results|tests|tools|nbs|minbert_nb|\.ci)(?:/[\w.*+=,-]+)*/?|Makefile|pyproject\.toml|README\.md|conftest\.py)")

class RepoViews:
    """Pages for repository files and folders named in the docs, written into `out/repo/`. A file's page shows its text
    (Markdown rendered, CSV as a table, images as images); a folder's page lists what it holds, each entry a link. Folders are
    followed `depth` levels below a named one; a file over `max_bytes` is shown cut, with a note"""
    def __init__(self, out, repo_url="", branch="main", depth=2, max_bytes=100_000):
        self.out, self.repo_url, self.branch, self.depth, self.max_bytes = Path(out), repo_url, branch, depth, max_bytes
        self.done = {}
    def href(self, rel, depth=None):
        "The site page for repository path `rel` (relative to the repository), written on first use; None when `rel` does not exist"
        rel = rel.rstrip("/")
        f = (ROOT / rel).resolve()
        if not f.exists() or not f.is_relative_to(ROOT) or f == ROOT: return None
        key = f.relative_to(ROOT).as_posix()
        page = f"{REPO_DIR}/{key}.html" if f.is_file() else f"{REPO_DIR}/{key}/index.html"
        if key not in self.done or (depth or 0) > self.done[key]:
            self.done[key] = depth if depth is not None else self.depth
            self._write(f, page, self.done[key])
        return page
    def _page(self, page, title, body):
        up = "../" * page.count("/")
        dest = self.out / page; dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
                        f'<title>{html.escape(title)}</title><link rel="icon" href="data:,"><link rel="stylesheet" href="{up}assets/site.css"></head>'
                        f'<body class="repo-view"><div class="page"><p class="repo-up"><a href="{up}index.html">minbert_nb docs</a></p>'
                        f'<h1 class="page-title"><code>{html.escape(title)}</code></h1><main class="content">{body}</main></div></body></html>')
    def _write(self, f, page, depth):
        rel = f.relative_to(ROOT).as_posix()
        if f.is_dir():
            items = []
            for c in sorted(f.iterdir(), key=lambda c: (c.is_file(), c.name)):
                if c.name.startswith((".", "__pycache__")) or c.suffix in (".pt", ".safetensors", ".bin"): continue
                sub = (f"{c.name}/index.html" if c.is_dir() else f"{c.name}.html")
                if c.suffix == ".ipynb":                          # a notebook: its page of the book
                    items.append(f'<li><a href="{"../" * page.count("/")}{nb_page(c.name)}">{html.escape(c.name)}</a></li>'); continue
                if depth > 0: self.href(os.path.relpath(c, ROOT), depth - 1); items.append(f'<li><a href="{html.escape(sub)}">{html.escape(c.name)}{"/" if c.is_dir() else ""}</a></li>')
                else: items.append(f"<li>{html.escape(c.name)}{'/' if c.is_dir() else ''}</li>")
            self._page(page, rel + "/", f"<ul class=\"repo-list\">{''.join(items) or '<li>(empty)</li>'}</ul>")
            return
        if f.suffix.lower() in (".png", ".jpg", ".jpeg", ".svg", ".gif"):
            dest = self.out / REPO_DIR / f"{page[len(REPO_DIR) + 1:-5]}"; dest.parent.mkdir(parents=True, exist_ok=True); shutil.copy(f, dest)
            self._page(page, rel, f'<img src="{html.escape(f.name)}" alt="{html.escape(rel)}">'); return
        raw = f.read_bytes()
        cut = len(raw) > self.max_bytes
        text = raw[:self.max_bytes].decode("utf-8", "replace")
        note = f"<p><em>The first {self.max_bytes:,} of {len(raw):,} bytes.</em></p>" if cut else ""
        if f.suffix == ".md":
            import mistune
            body = mistune.html(text)
        elif f.suffix == ".csv" and not cut and (table := csv_table(text)): body = table
        else: body = f"<pre>{html.escape(text)}</pre>"
        self._page(page, rel, note + body)

def csv_table(text):
    "A CSV file's cells as written (no number formatting) in an HTML table, header first; None when its rows differ in length"
    import csv, io
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or len({len(r) for r in rows}) != 1: return None
    cell = lambda tag, v: f"<{tag}>{html.escape(v)}</{tag}>"
    head = "".join(cell("th", v) for v in rows[0])
    body = "".join("<tr>" + "".join(cell("td", v) for v in r) + "</tr>" for r in rows[1:])
    return f'<table class="repo-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

def _link_repo_paths(root, views, module_page, page):
    "Every repository path in code font (`results/reproduction/report.md`, `tests/`) that exists becomes a link to its page"
    n = 0
    if views is None: return 0
    up = "../" * page.count("/")
    for code in list(root.iter("code")):
        if _under(code.getparent(), _SKIP_LINK, "jp-RenderedText") or code.find(".//a") is not None: continue
        txt = code.text_content().strip()
        if not _REPO_PATH.fullmatch(txt) or "*" in txt: continue
        if txt.startswith("nbs/") and txt.endswith(".ipynb"): href = nb_page(txt)
        elif txt in module_page: href = module_page[txt]
        else:
            href = views.href(txt)
            if href is None: continue
            href = up + href
        _wrap(code, href, "repo-link"); n += 1
    return n

REPORTS_PAGE = "reports.html"
# the four reports as the book names them: "Liu & Shen (000)", "Lee & Li (002)", "Chan (003)", "Wang (004)"
REPORT_NAMES = {"000": "Liu & Shen", "002": "Lee & Li", "003": "Chan", "004": "Wang"}
_REPORT_RE = re.compile(r"(?:Liu & Shen|Lee & Li|Chan|Wang) \((00[0234])\)")

def _link_reports(root, page):
    "Each mention of a report by its name (\"Liu & Shen (000)\") links to the page on the four reports"
    if page == REPORTS_PAGE: return 0
    n = 0
    for el, slot, box in _texts(root):
        s = getattr(el, slot)
        if not _REPORT_RE.search(s) or _under(box, _SKIP_LINK | {"code"}, "jp-RenderedText"): continue
        pieces, last = [], 0
        for m in _REPORT_RE.finditer(s):
            pieces += [s[last:m.start()], _a(f"{REPORTS_PAGE}#report-{m.group(1)}", "report-link", m.group(0))]; last = m.end(); n += 1
        _replace_text(el, slot, pieces + [s[last:]])
    return n

# ---- after rendering: source links, notebook names as links, "on this page", the search index ----
_BLOCK = {"p", "li", "td", "th", "div", "pre", "blockquote", "dd", "dt", "h4", "h5", "h6", "summary"}
_SKIP_LINK = {"a", "pre", "script", "style", "textarea", "h1", "h2", "h3", "h4", "h5", "h6", "button", "summary"}

def _under(el, names=(), cls=None) -> bool:
    "Whether `el` or an ancestor of it is a tag named in `names` or has class `cls`"
    while el is not None:
        if el.tag in names or (cls is not None and cls in (el.get("class") or "").split()): return True
        el = el.getparent()
    return False

def _texts(root):
    """Every piece of text under `root` (lxml keeps a tag's first text in `.text` and the text after it in `.tail`), as
    (element, "text" or "tail", the tag that holds the text), in document order; comments' own text left out"""
    out = []
    for el in root.iter():
        if isinstance(el.tag, str) and el.text: out.append((el, "text", el))
        if el is not root and el.tail: out.append((el, "tail", el.getparent()))
    return out

def _a(href, cls, text=None):
    "A new link element"
    from lxml.html import Element
    a = Element("a", href=href); a.set("class", cls); a.text = text
    return a

def _replace_text(el, slot, pieces):
    "Put `pieces` (strings alternating with elements, a string first and last) where `el`'s `slot` (text or tail) was"
    if slot == "text": el.text, parent, pos = pieces[0], el, 0
    else: el.tail, parent = pieces[0], el.getparent(); pos = parent.index(el) + 1
    for k in range(1, len(pieces), 2):
        pieces[k].tail = pieces[k + 1] or None; parent.insert(pos, pieces[k]); pos += 1

def _wrap(el, href, cls):
    "Wrap `el` in a new link (its text after it stays after the link)"
    a = _a(href, cls); el.addprevious(a); a.tail, el.tail = el.tail, None; a.append(el)
    return a

def _linkify_notebooks(root, nb_links, current):
    "Every mention of a notebook (`08b_step`, 08g_smart, nbs/08h_pcgrad.ipynb) in prose, tables and show_doc text becomes a link to its page"
    if not nb_links: return 0
    pat = re.compile(r"(?<![\w/.-])(?:nbs/(?:[\w-]+/)*)?(" + "|".join(map(re.escape, sorted(nb_links, key=len, reverse=True))) + r")(?:\.ipynb)?(?![\w-])")
    n = 0
    for code in list(root.iter("code")):
        if _under(code.getparent(), _SKIP_LINK, "jp-RenderedText"): continue
        txt = code.text_content().strip()
        m = pat.fullmatch(txt) or pat.match(txt)
        sym = txt[m.end():] if m else ""
        if m and (not sym or re.fullmatch(r"\.\w[\w.]*", sym)) and (nb_links[m.group(1)] != current or sym):   # `08h_pcgrad.PCGrad`: its entry
            _wrap(code, (nb_links[m.group(1)] if nb_links[m.group(1)] != current else "") + (f"#{sym[1:].lower()}" if sym else ""), "nb-link"); n += 1
    for el, slot, box in _texts(root):
        s = getattr(el, slot)
        if not pat.search(s) or _under(box, _SKIP_LINK | {"code"}, "jp-RenderedText"): continue
        pieces, last = [], 0
        for m in pat.finditer(s):
            if nb_links[m.group(1)] == current: continue
            pieces += [s[last:m.start()], _a(nb_links[m.group(1)], "nb-link", m.group(0))]; last = m.end(); n += 1
        if pieces: _replace_text(el, slot, pieces + [s[last:]])
    return n

def _heading_text(h): return " ".join(" ".join(h.itertext()).replace("¶", "").split())

def module_pages(nb_pages):
    "Module file (minbert_nb/smart.py) -> the page of the notebook that exports it, from `#| default_exp`"
    out = {}
    for f in notebooks():
        m = re.search(r"#\|\s*default_exp\s+([\w.]+)", f.read_text())
        if m and f.name in nb_pages: out["minbert_nb/" + m.group(1).replace(".", "/") + ".py"] = nb_pages[f.name]
    return out

_HEADING = "following::*[self::h2 or self::h3 or self::h4 or self::h5 or self::h6][1]"

def enhance_page(body, page, nb_links, module_page, repo_url, views=None):
    """The page's "source" links, notebook names as links, the "on this page" list, and its search records [(heading, anchor, text)].
    The repository address in nbs/nbdev.yml is not a published repository, so a show_doc entry's "source" link goes to the
    notebook page that defines the name (its entry there), not to a line of a .py file nobody can open.
    One parse of the page with lxml (BeautifulSoup over lxml took 40% of the build: 9.5 MB of pages)"""
    import lxml.html
    doc = lxml.html.document_fromstring(body)
    main = doc.find(".//main")
    for img in main.iter("img"):
        if img.get("alt") is None: img.set("alt", "A figure output by a cell of this notebook")
    for a in list(main.iter("a")):
        href = a.get("href")
        if href is None or a.text_content().strip() != "source" or not (repo_url and href.startswith(repo_url)): continue
        h = next(iter(a.xpath(_HEADING)), None)
        name = _heading_text(h) if h is not None else ""
        mod = href[len(repo_url):].split("/blob/", 1)[-1].split("/", 1)[-1].split("#")[0]
        tgt = module_page.get(mod, page)
        a.set("href", (tgt if tgt != page else "") + (f"#{h.get('id')}" if h is not None and h.get("id") else ""))
        nb = next((k for k, v in nb_links.items() if v == tgt), tgt)
        a.set("title", f"{name} is defined in the notebook {nb} ({mod} is generated from it)")
        for c in list(a): a.remove(c)
        a.text = f"defined in {nb}"; a.set("class", "source-link")
    for a in main.iter("a"):   # a Markdown link to a notebook file (README style: nbs/guide.ipynb#x) -> its page
        m = re.fullmatch(r"(?:\./|\.\./)?(?:nbs/)?(?:[\w-]+/)*([\w-]+)\.ipynb(#[\w-]*)?", a.get("href") or "")
        if m: a.set("href", nb_page(m.group(1)) + (m.group(2) or ""))
    _linkify_notebooks(main, nb_links, page)
    _link_repo_paths(main, views, module_page, page)
    _link_reports(main, page)
    # "on this page": the page's ## and ### headings (show_doc entries included)
    heads = [h for h in main.iter("h2", "h3") if h.get("id")]
    toc = ""
    if heads:
        lis = "".join(f'<li class="l{h.tag[1]}"><a href="#{html.escape(h.get("id"), quote=True)}">{html.escape(_heading_text(h))}</a></li>' for h in heads)
        toc = f'<details class="page-toc" open><summary>On this page</summary><ul>{lis}</ul></details>'
    # search records: the page's text split at its ## / ### headings (prose, code, show_doc text; not plain cell outputs)
    recs, cur, buf = [], ("", ""), []
    skip = ("script", "style", "button")
    from lxml import etree
    hidden, gap = [], False     # hidden: per open tag, whether its text is left out (a heading, a cell's text output); gap: a
    def add(text, box):         # block began or ended since the last text kept (its words stay apart from the next block's)
        nonlocal gap
        if box.tag in skip or hidden[-1]: return
        if not text.strip(): gap = True; return   # white space between two tags: a space between their words
        buf.append((" " if gap else "") + text); gap = False
    for ev, el in etree.iterwalk(main, events=("start", "end", "comment")):
        if ev == "comment":                       # a comment: only the text after it counts
            if el.tail: add(el.tail, el.getparent())
        elif ev == "start":
            hidden.append((hidden[-1] if hidden else False) or el.tag in ("h2", "h3") or "jp-RenderedText" in (el.get("class") or "").split())
            if el.tag in ("h2", "h3") and el.get("id"):
                recs.append((cur, buf)); cur, buf = (_heading_text(el), el.get("id")), []
            gap = gap or el.tag in _BLOCK
            if el.text: add(el.text, el)
        else:
            hidden.pop(); gap = gap or el.tag in _BLOCK
            if el is not main and el.tail: add(el.tail, el.getparent())
    recs.append((cur, buf))
    records = [[h, aid, " ".join("".join(b).replace("¶", "").split())[:4000]] for (h, aid), b in recs if b or h]
    out = lxml.html.tostring(doc, encoding="unicode", doctype="<!DOCTYPE html>").replace("<!--PAGE-TOC-->", toc)
    return out, records

SEARCH_PAGE = "search.html"

def _fix_fragments(out, pages):
    """Links to a section of a page (nbdev links every backticked name it knows) that has no such section: a method without an
    entry of its own goes to its class's entry, a private name is left as code (it is taught where it is defined, not documented),
    anything else goes to the page"""
    out = Path(out)
    ids = {p: set(re.findall(r'\bid="([^"]+)"', (out / p).read_text())) for p in pages}
    def fix(m, page):
        url = html.unescape(m.group(2)); target, frag = url.split("#", 1)
        target = target or page
        if target not in ids or {frag, urllib.parse.unquote(frag)} & ids[target]: return m.group(0)
        name = frag.rsplit(".", 1)[-1]
        if name.startswith("_"): return m.group(4)                                      # a private name: its code, no link
        cls = frag.rsplit(".", 1)[0] if "." in frag else None
        new = f"{m.group(2).split('#', 1)[0]}#{cls}" if cls in ids[target] else (m.group(2).split("#", 1)[0] or target)
        return m.group(1) + html.escape(new, quote=True) + m.group(3) + m.group(4) + "</a>"
    for p in pages:
        f = out / p; text = f.read_text()
        new = re.sub(r'(<a\b[^>]*?\bhref=")([^"#]*#[^"]+)("[^>]*>)(.*?)</a>', lambda m: fix(m, p), text, flags=re.S)
        if new != text: f.write_text(new)

def site(out=ROOT / "_site"):
    "Build the HTML site from nbs/ into `out`, in the sidebar's reading order (nbs/sidebar.yml); returns the pages written"
    out = Path(out); shutil.rmtree(out, ignore_errors=True); out.mkdir(parents=True)
    sections = sidebar_sections()
    proc_nbs()
    project = _yml_value("title", "minbert_nb")
    entries = []
    for section, rels in sections:
        for rel in rels:
            nb, front = _load(PROC / rel)
            name = Path(rel).name
            title = front.get("title", Path(rel).stem).strip("\"'")
            entries.append(dict(nb=name, rel=rel, section=section, page=front.get("output-file", nb_page(name)), title=title, num=nb_number(name),
                                label="Overview" if name == "index.ipynb" and title == project else title,
                                desc=front.get("description", "").strip("\"'"), cells=nb))
    pages = {e["page"] for e in entries}
    nb_pages = {e["nb"]: e["page"] for e in entries}
    nb_links = {Path(e["nb"]).stem: e["page"] for e in entries if e["num"]}
    roots = machine_roots([e["cells"] for e in entries])
    tagline = next((e["desc"] for e in entries if e["nb"] == "index.ipynb"), "")
    site_url, repo_url, branch = _yml_value("site-url").rstrip("/"), _yml_value("repo-url").rstrip("/"), _yml_value("repo-branch", "main")
    write_assets(out)
    exp = PageExporter(template_name="docs_theme", extra_template_basedirs=[str(THEME.parent)])
    exp.exclude_input_prompt = exp.exclude_output_prompt = True
    # nbconvert passes every cell through bleach (a third of the build): these pages come from this repository's own notebooks
    exp.register_filter("clean_html", lambda html: html)
    exp.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}, enabled=True), enabled=True)
    exp.register_preprocessor(CoalesceStreamsPreprocessor(enabled=True), enabled=True)  # progress bars: their last state, as Jupyter shows
    exp.register_preprocessor(ExtractOutputPreprocessor(extract_output_types={"image/png", "image/jpeg", "image/gif"},
                                                        output_filename_template="{unique_key}-{cell_index}-{index}{extension}", enabled=True), enabled=True)
    module_page = module_pages(nb_pages)
    views = RepoViews(out, repo_url, branch)
    search = []
    for i, e in enumerate(entries):
        nb = tidy_outputs(e["cells"], roots)
        folds = []
        add_sources(nb, _exp_module(e["rel"]), folds)
        nb.cells = [c for c in nb.cells if not (c.cell_type == "markdown" and re.fullmatch(r"\s*<!--.*?-->\s*", c.source, re.S))]
        for c in nb.cells:
            if c.cell_type != "code": continue
            if c.metadata.get("transient", {}).get("remove_source"): c.source = ""  # show_doc cells: output only
            c.source = re.sub(r"^#\|.*(\n|$)", "", c.source, flags=re.M)       # cell options, as Quarto hides them
            c.source = re.sub(r"^\s*# NBVAL_\w+\s*(\n|$)", "", c.source, flags=re.M)   # nbval's markers (the output is checked)
            if not c.source.strip(): c.metadata["tags"] = ["remove_input"]
        src = f"nbs/{e['rel']}"
        res = {"unique_key": Path(e["page"]).stem, "output_files_dir": "figures",
               "site": dict(page=e["page"], title=e["title"], description=e["desc"].replace("`", ""), description_html=_inline_md(e["desc"]),
                            project=project, source=src, section=e["section"] or "",
                            sidebar=_sidebar(entries, e["page"], project, tagline), pager=_pager(entries, i))}
        body, res = exp.from_notebook_node(nb, resources=res)
        for name, data in (res.get("outputs") or {}).items():
            f = out / name; f.parent.mkdir(parents=True, exist_ok=True); f.write_bytes(data)
        body = _fix_page(body, e["page"], pages, nb_pages, out, site_url, repo_url, branch)
        body, recs = enhance_page(body, e["page"], nb_links, module_page, repo_url, views)
        body = re.sub(r"<!--API-SOURCE:(\d+)-->", lambda m: folds[int(m.group(1))], body)
        (out / e["page"]).write_text(body)
        search.append(dict(u=e["page"], t=(f'{e["num"]} · ' if e["num"] else "") + e["title"], d=e["desc"].replace("`", ""),
                           g=e["section"] or "", s=recs))
    _fix_fragments(out, [e["page"] for e in entries])
    # the search page and its index (a script, so that search works from file:// too)
    idx = json.dumps(search, ensure_ascii=False, separators=(",", ":"))
    (out / "assets" / "search-index.js").write_text(f"window.MINBERT_SEARCH={idx};\n")
    sp = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("SEARCH-PAGE-BODY")])
    sp.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}, "language_info": {"name": "python"}}
    res = {"unique_key": "search", "site": dict(page=SEARCH_PAGE, title="Search", description="", description_html="", project=project, source="",
                                                section="", sidebar=_sidebar(entries, SEARCH_PAGE, project, tagline), pager="")}
    body, _ = exp.from_notebook_node(sp, resources=res)
    form = ('<div id="search-page" data-pages="%d"><form class="search-big" action="search.html" role="search">'
            '<input type="search" name="q" aria-label="Search the docs" placeholder="Search every page"><button type="submit">Search</button></form>'
            '<p class="search-status"></p><ol class="search-results"></ol>'
            '<noscript><p>Search needs JavaScript; the sidebar lists every page.</p></noscript></div>') % len(entries)
    body = re.sub(r"<p>\s*SEARCH-PAGE-BODY\s*</p>", form, body).replace("<!--PAGE-TOC-->", "")
    body = body.replace('<script defer src="assets/site.js"></script>', '<script src="assets/search-index.js"></script><script defer src="assets/site.js"></script>')
    (out / SEARCH_PAGE).write_text(body)
    return [e["page"] for e in entries]

def readme_text(proc=True):
    "README.md content rendered from the processed index.ipynb (as nbdev-readme would, minus Quarto)"
    if proc or not (PROC / "index.ipynb").exists(): proc_nbs()
    nb, front = _load(PROC / "index.ipynb")
    for c in nb.cells:
        if c.metadata.get("transient", {}).get("remove_source"): c.source = ""
    exp = MarkdownExporter(); exp.exclude_input_prompt = exp.exclude_output_prompt = True
    body, _ = exp.from_notebook_node(nb)
    body = body.replace("<!-- WARNING: THIS FILE WAS AUTOGENERATED! DO NOT EDIT! -->", "").strip()
    head = f"# {front.get('title', 'minbert_nb')}\n\n"
    if front.get("description"): head += f"> {front['description']}\n\n"
    return ("<!-- Generated from nbs/index.ipynb by `python tools/docs.py readme`; do not edit by hand. -->\n\n"
            + head + re.sub(r"\n{3,}", "\n\n", body) + "\n")

if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "site"
    if cmd == "site":
        out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else ROOT / "_site"
        print("\n".join(site(out))); print(f"site written to {out}")
    elif cmd == "readme":
        (ROOT / "README.md").write_text(readme_text()); print("README.md written from nbs/index.ipynb")
    elif cmd == "check-readme":
        if (ROOT / "README.md").read_text() != readme_text(): sys.exit("README.md is out of date: run `python tools/docs.py readme`.")
        print("README.md is up to date")
    else: sys.exit(__doc__)
