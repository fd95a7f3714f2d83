"""`python tests/server/bench_serving_cli.py ARGS` runs SGLang's `python -m sglang.bench_serving ARGS` unchanged.

One import is answered here: `sglang.benchmark.serving` imports a constant (FAKE_BOOTSTRAP_HOST) from
`sglang.srt.disaggregation.utils`, whose config chain reaches modules (`sglang/srt/configs/deepseek_ocr.py`,
`sglang/srt/multimodal/internvl_utils.py`) that import `torchvision.transforms` at module level and use it
only inside their image functions.  PyPI's torchvision wheels for x86_64 need a CUDA torch ('operator
torchvision::nms does not exist' beside our CPU torch).  So where torchvision is not installed,
`sglang.srt.disaggregation.utils` is imported first with a placeholder torchvision whose every name raises
when used (the benchmark client never calls it; if it did, the run would fail, not go on).  The
placeholder answers only import statements written in `sglang.srt` modules, never an availability probe
(transformers still finds no torchvision), and is gone from sys.modules before bench_serving starts.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import runpy
import sys
import types

PLACEHOLDER = "torchvision"
NEEDED = "sglang.srt.disaggregation.utils"
IMPORTERS = "sglang.srt."


class Unavailable:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        raise RuntimeError(f"{self._name}.{attr}: torchvision is a placeholder here (bench_serving_cli.py)")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name}(): torchvision is a placeholder here (bench_serving_cli.py)")


class PlaceholderModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unavailable(f"{self.__name__}.{attr}")


class PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers `import torchvision...` written in a module under IMPORTERS, and nothing else."""

    def find_spec(self, name, path=None, target=None):
        if name != PLACEHOLDER and not name.startswith(PLACEHOLDER + "."):
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back
        if frame is None or not frame.f_globals.get("__name__", "").startswith(IMPORTERS):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return PlaceholderModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def import_needed_with_placeholder():
    finder = PlaceholderFinder()
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module(NEEDED)
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == PLACEHOLDER or n.startswith(PLACEHOLDER + ".")]:
            del sys.modules[name]


def main():
    if importlib.util.find_spec(PLACEHOLDER) is None:
        import_needed_with_placeholder()
    sys.argv[0] = "sglang.bench_serving"
    runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
