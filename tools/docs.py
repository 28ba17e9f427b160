"""Offline documentation for minbert_nb, without Quarto.

    python tools/docs.py site [--out _site]   # nbdev-proc-nbs, then nbconvert each processed notebook to an HTML page
    python tools/docs.py readme               # README.md from nbs/index.ipynb
    python tools/docs.py check-readme         # exit 1 if README.md is out of date

Users who have Quarto keep using `nbdev-docs` / `nbdev-preview` (the Quarto config is nbs/_quarto.yml).
The HTML pages here come from the same processed notebooks (`_proc/`), so `show_doc` sections, prose and outputs match
what Quarto would render; only the theme differs. The site works offline from any folder or a plain static server:
- a fixed sidebar lists the notebooks in reading order (index, then nbs/*.ipynb by file name, found anew on every build:
  "01 · Attention"), the current page highlighted; nbs/sidebar.yml (Quarto's sidebar) is rewritten in the same order
  (pyproject.toml sets nbdev's `custom_sidebar`, so nbdev leaves it alone);
- the theme (tools/docs_theme/: the nbconvert template and site.css) and pygments' CSS are written to assets/;
- math is typeset by MathJax 3 copied into assets/mathjax/ from the PyPI package django-static-mathjax (dev extras);
  no page loads anything from the web;
- figures stored as notebook outputs are written to figures/ and shown with <img>.
"""
import html, json, re, shutil, subprocess, sys
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter, MarkdownExporter
from nbconvert.preprocessors import CoalesceStreamsPreprocessor, ExtractOutputPreprocessor, TagRemovePreprocessor

ROOT = Path(__file__).resolve().parents[1]
NBS, PROC = ROOT / "nbs", ROOT / "_proc"
THEME = ROOT / "tools" / "docs_theme"   # page template (nbconvert) and site.css

