"""The offline docs site and the README are built from the notebooks. With Chromium installed (CI installs it), every page is
also loaded in a headless browser from a loopback server: links, images, sidebar, typeset math, and screenshots in _site_screens/."""
import functools, html, http.server, importlib, importlib.util, inspect, re, shutil, subprocess, tempfile, threading, warnings
import urllib.error, urllib.parse, urllib.request
from html.parser import HTMLParser
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

# ---- the site as a reader sees it: order, offline assets, and (with Chromium) the pages in a browser ----
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium): "
                                    "the in-browser checks of the docs site (links, images, sidebar, math, screenshots) are skipped")
SCREENS = ROOT / "_site_screens"                   # screenshots kept for people to look at (git-ignored)
MATH_PAGES = ("losses.html", "smart.html", "run_data.html")   # pages whose prose has TeX math
SHOT_PAGES = ("index.html", "analysis.html", "losses.html")   # analysis.html (15b_analysis) once it exists

SECTIONS = ["Start here", "Model and optimizer", "Data", "Heads and parameter-efficient modules", "Multitask model and training step",
            "Evaluation and multitask optimisation", "Training runs", "Experiments", "Using a trained model", "Benchmarks"]
WALKTHROUGHS = {"19_reproduce_a_table", "20_inspect_a_model", "23_use_a_trained_model", "25_train_your_own_tasks"}
START_HERE = {"guide"} | WALKTHROUGHS   # the guide (every command and option) first, then the walkthroughs
MACHINE_PATH = re.compile(r"(?<![\w.~:/])/(?:work|tmp|home|root|Users|private|var/folders|mnt|opt/conda)/|[\w/]+/site-packages/")

def _all_notebooks():
    nbs = ROOT / "nbs"
    return sorted(p.relative_to(nbs).as_posix() for p in nbs.rglob("*.ipynb")
                  if not any(x.startswith(("_", ".")) for x in p.relative_to(nbs).parts))

