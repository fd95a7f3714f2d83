"""DESIGN's import rules, read from the source with `ast` (nothing is imported or run).

The graph maps each product module (its import name, `radixlm.runtime.server.http_server`) to the
imports written in it: product modules it names and the top-level names of everything else (`torch`,
`transformers`), each marked as made at module level or inside a function or class body. Imports under
`if TYPE_CHECKING:` are left out. Importing a package's submodule does not count as importing the
package's `__init__` (ours hold docstrings, and `radixlm/__init__.py`'s lazy `__getattr__` would
otherwise close a cycle through every module).

Each rule is a function of a graph that returns its violations as strings; the tests run each rule on
the tree (no violations) and on a small graph with a violation planted (caught).
"""
import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _folders() -> dict:
    """setup.py's FOLDERS (import name -> folder), read without running setup()."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FOLDERS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no FOLDERS mapping")


@dataclass
class Module:
    """One module's imports: product modules and external top-level names, at module level or lazy."""
    is_package: bool = False
    product: dict = field(default_factory=dict)   # import name -> True when made at module level
    external: dict = field(default_factory=dict)  # top-level name (torch) -> True when at module level

    def add(self, table: dict, name: str, top: bool):
        table[name] = table.get(name, False) or top


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module):
    """Yield (node, at_module_level) for every import statement, skipping `if TYPE_CHECKING:` bodies."""
    def walk(node, top):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, top
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), top)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                yield from walk(child, False)
            else:
                yield from walk(child, top)
    yield from walk(tree, True)