def proc_nbs():
    "Run nbdev's processors (show_doc cells, frontmatter, hidden cells) into _proc/"
    shutil.rmtree(PROC, ignore_errors=True)
    exe = Path(sys.executable).with_name("nbdev-proc-nbs")
    r = subprocess.run([str(exe) if exe.exists() else "nbdev-proc-nbs"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0 or not PROC.exists():
        sys.exit(f"nbdev-proc-nbs failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
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
    "The story's notebooks in reading order: index first, then `nbs/*.ipynb` by file name (00_core, 01_attention, 02_bert, 02a_pretrained, ...)"
    found = [p for p in Path(nbs).glob("*.ipynb") if not p.name.startswith(("_", "."))]
    return sorted(found, key=lambda p: (p.name != "index.ipynb", p.name))

def nb_number(name):
    "The reading-order number of a notebook file name: '01' for 01_attention.ipynb, '02a' for 02a_pretrained.ipynb, '' for index"
    m = re.match(r"(\d+[a-zA-Z0-9]*)_", Path(name).name)
    return m.group(1) if m else ""

def nb_page(name):
    "The page nbdev names a notebook's docs after (its `output-file`): the file name without the number, lower case, `.html`"
    return re.sub(r"^\d+[a-zA-Z0-9]*_", "", Path(name).name.lower()).rsplit(".", 1)[0] + ".html"

def sidebar_yml(nbs=NBS):
    "Quarto's sidebar (nbs/sidebar.yml) listing the notebooks in reading order, in the layout nbdev writes"
    return "website:\n  sidebar:\n    contents:\n" + "".join(f"      - {p.name}\n" for p in notebooks(nbs))

def write_sidebar_yml(nbs=NBS):
    "Keep nbs/sidebar.yml in reading order with notebooks only (nbdev's own sidebar also lists nbdev.yml, sidebar.yml and styles.css)"
    path, text = Path(nbs) / "sidebar.yml", sidebar_yml(nbs)
    if not path.exists() or path.read_text() != text: path.write_text(text)
    return path

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
    shutil.copy(THEME / "site.css", a / "site.css")
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
    items = []
    for e in entries:
        act = ' class="active" aria-current="page"' if e["page"] == current else ""
        num = f'<span class="num">{e["num"]}</span><span class="sep"> · </span>' if e["num"] else ""
        items.append(f'<li><a href="{e["page"]}"{act}>{num}<span class="label">{html.escape(e["label"])}</span></a></li>')
    return (f'<nav class="sidebar" aria-label="Notebooks"><a class="brand" href="index.html">{html.escape(project)}</a>'
            + (f'<p class="tagline">{html.escape(tagline)}</p>' if tagline else "")
            + '<p class="toc-label">Notebooks</p><ol class="toc">' + "".join(items) + "</ol></nav>")

def _pager(entries, i):
    def link(e, cls, word):
        label = f'{e["num"]} · {e["label"]}' if e["num"] else e["label"]
        return f'<a class="{cls}" href="{e["page"]}"><small>{word}</small>{html.escape(label)}</a>'
    prev = link(entries[i - 1], "prev", "← Previous") if i > 0 else ""
    nxt = link(entries[i + 1], "next", "Next →") if i + 1 < len(entries) else ""
    return f'<nav class="pager" aria-label="Previous and next notebook">{prev}{nxt}</nav>'

def _fix_page(body, page, pages, nb_pages, out, site_url, repo_url, branch):
    """Links and images that work offline: the doc site's own absolute URLs and links to notebooks become relative pages, links to
    other repository files go to the repository, markdown images are copied in, heading ids are lower case as Quarto (and nbdev's
    links, e.g. `train.html#trainconfig`) expect"""
    ids = {}
    def low_id(m):
        new = m.group(2).lower(); ids[m.group(2)] = new
        return m.group(1) + new + m.group(3)
    body = re.sub(r'(<h[1-6][^>]*?\bid=")([^"]+)(")', low_id, body)
    def href(m):
        url = html.unescape(m.group(2))
        if url.startswith("#"): url = "#" + ids.get(url[1:], url[1:])
        else:
            if site_url and url.startswith(site_url + "/") and url[len(site_url) + 1:].split("#")[0] in pages: url = url[len(site_url) + 1:]
            path, frag = (url.split("#", 1) + [""])[:2]
            frag, pfrag = ("#" + frag, "#" + frag.lower()) if frag else ("", "")   # headings' ids are lower case (above)
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

def site(out=ROOT / "_site"):
    "Build the HTML site from nbs/ into `out`, in reading order (index, then notebooks by file name); returns the pages written"
    out = Path(out); shutil.rmtree(out, ignore_errors=True); out.mkdir(parents=True)
    order = {p.name: i for i, p in enumerate(notebooks())}
    procd = sorted(proc_nbs(), key=lambda p: (order.get(p.name, len(order)), p.name != "index.ipynb", p.name))
    write_sidebar_yml()
    project = _yml_value("title", "minbert_nb")
    entries = []
    for p in procd:
        nb, front = _load(p)
        title = front.get("title", p.stem).strip("\"'")
        entries.append(dict(nb=p.name, page=front.get("output-file", nb_page(p.name)), title=title, num=nb_number(p.name),
                            label="Overview" if p.name == "index.ipynb" and title == project else title,
                            desc=front.get("description", "").strip("\"'"), cells=nb))
    pages = {e["page"] for e in entries}
    nb_pages = {e["nb"]: e["page"] for e in entries}
    tagline = next((e["desc"] for e in entries if e["nb"] == "index.ipynb"), "")
    site_url, repo_url, branch = _yml_value("site-url").rstrip("/"), _yml_value("repo-url").rstrip("/"), _yml_value("repo-branch", "main")
    write_assets(out)
    exp = HTMLExporter(template_name="docs_theme", extra_template_basedirs=[str(THEME.parent)])
    exp.exclude_input_prompt = exp.exclude_output_prompt = True
    exp.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}, enabled=True), enabled=True)
    exp.register_preprocessor(CoalesceStreamsPreprocessor(enabled=True), enabled=True)  # progress bars: their last state, as Jupyter shows
    exp.register_preprocessor(ExtractOutputPreprocessor(extract_output_types={"image/png", "image/jpeg", "image/gif"},
                                                        output_filename_template="{unique_key}-{cell_index}-{index}{extension}", enabled=True), enabled=True)
    for i, e in enumerate(entries):
        nb = e["cells"]
        nb.cells = [c for c in nb.cells if not (c.cell_type == "markdown" and re.fullmatch(r"\s*<!--.*?-->\s*", c.source, re.S))]
        for c in nb.cells:
            if c.cell_type != "code": continue
            if c.metadata.get("transient", {}).get("remove_source"): c.source = ""  # show_doc cells: output only
            c.source = re.sub(r"^#\|.*(\n|$)", "", c.source, flags=re.M)       # cell options, as Quarto hides them
            if not c.source.strip(): c.metadata["tags"] = ["remove_input"]
        res = {"unique_key": Path(e["page"]).stem, "output_files_dir": "figures",
               "site": dict(page=e["page"], title=e["title"], description=e["desc"].replace("`", ""), description_html=_inline_md(e["desc"]),
                            project=project, source=f"nbs/{e['nb']}",
                            sidebar=_sidebar(entries, e["page"], project, tagline), pager=_pager(entries, i))}
        body, res = exp.from_notebook_node(nb, resources=res)
        for name, data in (res.get("outputs") or {}).items():
            f = out / name; f.parent.mkdir(parents=True, exist_ok=True); f.write_bytes(data)
        (out / e["page"]).write_text(_fix_page(body, e["page"], pages, nb_pages, out, site_url, repo_url, branch))
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
