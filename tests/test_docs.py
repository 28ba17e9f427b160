"""The offline docs site and the README are built from the notebooks. With Chromium installed (CI installs it), every page is
also loaded in a headless browser from a loopback server: links, images, sidebar, typeset math, and screenshots in _site_screens/."""
import functools, html, http.server, importlib, importlib.util, inspect, re, shutil, subprocess, tempfile, threading
import urllib.error, urllib.parse, urllib.request
from concurrent.futures import ThreadPoolExecutor
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
MATH_PAGES = ("losses.html", "smart.html", "train.html")   # pages whose prose has TeX math
SHOT_PAGES = ("index.html", "analysis.html", "losses.html")   # analysis.html (17_analysis) once it exists

def _expected_sidebar():
    "(page, number) in reading order, derived here from nbs/ independently of tools/docs.py: index, then notebooks by file name"
    nbs = sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith(("_", ".")) and p.name != "index.ipynb")
    out = [("index.html", "")]
    for n in nbs:
        m = re.match(r"(\d+[a-zA-Z0-9]*)_(.*)\.ipynb$", n)
        out.append(((m.group(2) if m else n[:-6]).lower() + ".html", m.group(1) if m else ""))
    return out

class _Doc(HTMLParser):
    "Links, images, ids, resource URLs, sidebar entries (nav.sidebar ol.toc) and prose text (outside code, scripts and typeset math) of one page"
    SKIP = {"script", "style", "pre", "code", "mjx-container", "textarea", "nav", "svg"}
    def __init__(self, text):
        super().__init__(); self.links, self.imgs, self.ids, self.resources, self.sidebar = [], [], set(), [], []
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
        if self._nav and tag == "ol" and "toc" in (a.get("class") or "").split(): self._nav = 2
        if self._nav == 2 and tag == "a": self._a = [a.get("href"), "active" in (a.get("class") or "").split(), ""]
        if tag == "title": self._in_title = True
        if tag == "h1" and "page-title" in (a.get("class") or ""): self._in_h1 = True
        if tag in self.SKIP: self._skip.append(tag)
    def handle_endtag(self, tag):
        if tag == "ol" and self._nav == 2: self._nav = 1
        if tag == "nav" and self._nav: self._nav = 0
        if tag == "a" and self._a is not None: self.sidebar.append(tuple(self._a)); self._a = None
        if tag == "title": self._in_title = False
        if tag == "h1": self._in_h1 = False
        if self._skip and tag == self._skip[-1]: self._skip.pop()
    def handle_data(self, d):
        if self._a is not None: self._a[2] += d
        if self._in_title: self.title += d
        if self._in_h1: self.h1 += d
        if not self._skip: self.prose.append(d)

def _remote(url): return bool(re.match(r"^\s*(https?:)?//", url, re.I))

def test_sidebar_yml_lists_notebooks_in_reading_order(site):
    listed = re.findall(r"^\s*-\s*(\S+)\s*$", (ROOT / "nbs" / "sidebar.yml").read_text(), re.M)
    nbs = sorted(p.name for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith(("_", ".")) and p.name != "index.ipynb")
    assert listed == ["index.ipynb"] + nbs, "nbs/sidebar.yml is not the notebooks in reading order: run `make docs`"

def test_pages_in_reading_order_with_numbered_sidebar(site):
    out, pages = site
    expected = _expected_sidebar()
    assert pages == [p for p, _ in expected], "pages are not in notebook order"
    for page in pages:
        d = _Doc((out / page).read_text())
        assert [h for h, _, _ in d.sidebar] == [p for p, _ in expected], f"{page}: sidebar out of order"
        assert [h for h, act, _ in d.sidebar if act] == [page], f"{page}: the current page is not the one highlighted"
        for (h, _, label), (_, num) in zip(d.sidebar, expected):
            label = " ".join(label.split())
            assert label and (not num or re.fullmatch(rf"{re.escape(num)} · \S.*", label)), f"{page}: sidebar entry {label!r} for {h}"

def test_no_page_loads_anything_from_the_web(site):
    out, pages = site
    for page in pages:
        text = (out / page).read_text()
        remote = [(t, u) for t, u in _Doc(text).resources if _remote(u)]
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
    prof = tempfile.mkdtemp(prefix="chrome-", dir=tmp)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--no-first-run", "--disable-quic", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
           "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", f"--user-data-dir={prof}", "--virtual-time-budget=10000",
           *args, url]
    try: r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally: shutil.rmtree(prof, ignore_errors=True)
    return r.stdout

@pytest.fixture(scope="module")
def browsed(served, tmp_path_factory):
    "Every page loaded in headless Chromium (two at a time): page -> DOM after its scripts ran"
    base, out, pages, log = served
    tmp = tmp_path_factory.mktemp("chromium")
    with ThreadPoolExecutor(2) as ex:
        doms = dict(zip(pages, ex.map(lambda p: _chrome(base + p, tmp, "--dump-dom"), pages)))
    return base, out, pages, log, doms

@needs_chromium
def test_every_page_loads_in_chromium(browsed):
    base, out, pages, log, doms = browsed
    for page in pages:
        dom = doms[page]
        assert len(dom) > 1000 and "</html>" in dom, f"{page}: Chromium returned no DOM"
        static = _Doc((out / page).read_text())
        d = _Doc(dom)
        assert static.h1.strip() and d.h1.strip() == static.h1.strip() and static.h1.strip() in d.title, f"{page}: no page title in the DOM"
        assert d.prose.strip(), f"{page}: empty page"
    bad = [(p, c) for p, c in log if c != 200]
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
        d = _Doc(doms[page])
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
    figs = [img for page in pages for img in _Doc(doms[page]).imgs if img.startswith("figures/")]
    assert figs and all((out / f).stat().st_size > 1000 for f in figs), "figures stored as notebook outputs are not shown as images"

@needs_chromium
def test_sidebar_in_browser_lists_every_notebook(browsed):
    base, out, pages, log, doms = browsed
    expected = [p for p, _ in _expected_sidebar()]
    for page in pages:
        d = _Doc(doms[page])
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
        raw = re.findall(r"\$[^$\n]{1,200}?\$|\\\(|\\\[", _Doc(dom).prose)
        assert not raw, f"{page}: raw TeX left in the prose: {raw[:5]}"
    for page in math: assert doms[page].count("<mjx-container") >= 3, f"{page}: its math was not typeset"
    assert any(r[0].startswith("/assets/mathjax/output/chtml/fonts/") for r in log), "MathJax fonts were not loaded from the site"

@needs_chromium
def test_screenshots(served, tmp_path_factory):
    "Screenshots of the index, the analysis page (once nbs/17_analysis.ipynb exists) and a math page, in _site_screens/ and the tmp dir"
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
