"""The wheel built from the checkout installs into an empty folder and serves, with the source tree off
sys.path (the editable install's import hook hides a package missing from the wheel; here the import
hook never gets to answer, which the subprocess proves from `radixlm.__file__`).

The wheel's modules are checked against the tree's (every .py file under setup.py's FOLDERS), and the
check is run on wheels built from copies of the tree with one subpackage dropped from packaging, where
it must fail.
"""
import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DROPPED = "radixlm.runtime.distributed"   # the subpackage the planted cases leave out (the one issue 33 found missing)


def _folders(root: Path) -> dict:
    tree = ast.parse((root / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FOLDERS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no FOLDERS mapping")


def _module_name(parts: tuple) -> str:
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def tree_modules(root: Path = ROOT) -> set:
    """Import names of every product .py file in the tree."""
    found = set()
    for name, folder in _folders(root).items():
        for path in (root / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.add(_module_name((*name.split("."), *path.relative_to(root / folder).with_suffix("").parts)))
    return found


def wheel_modules(wheel: Path) -> set:
    with zipfile.ZipFile(wheel) as zf:
        return {_module_name(Path(n).with_suffix("").parts) for n in zf.namelist()
                if n.endswith(".py") and n.startswith("radixlm/")}


def copy_source(dest: Path) -> Path:
    """What the build reads: the top-level files and the mapped folders (no build/, egg-info or caches)."""
    dest.mkdir()
    for item in ROOT.iterdir():
        if item.is_file() and item.suffix in (".py", ".toml", ".md", ".in", ".cfg", ".txt"):
            shutil.copy2(item, dest / item.name)
    for folder in _folders(ROOT).values():
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return dest


def build_wheel(src: Path, out: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out)], cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("radixlm-*.whl")
    return wheel


def install(wheel: Path, target: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def run_outside(args: list, target: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Python with only the target added to its path, started in an empty folder away from the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


IMPORT_ALL = """
import importlib, pathlib, sys
target = pathlib.Path(sys.argv[1]).resolve()
import radixlm
assert pathlib.Path(radixlm.__file__).resolve().is_relative_to(target), radixlm.__file__
names = sorted(".".join(p.relative_to(target).with_suffix("").parts[:-1] if p.stem == "__init__"
                        else p.relative_to(target).with_suffix("").parts)
               for p in (target / "radixlm").rglob("*.py"))
for name in names:
    where = pathlib.Path(importlib.import_module(name).__file__).resolve()
    assert where.is_relative_to(target), (name, str(where))
# what they imported too: the editable install's finder answers for a package missing from the target
outside = sorted(n for n, m in sys.modules.items() if n.split(".")[0] == "radixlm" and m is not None and
                 not pathlib.Path(getattr(m, "__file__", None) or "/").resolve().is_relative_to(target))
assert not outside, f"imported from outside the target: {outside}"
print(len(names))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(copy_source(base / "src"), base / "dist")
    target = install(wheel, base / "target")
    (base / "elsewhere").mkdir()
    return wheel, target, base / "elsewhere"


def test_wheel_holds_every_module_of_the_tree(installed):
    wheel, _, _ = installed
    assert wheel_modules(wheel) == tree_modules()


def test_installed_wheel_imports_every_module_from_the_target(installed):
    _, target, elsewhere = installed
    done = run_outside(["-c", IMPORT_ALL, str(target)], target, elsewhere)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == len(tree_modules())


def test_installed_wheel_runs_serve_help(installed):
    _, target, elsewhere = installed
    done = run_outside(["-m", "radixlm.runtime.cli", "serve", "--help"], target, elsewhere)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--model" in done.stdout and "--port" in done.stdout


def _drop_from_setup(src: Path):
    """setup.py's package list with one subpackage filtered out."""
    setup_py = src / "setup.py"
    text = setup_py.read_text()
    assert text.count("packages=packages()") == 1, "setup.py no longer calls setup(packages=packages())"
    setup_py.write_text(text.replace("packages=packages()", f"packages=[p for p in packages() if p != {DROPPED!r}]"))


def _drop_init(src: Path):
    """The subpackage's __init__.py forgotten: the editable install still imports it as a namespace package."""
    (src / "runtime" / "distributed" / "__init__.py").unlink()


@pytest.mark.parametrize("drop", [_drop_from_setup, _drop_init], ids=["setup_list", "missing_init"])
def test_dropped_subpackage_is_caught(drop, tmp_path):
    src = copy_source(tmp_path / "src")
    drop(src)
    wheel = build_wheel(src, tmp_path / "dist")
    missing = tree_modules(src) - wheel_modules(wheel)
    assert missing and all(m.startswith(DROPPED + ".") or m == DROPPED for m in missing), missing
    assert "radixlm.runtime.distributed.topology" in missing
    if drop is _drop_from_setup:   # and the installed wheel fails to import: launch needs it
        target = install(wheel, tmp_path / "target")
        (tmp_path / "elsewhere").mkdir()
        done = run_outside(["-c", IMPORT_ALL, str(target)], target, tmp_path / "elsewhere")
        assert done.returncode != 0 and DROPPED in done.stderr, done.stderr[-3000:]