def _sidebar_yml():
    "[(section or None, [notebook file names])] as nbs/sidebar.yml lists them (read here, not by tools/docs.py)"
    import yaml
    out = []
    for item in yaml.safe_load((ROOT / "nbs" / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]:
        if isinstance(item, dict): out.append((item["section"], [Path(x).name for x in item["contents"]]))
        else: out.append((None, [Path(item).name]))
    return out

def _expected_sidebar():
    "(page, number, section) in the order of nbs/sidebar.yml: index, then the story's sections"
    out = []
    for sec, names in _sidebar_yml():
        for n in names:
            m = re.match(r"(\d+[a-zA-Z0-9]*)_(.*)\.ipynb$", n)
            out.append(((m.group(2) if m else n[:-6]).lower() + ".html", m.group(1) if m else "", sec))
    return out

class _Doc(HTMLParser):
    "Links, images, ids, resource URLs, sidebar entries (nav.sidebar ol.toc) and prose text (outside code, scripts and typeset math) of one page"
    SKIP = {"script", "style", "pre", "code", "mjx-container", "textarea", "nav", "svg"}
    def __init__(self, text):
        super().__init__(); self.links, self.imgs, self.ids, self.resources, self.sidebar = [], [], set(), [], []
        self.sections, self._sec = [], None
        self.prose, self._skip, self._nav, self._a, self.title, self._in_title, self.h1, self._in_h1 = [], [], 0, None, "", False, "", False
        self.feed(text); self.prose = "".join(self.prose)
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"): self.ids.add(a["id"])
        if tag == "a" and a.get("href") is not None: self.links.append(a["href"])
        if tag == "img": self.imgs.append(a.get("src", ""))
        for k in ("src", "href", "data", "srcset"):
            if a.get(k) and tag in ("script", "link", "img", "iframe", "source", "video", "audio", "embed", "object", "track"):
                self.resources.append((tag, a[k]))
        if tag == "nav" and "sidebar" in (a.get("class") or "").split(): self._nav = 1
        if self._nav and tag == "ol" and ("toc" in (a.get("class") or "").split() or self._nav >= 2): self._nav += 1
        if self._nav >= 2 and tag == "a": self._a = [a.get("href"), "active" in (a.get("class") or "").split(), ""]
        if self._nav >= 2 and tag == "p" and "section-label" in (a.get("class") or ""): self._sec = ""
        if tag == "title": self._in_title = True
        if tag == "h1" and "page-title" in (a.get("class") or ""): self._in_h1 = True
        if tag in self.SKIP: self._skip.append(tag)
    def handle_endtag(self, tag):
        if tag == "ol" and self._nav >= 2: self._nav -= 1
        if tag == "p" and self._sec is not None: self.sections.append(self._sec.strip()); self._sec = None
        if tag == "nav" and self._nav: self._nav = 0
        if tag == "a" and self._a is not None: self.sidebar.append(tuple(self._a)); self._a = None
        if tag == "title": self._in_title = False
        if tag == "h1": self._in_h1 = False
        if self._skip and tag == self._skip[-1]: self._skip.pop()
    def handle_data(self, d):
        if self._a is not None: self._a[2] += d
        if self._sec is not None: self._sec += d
        if self._in_title: self.title += d
        if self._in_h1: self.h1 += d
        if not self._skip: self.prose.append(d)

@functools.lru_cache(maxsize=None)
def _doc(text):
    "One parse a page (static or its DOM after the scripts), shared by the tests that read it (each parse of the 54 pages: seconds)"
    return _Doc(text)

def _remote(url): return bool(re.match(r"^\s*(https?:)?//", url, re.I))

def test_sidebar_yml_places_every_notebook_in_the_story_sections():
    "nbs/sidebar.yml is the one place that maps notebooks to sections: each notebook once, the story's sections in order"
    listed = _sidebar_yml()
    names = [n for _, ns in listed for n in ns]
    assert sorted(names) == sorted(Path(n).name for n in _all_notebooks()), "nbs/sidebar.yml must list every notebook under nbs/ once"
    assert len(names) == len(set(names)) and listed[0] == (None, ["index.ipynb"])
    assert [sec for sec, _ in listed if sec] == SECTIONS, "the sidebar's sections are not the story's"
    start = dict((sec, ns) for sec, ns in listed if sec)["Start here"]
    assert {Path(n).stem for n in start} == START_HERE, "the guide and the walkthroughs are the 'Start here' section"
    assert [s for s, _ in docs.sidebar_sections()][1:] == SECTIONS, "tools/docs.py does not read the sections of nbs/sidebar.yml"

def test_pages_in_reading_order_with_numbered_sidebar(site):
    out, pages = site
    expected = _expected_sidebar()
    assert pages == [p for p, _, _ in expected], "pages are not in the order of nbs/sidebar.yml"
    for page in pages:
        d = _doc((out / page).read_text())
        assert [h for h, _, _ in d.sidebar] == [p for p, _, _ in expected], f"{page}: sidebar out of order"
        assert [h for h, act, _ in d.sidebar if act] == [page], f"{page}: the current page is not the one highlighted"
        assert d.sections == SECTIONS, f"{page}: the sidebar's section labels are {d.sections}"
        for (h, _, label), (_, num, _) in zip(d.sidebar, expected):
            label = " ".join(label.split())
            assert label and (not num or re.fullmatch(rf"{re.escape(num)} · \S.*", label)), f"{page}: sidebar entry {label!r} for {h}"

def test_no_page_loads_anything_from_the_web(site):
    out, pages = site
    for page in pages:
        text = (out / page).read_text()
        remote = [(t, u) for t, u in _doc(text).resources if _remote(u)]
        assert not remote, f"{page} loads from the web: {remote[:5]}"
        assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//|@import", text, re.I), f"{page}: remote CSS"
    for css in (out / "assets").rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//|@import", css.read_text(), re.I), f"{css.name}: remote CSS"
    assert (out / "assets" / "mathjax" / "tex-chtml-full.js").exists(), "MathJax is not bundled"
    assert list((out / "assets" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff")), "MathJax fonts are not bundled"

def test_links_to_a_section_find_it(site):
    "A link to `page.html#name` (nbdev links every backticked name it knows) must land on an element with that id"
    out, pages = site
    ids = {p: set(re.findall(r'\bid="([^"]+)"', (out / p).read_text())) for p in pages}
    bad = []
    for page in pages:
        for ref in re.findall(r'href="([^"]*#[^"]*)"', (out / page).read_text()):
            ref = html.unescape(ref)
            if _remote(ref) or ref.startswith(("mailto:", "javascript:")): continue
            target, frag = ref.split("#", 1)
            target = target or page
            if target in ids and not {frag, urllib.parse.unquote(frag)} & ids[target]: bad.append(f"{page}: {ref}")   # as browsers do
    assert not bad, ("links to sections that do not exist (document the name with show_doc, or do not backtick it): "
                     + ", ".join(sorted(set(bad))))

class _Quiet(http.server.SimpleHTTPRequestHandler):
    requests = None
    def log_message(self, *a): pass
    def log_request(self, code="-", size="-"):
        if self.requests is not None: self.requests.append((self.path, int(code) if str(code).isdigit() else code))

@pytest.fixture(scope="module")
def served(site):
    "The site on a loopback HTTP server (a free port), with the log of every request it answered"
    out, pages = site
    log = []
    handler = type("Handler", (_Quiet,), {"requests": log})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(out)))
    th = threading.Thread(target=srv.serve_forever, daemon=True); th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/", out, pages, log
    srv.shutdown(); srv.server_close()

def _chrome(url, tmp, *args, timeout=60):
    "One headless Chromium run on `url`, kept off the network (only 127.0.0.1 resolves); returns its stdout"
    dump = "--dump-dom" in args
    # A headless Chromium now and then exits with nothing on stdout (CI once lost run_data.html's DOM this way while
    # the other 42 pages loaded): a dump without its closing tag is tried again, twice, each time with a fresh profile.
    for attempt in range(3 if dump else 1):
        prof = tempfile.mkdtemp(prefix="chrome-", dir=tmp)
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--disable-quic", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
               "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", f"--user-data-dir={prof}", "--virtual-time-budget=10000",
               *args, url]
        try: r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        finally: shutil.rmtree(prof, ignore_errors=True)
        if not dump or "</html>" in r.stdout: return r.stdout
    warnings.warn(f"Chromium gave no DOM for {url} in 3 tries (exit {r.returncode}): {r.stderr[-500:]}")
    return r.stdout