def build_graph(root: Path = ROOT, folders: dict = None) -> dict:
    """{import name: Module} for every .py file under the mapped folders."""
    folders = folders or _folders()
    files = {}
    for name, folder in folders.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            is_pkg = parts[-1] == "__init__"
            files[".".join((name, *(parts[:-1] if is_pkg else parts)))] = (path, is_pkg)
    graph = {mod: Module(is_package=is_pkg) for mod, (_, is_pkg) in files.items()}
    for mod, (path, is_pkg) in files.items():
        node_mod = graph[mod]
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node, top in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [(alias.name, None) for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [(base, [alias.name for alias in node.names])]
            for base, names in targets:
                if base.split(".")[0] != "radixlm":
                    node_mod.add(node_mod.external, base.split(".")[0], top)
                    continue
                subs = [f"{base}.{n}" for n in names or () if f"{base}.{n}" in graph]
                if names is None or len(subs) < len(names):  # a module, or names taken from one
                    subs.append(base)
                for target in subs:
                    if target not in graph:
                        raise AssertionError(f"{mod} imports {target}, which is no product module")
                    node_mod.add(node_mod.product, target, top)
    return graph


# ---- rules: each takes a graph and returns its violations ----

def _reach(graph: dict, start: str, module_level_only: bool) -> dict:
    """Product modules reachable from start -> the path that reaches them (start first)."""
    paths, todo = {start: [start]}, [start]
    while todo:
        mod = todo.pop()
        for dep, top in sorted(graph[mod].product.items()):
            if dep not in paths and (top or not module_level_only):
                paths[dep] = paths[mod] + [dep]
                todo.append(dep)
    return paths


def cycles(graph: dict) -> list:
    """Every strongly connected component of more than one module (or a module importing itself),
    over all imports, lazy ones included."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan, iterative over the edge lists
        work = [(v, iter(sorted(graph[v].product)))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w].product))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1 or node in graph[node].product:
                        found.append(f"import cycle: {sorted(comp)}")

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _no_external(graph: dict, modules, name: str, module_level_only: bool) -> list:
    bad = []
    for mod in modules:
        for reached, path in _reach(graph, mod, module_level_only).items():
            top = graph[reached].external.get(name)
            if top is not None and (top or not module_level_only):
                bad.append(f"{mod} imports {name} through {' -> '.join(path)}")
    return bad


TORCH_FREE_CORE = ["radixlm.radix_cache.radix_tree", "radixlm.radix_cache.allocator", "radixlm.runtime.io_struct",
                   "radixlm.runtime.sampling_params", "radixlm.runtime.scheduler.policy"]
MAIN_PROCESS_PACKAGES = ["radixlm.runtime.server", "radixlm.runtime.openai", "radixlm.runtime.api"]


def _under(graph: dict, packages) -> list:
    return sorted(m for m in graph if any(m == p or m.startswith(p + ".") for p in packages))


def core_without_torch(graph: dict) -> list:
    """The radix tree, allocator, io_struct, sampling params and policy reach no torch, lazily or not."""
    return _no_external(graph, [m for m in TORCH_FREE_CORE if m in graph], "torch", module_level_only=False)


def main_process_without_torch(graph: dict) -> list:
    """server/, openai/, api/ (the detokenizer is in server/) reach neither torch nor transformers at
    module level (transformers' tokenizer classes import torch when it is installed); importing them
    leaves both out of the process, which test_main_process_import_leaves_torch_out proves by running it."""
    mods = _under(graph, MAIN_PROCESS_PACKAGES)
    return _no_external(graph, mods, "torch", module_level_only=True) + \
        _no_external(graph, mods, "transformers", module_level_only=True)


def kernels_self_contained(graph: dict) -> list:
    return [f"{mod} imports {dep}" for mod in _under(graph, ["radixlm.kernels"])
            for dep in graph[mod].product if not dep.startswith("radixlm.kernels")]


FRONTEND_BACKENDS = ["radixlm.frontend_lang.backends"]  # the only frontend modules that reach the runtime


def frontend_through_backends(graph: dict) -> list:
    """frontend_lang imports the runtime (or anything of ours outside itself, but the package root)
    only in its backend modules."""
    bad = []
    for mod in _under(graph, ["radixlm.frontend_lang"]):
        if mod in _under(graph, FRONTEND_BACKENDS):
            continue
        bad += [f"{mod} imports {dep} (only {FRONTEND_BACKENDS} may)" for dep in graph[mod].product
                if not dep.startswith("radixlm.frontend_lang")]
    return bad


SERVER = "radixlm.runtime.server"
SERVER_USERS = ["radixlm.runtime.cli", "radixlm.runtime.engine", "radixlm.runtime.child", SERVER]


def nothing_imports_server(graph: dict) -> list:
    """No package imports "upward" into server/: only the entry points (cli, engine, child) and server/."""
    users = set(_under(graph, SERVER_USERS))
    return [f"{mod} imports {dep}" for mod in sorted(graph) if mod not in users
            for dep in graph[mod].product if dep == SERVER or dep.startswith(SERVER + ".")]


RULES = [cycles, core_without_torch, main_process_without_torch, kernels_self_contained,
         frontend_through_backends, nothing_imports_server]


@pytest.fixture(scope="module")
def tree_graph():
    return build_graph()


def test_graph_covers_the_tree(tree_graph):
    """The graph holds every product module, and the edges the tree is known to have (a lazy one too)."""
    n_files = sum(len(list((ROOT / folder).rglob("*.py"))) for folder in _folders().values())
    assert len(tree_graph) == n_files
    http = tree_graph["radixlm.runtime.server.http_server"]
    assert http.product["radixlm.runtime.model_paths"] is False       # imported inside a method
    assert http.external.get("transformers") is False                 # the tokenizer loader's lazy import
    assert tree_graph["radixlm.runtime.engine"].product["radixlm.runtime.server.launch"] is not None


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_tree_keeps_rule(rule, tree_graph):
    assert rule(tree_graph) == []


def _graph(edges: dict, external: dict = None, lazy: set = ()) -> dict:
    """A synthetic graph: edges {module: [product imports]}, external {module: [names]}; (a, b) pairs in
    lazy are imports made inside a function."""
    mods = set(edges) | {d for deps in edges.values() for d in deps} | set(external or {})
    graph = {m: Module() for m in mods}
    for m, deps in edges.items():
        for d in deps:
            graph[m].add(graph[m].product, d, (m, d) not in lazy)
    for m, names in (external or {}).items():
        for n in names:
            graph[m].add(graph[m].external, n, (m, n) not in lazy)
    return graph


R, S, K, F = "radixlm.runtime", "radixlm.runtime.server", "radixlm.kernels", "radixlm.frontend_lang"
PLANTED = {
    # a lazy import closes the cycle: still a cycle
    cycles: _graph({"radixlm.constrained.a": ["radixlm.constrained.b"], "radixlm.constrained.b": ["radixlm.constrained.c"],
                    "radixlm.constrained.c": ["radixlm.constrained.a"]}, lazy={("radixlm.constrained.c", "radixlm.constrained.a")}),
    # torch two steps away, lazily
    core_without_torch: _graph({f"{R}.io_struct": [f"{R}.helpers"], f"{R}.helpers": [f"{R}.tensors"]},
                               {f"{R}.tensors": ["torch"]}, lazy={(f"{R}.tensors", "torch")}),
    # transformers at module level through a shared module
    main_process_without_torch: _graph({f"{R}.openai.handlers": [f"{R}.shared"]}, {f"{R}.shared": ["transformers"]}),
    kernels_self_contained: _graph({f"{K}.triton_ops": [f"{K}.ref", f"{R}.runner.forward_batch"]}),
    frontend_through_backends: _graph({f"{F}.state": [f"{F}.ir", f"{R}.engine"], f"{F}.backends": [f"{R}.engine"]}),
    nothing_imports_server: _graph({f"{R}.scheduler.scheduler": [f"{S}.metrics"], f"{R}.cli": [f"{S}.launch"],
                                    f"{S}.launch": [f"{S}.health"]}),
}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule_catches_planted_violation(rule):
    found = rule(PLANTED[rule])
    assert len(found) == 1, found


def test_rules_pass_what_they_allow():
    """The planted graphs with the offending edge made allowed: a lazy torch import outside the core, a
    lazy transformers import in the main process, the backend importing the engine, cli importing server/."""
    assert core_without_torch(_graph({f"{R}.io_struct": [f"{R}.ipc"]}, {f"{R}.runner.sampler": ["torch"]})) == []
    assert main_process_without_torch(_graph({f"{S}.http_server": [f"{R}.model_paths"]},
                                             {f"{R}.model_paths": ["transformers", "torch"]},
                                             lazy={(f"{S}.http_server", f"{R}.model_paths")})) == []
    assert frontend_through_backends(_graph({f"{F}.backends": [f"{R}.engine"], f"{F}.state": [f"{F}.ir"]})) == []
    assert nothing_imports_server(_graph({f"{R}.cli": [f"{S}.launch"], f"{R}.engine": [f"{S}.launch"]})) == []
    assert cycles(_graph({"radixlm.a": ["radixlm.b"], "radixlm.b": ["radixlm.c"]})) == []


def test_build_graph_reads_lazy_and_skips_type_checking(tmp_path):
    """build_graph on a planted tree: relative, lazy and TYPE_CHECKING imports, names vs submodules."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text(
        "from typing import TYPE_CHECKING\nfrom ..top import NAME\nif TYPE_CHECKING:\n    import torch\n"
        "    from radixlm.top import OTHER\nelse:\n    import numpy\n"
        "def f():\n    import transformers\n    from radixlm.sub import leaf\n")
    (pkg / "top.py").write_text("import torch.nn as nn\nNAME = 1\n")
    graph = build_graph(tmp_path, {"radixlm": "pkg"})
    leaf = graph["radixlm.sub.leaf"]
    assert leaf.product == {"radixlm.top": True, "radixlm.sub.leaf": False}
    assert leaf.external == {"typing": True, "numpy": True, "transformers": False}
    assert graph["radixlm.sub"].product == {"radixlm.sub.leaf": True}
    assert graph["radixlm.top"].external == {"torch": True}
    assert cycles(graph) == ["import cycle: ['radixlm.sub.leaf']"]


MAIN_PROCESS_ENTRY = ["radixlm.runtime.server.http_server", "radixlm.runtime.server.detokenizer",
                      "radixlm.runtime.server.tokenizer_manager", "radixlm.runtime.openai.handlers",
                      "radixlm.runtime.openai.responses_api"]


def test_main_process_import_leaves_torch_out():
    """What the graph rule says, run: importing the main process's modules imports neither torch nor transformers."""
    code = (f"import sys\nfor m in {MAIN_PROCESS_ENTRY!r}:\n    __import__(m)\n"
            "print(sorted(n for n in ('torch', 'transformers') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
