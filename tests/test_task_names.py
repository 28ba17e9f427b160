"""No module outside the task registry decides what to do by a task's name: behaviour comes from each task's `TaskSpec`"""
import ast
from pathlib import Path
from minbert_nb.data import TASKS, _BUILT_IN

PKG = Path(__file__).resolve().parent.parent/"minbert_nb"
# Where a built-in task's name may be written: the registry itself (data), the CS224N download manifest (fetch), the
# presets and run settings (config), the extra-data sources of the CS224N tasks (run_data), and the four reports' tables
# and claims (tables, claims, verdicts, table_report, reproduce), which are about those tasks by definition
REGISTRY = {"data", "fetch", "config", "run_data", "tables", "claims", "verdicts", "table_report", "reproduce", "_modidx"}

def task_name_constants(path:Path) -> list:
    "`(line, name)` of each string constant equal to a built-in task's name in `path` (docstrings and comments do not count)"
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return sorted((n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value in _BUILT_IN and id(n) not in docs)

def test_the_check_finds_names(tmp_path):
    p = tmp_path/"m.py"; p.write_text('"doc: sst"\nx = 1 if t == "sts" else 2\ny = {"para": 1}\n')
    assert task_name_constants(p) == [(2, "sts"), (3, "para")]

def test_no_task_names_outside_the_registry():
    found = {f.stem: task_name_constants(f) for f in sorted(PKG.glob("*.py")) if f.stem not in REGISTRY}
    found = {m: hits for m, hits in found.items() if hits}
    assert not found, f"task names outside the registry (ask the task's TaskSpec instead): {found}"

def test_built_in_tasks_are_specs():
    assert set(_BUILT_IN) == {"sst", "para", "sts", "cfimdb", "sick"} and all(TASKS[t].name == t for t in _BUILT_IN)
