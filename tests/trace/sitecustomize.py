"""Which tests read the full data: CI's first pass records it, so its second pass (no data) runs only what the data changes.

`make test` puts this folder on PYTHONPATH, so every Python process of the suite loads it at start (the test workers,
the notebooks' kernels, the commands and trainings the tests start). With MINBERT_DATA_TRACE (a file) and
MINBERT_DATA_TRACE_ROOT (the full data folder) set, an audit hook (PEP 578) appends MINBERT_TRACE_ITEM -- the test file
or notebook being run, set by the root conftest.py -- to the trace file the first time its process opens or lists
anything under the data folder. Without those variables it does nothing."""
import os, sys

def install():
    trace, root = os.environ.get("MINBERT_DATA_TRACE"), os.environ.get("MINBERT_DATA_TRACE_ROOT")
    if not trace or not root or getattr(sys, "_minbert_data_trace", False): return
    roots = tuple({os.path.join(os.path.abspath(root), ""), os.path.join(os.path.realpath(root), "")})
    seen = set()
    def hook(event, args):
        if event not in ("open", "os.listdir", "os.scandir") or not args: return
        p = args[0]
        if isinstance(p, bytes): p = os.fsdecode(p)
        elif not isinstance(p, str):
            if not hasattr(p, "__fspath__"): return
            p = os.fspath(p)
            if isinstance(p, bytes): p = os.fsdecode(p)
        if not (p + os.sep).startswith(roots) and not os.path.abspath(p + os.sep).startswith(roots): return
        item = os.environ.get("MINBERT_TRACE_ITEM", "?")
        if item in seen: return
        seen.add(item)
        fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)   # os.open: no audit event of its own kind here
        try: os.write(fd, (item + "\n").encode())
        finally: os.close(fd)
    sys.addaudithook(hook); sys._minbert_data_trace = True

install()