@pytest.fixture(scope="module")
def browsed(browser):
    "Every page as its DOM after its scripts ran: page -> HTML"
    base, out, pages, log, doms, res = browser
    return base, out, pages, log, doms

@needs_chromium
def test_every_page_loads_in_chromium(browsed):
    base, out, pages, log, doms = browsed
    for page in pages:
        dom = doms[page]
        assert len(dom) > 1000 and "</html>" in dom, f"{page}: Chromium returned no DOM"
        static = _doc((out / page).read_text())
        d = _doc(dom)
        assert static.h1.strip() and d.h1.strip() == static.h1.strip() and static.h1.strip() in d.title, f"{page}: no page title in the DOM"
        assert d.prose.strip(), f"{page}: empty page"
    bad = [(p, c) for p, c in log if c not in (200, 304)]   # 304: one browser loads every page, from its cache after the first
    assert not bad, f"the browser asked for things the site does not have: {bad[:10]}"

@needs_chromium
def test_links_and_images_resolve(browsed):
    base, out, pages, log, doms = browsed
    @functools.cache
    def status(url):
        try:
            with urllib.request.urlopen(url, timeout=10) as r: return r.status
        except urllib.error.HTTPError as e: return e.code
    checked = 0
    for page in pages:
        d = _doc(doms[page])
        assert not [(t, u) for t, u in d.resources if _remote(u)], f"{page}: after its scripts ran it loads from the web"
        for ref in d.imgs + d.links:
            ref = html.unescape(ref).strip()
            if not ref or ref.startswith(("#", "data:", "mailto:", "javascript:")) or re.match(r"^[a-z][a-z0-9+.-]*:|^//", ref, re.I): continue
            url = urllib.parse.urljoin(base + page, ref.split("#")[0])
            assert url.startswith(base), f"{page}: {ref} leaves the site"
            assert status(url) == 200, f"{page}: {ref} -> HTTP {status(url)}"
            checked += 1
        for src in d.imgs:
            assert src and not _remote(src), f"{page}: image {src!r}"
    assert checked >= len(pages) * len(pages), "too few in-site links checked (is the sidebar there?)"
    figs = [img for page in pages for img in _doc(doms[page]).imgs if img.startswith("figures/")]
    assert figs and all((out / f).stat().st_size > 1000 for f in figs), "figures stored as notebook outputs are not shown as images"

