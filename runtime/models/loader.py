"""Find, convert and load models: local HF folders, local .gguf files, and the embedded default.

transformers is used here for configs, tokenizers and the one-time GGUF conversion only; the
forward pass is ours (runtime/models).  Nothing is ever downloaded.

  resolve_model_path(model) -> folder with config.json, tokenizer files and *.safetensors (model_paths.py)
  load_model(path, dtype, attn_backend_factory) -> (model, ModelConfig)
  load_tokenizer(path) -> fast tokenizer
"""

import json
import logging
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple

import torch

from radixlm.runtime.model_paths import DEFAULT_MODEL, cache_dir, convert_gguf, resolve_model_path  # noqa: F401 (re-exported)
from radixlm.runtime.models.config import ModelConfig

logger = logging.getLogger(__name__)


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
    from radixlm.runtime.models.registry import get_model_class

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
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.memory_pool import KVPool

    def factory(config: ModelConfig):
        pool = KVPool(config.num_layers, 1, config.num_kv_heads, config.head_dim, dtype=dtype, device=device)
        return create_attention_backend("auto", pool, config.sm_scale)

    return factory


def load_tokenizer(path):
    """The model's fast tokenizer (transformers AutoTokenizer) from a folder resolve_model_path accepts."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(resolve_model_path(str(path))))
