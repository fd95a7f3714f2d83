"""The GPU check's set-up, proved on CPU: on the bare GPU machine (its image's packages plus the wheels
bench/gpu_assets.sh carries in .gpu/whl, installed --no-deps) every third-party import of the product is
satisfied, every carried wheel's own dependencies are too, and the package shim bench/gpu_check.sh builds
from setup.py's FOLDERS imports radixlm through this tree.

Oracles: the import statements of every product module (ast), the image's list (bench/gpu_image_packages.json,
from the device notes), the Requires-Dist metadata of the carried packages as installed in this venv, and a
real import through the shim in a subprocess.  Planted cases show the checks fail when a package is missing."""

import ast
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
IMAGE = json.loads((ROOT / "bench" / "gpu_image_packages.json").read_text())
# the GPU machine's python3, for the markers of Requires-Dist
DEVICE_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def setup_folders() -> dict:
    """setup.py's FOLDERS: import name -> folder."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    return next(ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "FOLDERS" for t in n.targets))


# bench scripts that gpu_check.sh runs on the device, with their local helper modules (bench/ on sys.path)
DEVICE_BENCH_SCRIPTS = ("moe.py", "_common.py")
BENCH_LOCAL = {"_common"}


def product_imports(paths=None) -> dict:
    """Top-level module -> the product files importing it, for every absolute import (lazy ones inside
    functions included) that is neither the standard library nor radixlm itself (nor a bench/ helper).
    paths: the files to read (default: every module of setup.py's FOLDERS)."""
    found = {}
    if paths is None:
        paths = [p for folder in setup_folders().values() for p in sorted((ROOT / folder).rglob("*.py"))]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "radixlm" and top not in BENCH_LOCAL:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def carried_packages(script: str) -> list:
    """The distributions bench/gpu_assets.sh downloads: the words of its PKGS="..." assignment."""
    m = re.search(r'^PKGS="([^"]*)"', script, re.M)
    assert m, "bench/gpu_assets.sh has no PKGS=\"...\" list"
    return m.group(1).split()


def distribution_of(module: str) -> str:
    """The distribution an import name comes from: the image file's aliases, else this venv's metadata,
    else the import name itself (canonical form)."""
    if module in IMAGE["import_aliases"]:
        return canonicalize_name(IMAGE["import_aliases"][module])
    dists = md.packages_distributions().get(module)
    return canonicalize_name(dists[0] if dists else module)


def missing_imports(imports: dict, image: list, carried: list) -> dict:
    """{module: (distribution, importing files)} for imports neither the image nor the wheels provide."""
    have = {canonicalize_name(p) for p in image + carried}
    return {m: (distribution_of(m), sorted(files)) for m, files in imports.items() if distribution_of(m) not in have}


def missing_dependencies(carried: list, image: list) -> dict:
    """{carried package: [its Requires-Dist (no extras, markers for the device) in neither list]}, read from
    this venv's installed metadata (gpu_assets.sh pins the venv's versions)."""
    have = {canonicalize_name(p) for p in image + carried}
    missing = {}
    for pkg in carried:
        for text in md.requires(pkg) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(DEVICE_ENV):
                continue
            if canonicalize_name(req.name) not in have:
                missing.setdefault(pkg, []).append(str(req))
    return missing


@pytest.fixture(scope="module")
def carried():
    return carried_packages((ROOT / "bench" / "gpu_assets.sh").read_text())


def test_every_product_import_is_on_the_device(carried):
    imports = product_imports()
    assert {"torch", "triton", "fastapi", "zmq", "xgrammar", "msgspec"} <= set(imports)   # the walk sees them
    assert missing_imports(imports, IMAGE["packages"], carried) == {}


def test_the_moe_bench_imports_are_on_the_device(carried):
    """bench/moe.py (gpu_check.sh's moe step) imports on CUDA what the product does plus HF transformers."""
    imports = product_imports([ROOT / "bench" / name for name in DEVICE_BENCH_SCRIPTS])
    assert {"torch", "transformers"} <= set(imports)
    assert missing_imports(imports, IMAGE["packages"], carried) == {}


def test_every_carried_wheel_has_its_dependencies(carried):
    for pkg in carried:
        md.version(pkg)   # pinned from this venv: PackageNotFoundError when it is not installed here
    assert missing_dependencies(carried, IMAGE["packages"]) == {}


def test_the_checks_fail_on_planted_gaps(carried):
    planted = {**product_imports(), "no_such_module_xyz": {"runtime/planted.py"}}
    assert missing_imports(planted, IMAGE["packages"], carried)["no_such_module_xyz"] == (
        "no-such-module-xyz", ["runtime/planted.py"])
    # zmq without its wheel, an import name that differs from its distribution (pyzmq)
    without_zmq = [p for p in carried if canonicalize_name(p) != "pyzmq"]
    assert "zmq" in missing_imports(product_imports(), IMAGE["packages"], without_zmq)
    # the defect of the last GPU run: fastapi carried, its opentelemetry-api not
    without_otel = [p for p in carried if canonicalize_name(p) != "opentelemetry-api"]
    assert "opentelemetry-api" in " ".join(missing_dependencies(without_otel, IMAGE["packages"])["fastapi"])


def test_shim_from_setup_imports_radixlm_through_this_tree(tmp_path):
    shim = tmp_path / "shim"
    run = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--shim-only", str(shim)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    for link in (p for p in shim.rglob("*") if p.is_symlink()):
        assert link.exists(), f"dangling link {link} -> {os.readlink(link)}"
    for name, folder in setup_folders().items():   # every package the wheel holds (setup.py's rule)
        for init in (ROOT / folder).rglob("__init__.py"):
            pkg = Path(*name.split("."), *init.parent.relative_to(ROOT / folder).parts)
            assert (shim / pkg / "__init__.py").is_file(), f"{pkg} is not in the shim"
    code = ("import radixlm, radixlm.kernels, radixlm.runtime.server.launch, radixlm.runtime.runner.model_runner as m;"
            "print(radixlm.__path__[0]); print(radixlm.kernels.__file__); print(m.__file__)")
    env = {**os.environ, "PYTHONPATH": str(shim), "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    pkg_dir, kernels_file, runner_file = out.stdout.split()
    assert pkg_dir == str(shim / "radixlm")
    assert kernels_file.startswith(str(shim / "radixlm" / "kernels"))
    assert Path(kernels_file).resolve() == (ROOT / "radixlm_kernels" / "__init__.py").resolve()
    assert Path(runner_file).resolve() == (ROOT / "runtime" / "runner" / "model_runner.py").resolve()
