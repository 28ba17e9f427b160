"""nbval integration for nbdev notebooks.

nbdev-clean stores notebooks with their outputs but without execution counts; nbval then refuses every cell with an
output ("Unrun reference cell has outputs"). We number the code cells as nbval collects them, so outputs are kept for
the docs and readers, and `--nbval-lax` only checks that every cell runs. Cells flagged with nbdev's test flags
(`#| notest`, `#| gpu`, see `tst_flags` in pyproject.toml) are skipped, exactly as `nbdev-test` skips them.
"""
import os, re
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_SKIP = re.compile(r"^#\|\s*(notest|gpu)\b", re.M)

try:
    from nbval.plugin import IPyNbFile
except ImportError:  # nbval not installed: notebooks are simply not collected
    IPyNbFile = None

if IPyNbFile is not None and not getattr(IPyNbFile, "_minbert_patched", False):
    _collect = IPyNbFile.collect
    def collect(self):
        for item in _collect(self):
            if item.cell.get("execution_count") is None: item.cell.execution_count = item.cell_num + 1
            if _SKIP.search(item.cell.source): item.options["skip"] = True
            yield item
    IPyNbFile.collect, IPyNbFile._minbert_patched = collect, True

collect_ignore_glob = ["nbs/_proc/*", "_proc/*"]