@needs_chromium
def test_sidebar_in_browser_lists_every_notebook(browsed):
    base, out, pages, log, doms = browsed
    expected = [p for p, _, _ in _expected_sidebar()]
    for page in pages:
        d = _doc(doms[page])
        assert [h for h, _, _ in d.sidebar] == expected, f"{page}: the sidebar does not list every notebook in order"
        assert [h for h, act, _ in d.sidebar if act] == [page]

@needs_chromium
def test_math_is_typeset(browsed):
    "MathJax (bundled) typesets every page; pages known to have math show it typeset, and no page has raw TeX left in its prose"
    base, out, pages, log, doms = browsed
    math = [p for p in MATH_PAGES if p in pages]
    assert math, f"none of {MATH_PAGES} was built"
    for page in pages:
        dom = doms[page]
        assert 'data-math="typeset"' in dom, f"{page}: MathJax did not run"
        raw = re.findall(r"\$[^$\n]{1,200}?\$|\\\(|\\\[", _doc(dom).prose)
        assert not raw, f"{page}: raw TeX left in the prose: {raw[:5]}"
    for page in math: assert doms[page].count("<mjx-container") >= 3, f"{page}: its math was not typeset"
    assert any(r[0].startswith("/assets/mathjax/output/chtml/fonts/") for r in log), "MathJax fonts were not loaded from the site"

@needs_chromium
def test_screenshots(served, tmp_path_factory):
    "Screenshots of the index, the analysis page (once nbs/15b_analysis.ipynb exists) and a math page, in _site_screens/ and the tmp dir"
    base, out, pages, log = served
    tmp = tmp_path_factory.mktemp("screens")
    SCREENS.mkdir(exist_ok=True)
    shots = [p for p in SHOT_PAGES if p in pages]
    assert "index.html" in shots and len(shots) >= 2
    for page in shots:
        png = tmp / (Path(page).stem + ".png")
        _chrome(base + page, tmp, f"--screenshot={png}", "--window-size=1280,900")
        assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no screenshot of {page}"
        try:
            from PIL import Image
            with Image.open(png) as im: colours = len(im.convert("RGB").getcolors(1 << 20) or ())
            assert colours > 50, f"{page}: the screenshot is (nearly) blank"
        except ImportError: pass
        shutil.copy(png, SCREENS / png.name)

# ---- finding one's way in, stored outputs a reader can use, pages that show their results (issue 31) ----
def _visible_text(text):
    "All text a reader can see on a page (code and outputs included; not scripts, styles or attributes)"
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", text))

def _main(text): return text[re.search(r'<main\b[^>]*>', text).start():text.index("</main>")]

def test_stored_outputs_show_no_machine_paths_and_warnings_once(site):
    out, pages = site
    for page in pages:
        text = _visible_text((out / page).read_text())
        found = sorted({m.group(0) for m in MACHINE_PATH.finditer(text)} | ({str(ROOT)} & {str(ROOT)} if str(ROOT) in text else set()))
        assert not found, f"{page} shows paths of the machine that built or ran it: {found[:5]}"
        assert len(re.findall(r"\d+ row\(s\) without a label kept", text)) <= 1, f"{page}: the Quora label warning is shown more than once"
        assert "shared/seeds" not in text, f"{page} points readers at a folder only the developers have"

def test_every_page_has_on_this_page_and_notebook_mentions_link(site):
    out, pages = site
    stems = [n[:-6] for n in (Path(x).name for x in _all_notebooks()) if re.match(r"\d", n)]
    mention = re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, stems)) + r")(?![\w-])")
    for page in pages:
        text = (out / page).read_text()
        main = _main(text)
        if re.search(r"<h2[^>]*\bid=", main):
            toc = re.search(r'<details class="page-toc"[^>]*>.*?</details>', text, re.S)
            assert toc, f"{page}: no 'on this page' list"
            ids = set(re.findall(r'\bid="([^"]+)"', main))
            assert {html.unescape(h[1:]) for h in re.findall(r'href="(#[^"]+)"', toc.group(0))} <= ids, f"{page}: 'on this page' links nowhere"
        # a notebook named in prose or an inline `code` (not in code blocks, outputs or links) is a link
        prose = re.sub(r"<(pre|a|script|style|h[1-6])\b.*?</\1>", " ", main, flags=re.S)
        prose = re.sub(r'<div class="[^"]*jp-RenderedText[^"]*".*?</div>', " ", prose, flags=re.S)
        plain = [m.group(1) for m in mention.finditer(html.unescape(re.sub(r"<[^>]+>", "", prose)))
                 if docs.nb_page(m.group(1) + ".ipynb") != page]
        assert not plain, f"{page}: notebook names that are not links: {sorted(set(plain))[:8]}"
    index = (out / "index.html").read_text()
    assert index.count('class="nb-link"') >= 20, "the landing page's notebook map does not link its notebooks"

