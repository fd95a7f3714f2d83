"""SGLang's request schema from the installed `sglang` package, read with ast (its modules import the GPU
runtime, so they are never imported): {field: default} of GenerateReqInput and SamplingParams."""

import ast
import importlib.util
import pathlib


def sglang_fields(relpath: str, cls: str) -> dict:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None, "install SGLang's wheel without its GPU deps: pip install --no-deps sglang==0.5.23"
    source = (pathlib.Path(spec.submodule_search_locations[0]) / relpath).read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {s.target.id: _default(s.value) for s in node.body if isinstance(s, ast.AnnAssign)}
    raise AssertionError(f"{cls} not found in {relpath}")


def _default(node):
    if isinstance(node, ast.Call):   # field(default=None, kw_only=True)
        node = next(k.value for k in node.keywords if k.arg == "default")
    if isinstance(node, ast.Name) and node.id == "TOP_K_ALL":
        return 1 << 30
    return ast.literal_eval(node)


GEN = sglang_fields("srt/managers/io_struct.py", "GenerateReqInput")
SAMP = sglang_fields("srt/sampling/sampling_params.py", "SamplingParams")


def all_defaults_body() -> dict:
    """Every field of both classes at SGLang's own default, as SGLang's gateway re-serializes a body,
    plus the gateway's `model`."""
    body = {k: v for k, v in GEN.items() if k not in ("text", "input_ids", "sampling_params")}
    return {**body, "model": "default", "text": "hi", "sampling_params": dict(SAMP)}
