"""The import name `radixlm` is put together from the top-level folders; the package list is read from the
tree (every folder with an __init__.py under a mapped folder), so a new subpackage is never left out of
the wheel."""
from pathlib import Path

from setuptools import setup

FOLDERS = {"radixlm": "radixlm_pkg", "radixlm.runtime": "runtime", "radixlm.radix_cache": "radix_cache",
           "radixlm.constrained": "constrained", "radixlm.kernels": "radixlm_kernels",
           "radixlm.frontend_lang": "frontend_lang"}


def packages(root: Path = Path(__file__).parent) -> list:
    found = []
    for name, folder in FOLDERS.items():
        for init in sorted((root / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(root / folder).parts
            found.append(".".join((name, *parts)))
    return found


setup(package_dir=FOLDERS, packages=packages())