def test_source_links_stay_on_the_site(site):
    "show_doc's source links go to the notebook page defining the name (nbs/nbdev.yml's repository is not published)"
    out, pages = site
    repo = docs._yml_value("repo-url").rstrip("/")
    for page in pages:
        text = (out / page).read_text()
        assert not (repo and f'href="{repo}/blob/' in text), f"{page} links to {repo}, which is not a published repository"
    assert 'class="source-link"' in (out / "smart.html").read_text()

def test_api_entries_for_methods_readers_call(site):
    out, _ = site
    for page, name in [("smart.html", "EmbeddingPerturbation.ascend"), ("tables.html", "PaperTable.row"), ("predictor.html", "Predictor.sentiment"),
                       ("predictor.html", "Predictor.embed"), ("pcgrad.html", "PCGrad.apply")]:
        assert re.search(rf'<h[34][^>]*id="{re.escape(name.lower())}"', (out / page).read_text()), f"{page}: no entry for {name}"
    adapters = (out / "adapters.html").read_text()
    assert "TS(h) = gelu" not in adapters and r"\mathrm{TS}(h)" in adapters, "PAL's docstring formula is not typeset like the prose"

def _output_tables(text):
    "Tables in cell outputs that are not a show_doc parameter list"
    return [t for t in re.findall(r"<table\b.*?</table>", _main(text), re.S) if "Details" not in t and "<th>Type</th>" not in t]

def test_pages_about_results_show_them(site):
    out, pages = site
    ablate = (out / "ablate.html").read_text()
    tabs = [t for t in _output_tables(ablate) if "paper" in t and "ours" in t]
    assert len(tabs) >= len(list((ROOT / "results").glob("ablate*/*-quick"))) >= 1, "the ablation page shows no committed table"
    assert len(re.findall(r'<img[^>]+src="figures/ablate-', ablate)) >= 1, "the ablation page shows no figure"
    assert [t for t in _output_tables((out / "ensemble.html").read_text()) if "selected ensemble" in t], "no headroom table"
    analysis = (out / "analysis.html").read_text()
    figs = re.findall(r'<img[^>]+src="(figures/analysis-[^"]+)"', analysis)
    assert len(figs) >= 6 and all((out / f).stat().st_size > 5000 for f in figs), f"the analysis page shows {len(figs)} figures"

def test_search_index_covers_every_page(site):
    out, pages = site
    js = (out / "assets" / "search-index.js").read_text()
    import json
    index = json.loads(js[js.index("=") + 1:].rstrip().rstrip(";"))
    assert [p["u"] for p in index] == pages and all(p["s"] for p in index)
    pc = next(p for p in index if p["u"] == "pcgrad.html")
    assert "gradient surgery" in (pc["d"] + " ".join(t for _, _, t in pc["s"])).lower()
    assert (out / "search.html").exists() and not MACHINE_PATH.search(js)

