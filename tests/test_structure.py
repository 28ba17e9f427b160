"""The package's shape: the main names importable from the package itself, no import circles between modules, and
notebooks that import only from earlier ones, numbered as they build on each other, and a sidebar in that order"""
import json, re
from pathlib import Path
import minbert_nb

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted(p for p in (ROOT/"nbs").glob("*.ipynb") if p.stem[:2].isdigit())


def test_main_names_import_from_the_package():
    import importlib
    for name, home in minbert_nb._HOMES.items():
        assert getattr(minbert_nb, name) is getattr(importlib.import_module(f"minbert_nb.{home}"), name), name
    from minbert_nb import TrainConfig, MultitaskBert, load_run, PeftConfig   # as `from transformers import BertModel`
    assert issubclass(TrainConfig, MultitaskBert.__init__.__globals__["ModelConfig"]) and callable(load_run) and PeftConfig
    from minbert_nb import BertModel, BertConfig, MPNetModel, MPNetConfig    # the MPNet backbone beside BERT's
    assert issubclass(MPNetModel, BertModel) and issubclass(MPNetConfig, BertConfig) and "MPNetModel" in minbert_nb.__all__


def _imports(path:Path) -> set:
    "Modules of the package that `path` imports (relative imports, anywhere in the file: a lazy import is an arrow too)"
    return set(re.findall(r"^\s*from (?:\.|minbert_nb\.)(\w+) import", path.read_text(), re.M))


def test_no_import_circles_between_modules():
    graph = {p.stem: _imports(p) - {p.stem} for p in (ROOT/"minbert_nb").glob("*.py") if p.stem not in ("_modidx", "__init__")}
    state = {}
    def visit(m, stack):
        state[m] = "open"
        for n in graph.get(m, ()):
            assert state.get(n) != "open", f"import circle: {' -> '.join(stack + [m, n])}"
            if n not in state: visit(n, stack + [m])
        state[m] = "done"
    for m in graph:
        if m not in state: visit(m, [])


def test_notebooks_import_only_earlier_ones():
    home = {}
    for nb in NBS:
        for c in json.loads(nb.read_text())["cells"]:
            if m := re.search(r"#\|\s*default_exp\s+(\S+)", "".join(c["source"])): home[m.group(1)] = nb.stem
    order = {nb.stem: i for i, nb in enumerate(NBS)}
    later = set()
    for nb in NBS:
        for c in json.loads(nb.read_text())["cells"]:
            if c["cell_type"] != "code": continue
            for mod in re.findall(r"(?:from|import) minbert_nb\.(\w+)", "".join(c["source"])):
                if mod in home and order[home[mod]] > order[nb.stem]: later.add((nb.stem, home[mod]))
    assert not later, f"notebooks importing from later ones (renumber them so each comes after what it imports): {sorted(later)}"


def test_sidebar_follows_the_notebook_numbers():
    "The book reads in build order: nbs/sidebar.yml lists the numbered notebooks of nbs/ in the order of their numbers"
    import yaml
    names = []
    for item in yaml.safe_load((ROOT/"nbs"/"sidebar.yml").read_text())["website"]["sidebar"]["contents"]:
        names += [Path(x).stem for x in (item["contents"] if isinstance(item, dict) else [item])]
    numbered = [n for n in names if n[:2].isdigit() and (ROOT/"nbs"/f"{n}.ipynb").exists()]
    assert numbered == sorted(numbered) == [p.stem for p in NBS], f"nbs/sidebar.yml: numbered notebooks out of order: {numbered}"


def test_readme_report_counts_are_the_committed_report():
    "The README's verdict counts are those of results/reproduction/claims.csv (re-run `minbert_ablate --report`, then update both)"
    import pandas as pd
    counts = pd.read_csv(ROOT/"results"/"reproduction"/"claims.csv")["verdict"].value_counts().to_dict()
    text = " ".join((ROOT/"README.md").read_text().split())
    m = re.search(r"tests (\d+) of their claims.*?Today: (\d+) reproduced, (\d+) contradicted, (\d+) inconclusive.*?, (\d+) not run", text)
    assert m, "README: the reproduction report's summary line is missing"
    total, rep, con, inc, nr = map(int, m.groups())
    assert (total, rep, con, inc, nr) == (sum(counts.values()), counts.get("reproduced", 0), counts.get("contradicted", 0),
                                          counts.get("inconclusive", 0), counts.get("not run", 0)), counts


def test_readme_figures_are_the_committed_reports():
    """Every figure with an interval in the README's results, `X [low, high]`, is one the committed report prints (at the
    README's precision): a claim's reading, a member's, a device's or an earlier setting's. When a table lands and the report
    moves, a figure the README still quotes from before fails here, naming itself"""
    num = r"[+\-−]?\d+(?:\.\d+)?"
    pat = re.compile(rf"({num}) \[({num}), ({num})\]")
    val = lambda s: float(s.replace("−", "-"))
    places = lambda s: len(s.partition(".")[2])
    def figures(text):
        return [(m.group(0), [val(g) for g in m.groups()], [places(g) for g in m.groups()], m.start()) for m in pat.finditer(text)]
    report = figures((ROOT/"results"/"reproduction"/"report.md").read_text())
    readme = (ROOT/"README.md").read_text()
    results = readme[readme.index("\n## Results"):]; results = results[:results.index("\n## ", 1)]
    quoted = figures(results)
    assert len(quoted) > 20, "README: the results section quotes no intervals; was it renamed?"
    def printed(vs, ps):   # the README's rounding of some figure the report prints at its own precision
        return any(all(abs(v - w) <= 0.5 * 10**-p + 0.5 * 10**-q + 1e-9 for v, w, p, q in zip(vs, ws, ps, qs)) for _, ws, qs, _ in report)
    stale = [f"{s!r} (after: …{results[max(0, at - 70):at]!r})" for s, vs, ps, at in quoted if not printed(vs, ps)]
    assert not stale, ("README.md (from nbs/index.ipynb) quotes figures results/reproduction/report.md no longer prints; take them "
                       "from the report, then `python tools/docs.py readme`:\n" + "\n".join(stale))
