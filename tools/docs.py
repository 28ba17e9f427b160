"""Offline documentation for minbert_nb, without Quarto.

    python tools/docs.py site [--out _site]   # nbdev-proc-nbs, then nbconvert each processed notebook to HTML
    python tools/docs.py readme               # README.md from nbs/index.ipynb
    python tools/docs.py check-readme         # exit 1 if README.md is out of date

Users who have Quarto keep using `nbdev-docs` / `nbdev-preview` (the Quarto config is nbs/_quarto.yml).
The HTML pages here come from the same processed notebooks (`_proc/`), so `show_doc` sections, prose and outputs match
what Quarto would render; only the theme differs.
"""
import html, json, re, shutil, subprocess, sys
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter, MarkdownExporter
from nbconvert.preprocessors import TagRemovePreprocessor

ROOT = Path(__file__).resolve().parents[1]
NBS, PROC = ROOT / "nbs", ROOT / "_proc"

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
        for line in nb.cells[0].source.strip().strip("-").splitlines():
            if ":" in line and not line.startswith(" "):
                k, v = line.split(":", 1); front[k.strip()] = v.strip()
            elif line.startswith("  ") and front: front[list(front)[-1]] += " " + line.strip()
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

def site(out=ROOT / "_site"):
    "Build the HTML site from nbs/ into `out`; returns the list of pages written"
    out = Path(out); shutil.rmtree(out, ignore_errors=True); out.mkdir(parents=True)
    pages = []
    for p in proc_nbs():
        nb, front = _load(p)
        page = front.get("output-file", p.stem + ".html")
        pages.append((page, front.get("title", p.stem), front.get("description", ""), nb))
    pages.sort(key=lambda x: (x[0] != "index.html", x[0]))
    nav = "".join(f'<li><a href="{pg}">{html.escape(t)}</a></li>' for pg, t, _, _ in pages)
    exp = HTMLExporter(template_name="lab")
    exp.exclude_input_prompt = exp.exclude_output_prompt = True
    exp.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}, enabled=True), enabled=True)
    for page, title, desc, nb in pages:
        for c in nb.cells:  # hide show_doc inputs
            if c.metadata.get("transient", {}).get("remove_source"): c.source = ""
            if c.cell_type == "code" and not c.source.strip(): c.metadata["tags"] = ["remove_input"]
        body, _ = exp.from_notebook_node(nb)
        header = (f'<nav class="minbert-nav"><b>minbert_nb</b><ul>{nav}</ul></nav>'
                  f'<header class="minbert-title"><h1>{html.escape(title)}</h1><p>{html.escape(desc)}</p></header>')
        body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + header, body, count=1)
        body = body.replace("</head>", "<style>.minbert-nav{position:fixed;left:0;top:0;width:210px;padding:1em;font:14px sans-serif}"
                            "body{margin-left:240px}.minbert-title{padding:1em 0}</style></head>", 1)
        (out / page).write_text(body)
    return [pg for pg, *_ in pages]

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