AUDIT = """<!DOCTYPE html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"></head><body><pre id="audit">pending</pre>
<iframe id="f" style="width:400px;height:900px;border:0"></iframe><script>
const pages = %s, out = {}, f = document.getElementById('f'), sleep = ms => new Promise(r => setTimeout(r, ms));
const load = url => new Promise(r => { f.onload = r; f.src = url; });
(async () => {
  for (const p of pages) {
    await load(p);                 // one layout a page, at 400 px (the DOM does not depend on the width: site.js closes the
    const d = f.contentDocument;   // "on this page" list below 1400 px, so at 1280 px too)
    for (let i = 0; i < 100 && d.documentElement.dataset.math !== 'typeset'; i++) await sleep(100);
    const dom = '<!DOCTYPE html>' + d.documentElement.outerHTML;   // as --dump-dom gives it
    const w = d.documentElement.scrollWidth, wide = [];
    if (w > 400) for (const el of d.body.querySelectorAll('*')) {
      if (el.closest('pre, .highlight, mjx-container, table')) continue;
      const r = el.getBoundingClientRect(); if (r.right > 401) wide.push(el.tagName + '.' + el.className + ' ' + Math.round(r.right));
    }
    const imgs = Array.from(d.querySelectorAll('main img')).map(i => i.naturalWidth);
    out[p] = {dom, width: w, wide: wide.slice(0, 5), text: d.body.innerText, imgs,
              menu: getComputedStyle(d.querySelector('.sidebar-body')).display, toc: !!d.querySelector('.page-toc')};
  }
  await load('search.html?q=gradient%%20surgery');
  for (let i = 0; i < 50 && !f.contentDocument.querySelector('#search-page[data-searched]'); i++) await sleep(100);
  out['search'] = Array.from(f.contentDocument.querySelectorAll('.search-result')).map(li => li.dataset.page);
  document.getElementById('audit').textContent = JSON.stringify(out);
})().catch(e => { document.getElementById('audit').textContent = 'failed: ' + e + ' ' + (e.stack || ''); });
</script></body></html>"""

@pytest.fixture(scope="module")
def browser(served, tmp_path_factory):
    """One headless Chromium loads every page in a frame 400 px wide (one browser for all pages: starting one per page cost
    2 minutes on 2 cores; one layout a page, not one at 1280 px and another at 400 px: 56 s to 40 s): it keeps the DOM after
    the page's scripts ran, and measures width, visible text, images and the sidebar; then a search. Screenshots at 1280 px:
    `test_screenshots`"""
    import json
    base, out, pages, log = served
    (out / "_audit.html").write_text(AUDIT % json.dumps(pages))
    dom = _chrome(base + "_audit.html", tmp_path_factory.mktemp("audit"), "--dump-dom", "--window-size=1400,1000",
                  "--virtual-time-budget=600000", timeout=600)
    m = re.search(r'<pre id="audit">(.*?)</pre>', dom, re.S)
    assert m and m.group(1) != "pending", "the audit page did not finish"
    assert not m.group(1).startswith("failed"), f"the audit page {html.unescape(m.group(1))[:500]}"
    res = json.loads(html.unescape(m.group(1)))
    doms = {p: res[p].pop("dom") for p in pages}
    return base, out, pages, log, doms, res

@pytest.fixture(scope="module")
def audited(browser):
    "Every page in a 400 px wide frame (width, visible text, images, sidebar), and a search"
    base, out, pages, log, doms, res = browser
    return pages, res

@needs_chromium
def test_in_the_browser_at_400px(audited):
    "At 400 px: no page is wider than the viewport (code blocks and tables scroll inside), the sidebar folds behind its Menu button"
    pages, res = audited
    wide = {p: (r["width"], r["wide"]) for p, r in res.items() if p in pages and r["width"] > 400}
    assert not wide, f"pages wider than 400 px: {wide}"
    assert all(res[p]["menu"] == "none" for p in pages), "the sidebar's list is not folded at 400 px"
    for p in pages:
        found = sorted(set(MACHINE_PATH.findall(res[p]["text"])))
        assert not found and str(ROOT) not in res[p]["text"], f"{p}: machine paths in the visible text: {found[:5]}"
    assert len([w for w in res["analysis.html"]["imgs"] if w > 0]) >= 6, "the analysis page does not show its figures"
    assert [w for w in res["ablate.html"]["imgs"] if w > 0], "the ablation page shows no figure"

@needs_chromium
def test_search_finds_pcgrad_from_gradient_surgery(audited):
    pages, res = audited
    assert res["search"] and res["search"][0] == "pcgrad.html", f"search 'gradient surgery' ranks {res['search'][:3]}"

# ---- the book's promises: the code it teaches, the results its cells produce, the reports by name ----
CHAPTERS_IN_FLOW = {"attention.html": "forward", "bert.html": "forward", "optimizer.html": "step", "lora.html": "forward",
                    "adapters.html": "forward", "prefix.html": "forward", "smart.html": "ascend", "pcgrad.html": "apply", "step.html": "__call__"}

def _has(cls):
    "XPath: the element's class list holds `cls` (what CSS's `.cls` selects)"
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {cls} ')"

def _first(el, path):
    "The first node `path` finds from `el`, or None"
    found = el.xpath(path)
    return found[0] if found else None

def _text(el, sep=""):
    "The element's text, its pieces joined by `sep` (BeautifulSoup's get_text)"
    return sep.join(el.itertext())

@pytest.fixture(scope="module")
def trees(site):
    """Every page parsed once with lxml (its tree: page -> the <html> element, read only). BeautifulSoup over lxml took 21 s
    for the 54 pages here, lxml alone under a second"""
    import lxml.html
    out, pages = site
    return {p: lxml.html.fromstring((out / p).read_bytes()) for p in pages}

def _entries(root):
    "Each show_doc entry of a page: (its name, the cell that shows it)"
    for a in root.xpath(f"//main//a[{_has('source-link')}]"):
        cell = _first(a, f"ancestor::*[{_has('jp-Cell')}][1]")
        h = _first(a, "following::*[self::h2 or self::h3 or self::h4 or self::h5 or self::h6][1]")
        yield (_text(h, " ").replace("¶", "").strip() if h is not None else "?"), cell

def test_every_api_entry_shows_its_source(site, trees):
    "Under every documented name, its source: folded in the entry's cell, or the defining code cell right after it"
    out, pages = site
    missing, n = [], 0
    for page in pages:
        for name, cell in _entries(trees[page]):
            n += 1
            if cell is None: missing.append(f"{page}: {name}"); continue
            if _first(cell, f".//details[{_has('api-source')}]//pre") is not None: continue
            short = name.split(".")[-1].split()[0].strip("_")          # the heading shows `__getstate__` as bold "getstate"
            def near(axis):                                               # the code cell after (or before) the entry, past other entries
                x = _first(cell, f"{axis}::*[{_has('jp-Cell')}][1]")
                while x is not None and x.xpath(f".//a[{_has('source-link')}]") and not x.xpath(f".//*[{_has('jp-InputArea')}]"):
                    x = _first(x, f"{axis}::*[{_has('jp-Cell')}][1]")
                return _first(x, f".//*[{_has('jp-InputArea')}]//pre") if x is not None else None
            codes = [near("following-sibling"), near("preceding-sibling")]
            if not any(c is not None and re.search(rf"\b(def|class)\s+_*{re.escape(short)}_*\b|\b{re.escape(short)}\s*=", _text(c)) for c in codes):
                missing.append(f"{page}: {name}")
    assert n > 300, f"only {n} API entries found"
    assert not missing, f"{len(missing)} of {n} API entries show no source, e.g. {missing[:8]}"

def test_chapters_show_the_code_they_teach(site, trees):
    "The chapters that teach an algorithm show its code in the flow of the text, not only folded"
    out, _ = site
    for page, method in CHAPTERS_IN_FLOW.items():
        flow = " ".join(_text(pre) for pre in trees[page].xpath(f"//main//*[{_has('jp-InputArea')}]//pre"))
        assert re.search(rf"\bdef\s+{re.escape(method)}\b", flow), f"{page}: `def {method}` is not in the page's code cells"

def test_no_empty_output_blocks_and_every_chapter_shows_results(site, trees):
    "No output area without content; every notebook page (not the text-only ones) shows at least one output"
    out, pages = site
    text_only = {"index.html", "guide.html", "reports.html", "search.html"}
    empty, without = [], []
    for page in pages:
        outputs = trees[page].xpath(f"//main//*[{_has('jp-OutputArea-output')}]")
        for o in outputs:
            if not _text(o).strip() and not o.xpath(".//img|.//svg|.//table|.//details"): empty.append(page)
        shown = [o for o in outputs if not o.xpath(f".//a[{_has('source-link')}]|.//details[{_has('api-source')}]")]
        if page not in text_only and not shown: without.append(page)
    assert not empty, f"empty output blocks on {sorted(set(empty))}"
    assert not without, f"pages whose cells show no output: {without}"

def test_reproduction_page_opens_with_the_verdicts_and_shows_every_figure(site, trees):
    out, _ = site
    main = _first(trees["reproduction.html"], "//main")
    tables = [t for t in main.iter("table") if {"claim", "paper", "verdict"} <= {_text(th).strip() for th in t.iter("th")}]
    assert tables, "no table of all claims"
    n_claims = len((ROOT / "results" / "reproduction" / "claims.csv").read_text().strip().splitlines()) - 1
    assert len(list(tables[0].iter("tr"))) - 1 == n_claims, "the claims table does not list every claim"
    figs = [img.get("src") for img in main.iter("img")]
    n_figs = len(list((ROOT / "results" / "reproduction" / "figures").glob("*.png")))
    assert len(figs) >= n_figs and all((out / f).stat().st_size > 5000 for f in figs), f"{len(figs)} figures shown, {n_figs} in results/reproduction/figures"
    assert "reproduced" in _text(main)[:3000], "the page does not open with the verdict counts"
    for d in main.xpath(f".//details[{_has('runs')}]"):
        assert d.get("open") is None and d.xpath(f".//li//a[{_has('repo-link')}]"), "run folders are not folded, or not links"
    assert not re.search(r"(results/[\w./-]+;){3}", _text(main)), "run folders listed inline, joined by semicolons"

def test_repository_paths_are_links(site, trees):
    "A repository path in code font (`results/peft/frontier.png`, `tests/`) is a link to a page of the site showing it"
    out, pages = site
    unlinked = []
    for page in pages:
        for code in trees[page].xpath("//main//code"):
            if code.xpath(f"ancestor::a|ancestor::pre|ancestor::h1|ancestor::h2|ancestor::h3|ancestor::h4|ancestor::*[{_has('jp-RenderedText')}]"): continue
            t = _text(code).strip()
            if docs._REPO_PATH.fullmatch(t) and "*" not in t and (ROOT / t.rstrip("/")).exists() and (ROOT / t.rstrip("/")) != ROOT:
                unlinked.append(f"{page}: {t}")
    assert not unlinked, f"{len(unlinked)} repository paths are not links, e.g. {unlinked[:8]}"
    view = out / docs.REPO_DIR / "results" / "reproduction" / "report.md.html"
    assert view.exists() and "Reproduction report" in view.read_text()

def test_reports_are_named_not_numbered_like_seeds(site, trees):
    "The four reports are named by authors and number (\"Liu & Shen (000)\"), never \"seed 000\", and link to the reports page"
    out, pages = site
    bad = [p for p in pages if re.search(r"\b[Ss]eeds? 00[0234]\b", _text(trees[p]))]
    assert not bad, f"pages that call a report a seed: {bad}"
    assert 'href="reports.html#report-000"' in (out / "index.html").read_text()
    readme = (ROOT / "README.md").read_text() + (ROOT / "results" / "reproduction" / "report.md").read_text()
    assert not re.search(r"\b[Ss]eeds? 00[0234]\b", readme), "README or the reproduction report calls a report a seed"

def test_enhance_page_links_mentions_inside_text_and_keeps_the_rest():
    "Mentions in the middle of a text (before and after a tag, twice in one piece) become links; code blocks, comments and the rest stay"
    body = ('<!DOCTYPE html><html><head><title>t</title></head><body><main><h2 id="x">X <a href="#x">¶</a></h2>'
            '<p>see 08b_step, then <em>Liu &amp; Shen (000)</em> and 08b_step.<!--API-SOURCE:0--> after</p>'
            '<p><code>08b_step</code> <code>08b_step.TrainStep</code></p><pre>08b_step</pre><img src="a.png"></main></body></html>')
    out, recs = docs.enhance_page(body, "smart.html", {"08b_step": "step.html"}, {}, "", None)
    link = lambda href, cls, text: rf'<a (?=[^>]*href="{re.escape(href)}")(?=[^>]*class="{cls}")[^>]*>{text}</a>'
    assert len(re.findall(link("step.html", "nb-link", "08b_step"), out)) == 2, out
    assert re.search(r"see " + link("step.html", "nb-link", "08b_step") + r", then <em>" + link("reports.html#report-000", "report-link", "Liu &amp; Shen \\(000\\)"), out), out
    assert re.search(link("step.html", "nb-link", "<code>08b_step</code>"), out) and re.search(link("step.html#trainstep", "nb-link", r"<code>08b_step\.TrainStep</code>"), out)
    assert "<pre>08b_step</pre>" in out and "<!--API-SOURCE:0--> after</p>" in out and 'alt="A figure' in out and out.startswith("<!DOCTYPE html>")
    assert recs == [["X", "x", "see 08b_step, then Liu & Shen (000) and 08b_step. after 08b_step 08b_step.TrainStep 08b_step"]], recs
