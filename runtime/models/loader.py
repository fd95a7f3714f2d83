"""Find, convert and load models: local HF folders, local .gguf files, and the embedded default.

transformers is used here for configs, tokenizers and the one-time GGUF conversion only; the
forward pass is ours (runtime/models).  Nothing is ever downloaded.

  resolve_model_path(model) -> folder with config.json, tokenizer files and *.safetensors (model_paths.py)
  load_model(path, dtype, attn_backend_factory, load_format=...) -> (model, ModelConfig)
  load_tokenizer(path) -> fast tokenizer
"""

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple

import torch

from radixlm.runtime.model_paths import DEFAULT_MODEL, cache_dir, convert_gguf, resolve_model_path  # noqa: F401 (re-exported)
from radixlm.runtime.models.config import ModelConfig, model_type_of
from radixlm.runtime.models.fp8_model import QUANTIZATIONS, checkpoint_format, prepare_checkpoint, quantize_model
from radixlm.runtime.models.multimodal_text import untied_as_checkpoint

logger = logging.getLogger(__name__)

# auto: the folder's *.safetensors; dummy: random weights made on the device (a shape without its weights, for
# benchmarks; SGLang's and vLLM's --load-format dummy).  RADIXLM_LOAD_FORMAT sets the default of every load.
LOAD_FORMATS = ("auto", "safetensors", "dummy")
DUMMY_SEED = 0


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
        raise FileNotFoundError(f"no *.safetensors in {path} (random weights of its shape: load format dummy, "
                                f"RADIXLM_LOAD_FORMAT=dummy)")
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def read_model_config(path: Path) -> ModelConfig:
    """ModelConfig of a resolved folder (config.json through AutoConfig, plus generation_config.json; a multimodal
    checkpoint's own lm head unties it, as in transformers)."""
    path = Path(path)
    hf_config = _hf_config(path)
    gen_file = path / "generation_config.json"
    gen = json.loads(gen_file.read_text()) if gen_file.is_file() else None
    return untied_as_checkpoint(ModelConfig.from_hf(hf_config, gen), path)


def _hf_config(path: Path):
    """transformers' config of the folder, never running a checkpoint's own code: a model_type transformers does not
    know (a config class shipped as remote code, e.g. Kimi K2's) is read by the config class of the architecture it
    names when we serve that architecture; otherwise transformers' ValueError."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    raw = json.loads((path / "config.json").read_text())
    stand_in = model_type_of(raw.get("architectures"))
    if raw.get("model_type") in CONFIG_MAPPING or stand_in is None:
        return AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    logger.info("config.json's model_type %r is not transformers'; reading it as %r (its architecture's)",
             raw.get("model_type"), stand_in)
    return AutoConfig.for_model(stand_in, **{k: v for k, v in raw.items() if k not in ("model_type", "auto_map")})


def load_model(path, dtype: torch.dtype = torch.float32,
               attn_backend_factory: Optional[Callable] = None, device="cpu",
               max_context: Optional[int] = None, load_format: Optional[str] = None, seed: int = DUMMY_SEED,
               quantization: Optional[str] = None, gguf=None):
    """-> (model, ModelConfig).  path: anything resolve_model_path accepts.

    quantization: None, or "fp8": the decoder's linear weights quantized to e4m3 per output channel after
    loading (fp8_model.py).  A checkpoint whose config.json says quant_method fp8 loads as it is, either way.

    load_format (LOAD_FORMATS; default $RADIXLM_LOAD_FORMAT, else auto): "dummy" needs only config.json and
    makes the weights on the device from `seed` (init_dummy_weights), without reading any weight file.

    attn_backend_factory(config: ModelConfig) -> AttentionBackend builds the backend (and, in
    practice, its KV pool sized for the config); default: a torch backend over a 1-slot pool,
    enough for nothing but weight checks.  Raises ValueError for unsupported architectures.

    gguf: a .gguf file (path's source) whose weights are read from it and kept in their block formats on the CPU
    (gguf_weights.py; the kernels' ISA is cpu_quant.best_isa()); model.quantization then says what was kept.
    """
    from radixlm.runtime.models.registry import get_model_class

    load_format = resolve_load_format(load_format)
    if quantization not in (None, *QUANTIZATIONS):
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, not {quantization!r}")
    path = resolve_model_path(str(path))
    config = read_model_config(path)
    model_cls = get_model_class(config.architecture, config.language_model)
    if attn_backend_factory is None:
        attn_backend_factory = _default_backend_factory(dtype, device)
    model = model_cls(config, attn_backend_factory(config), dtype=dtype, device=device,
                      max_context=max_context)
    if quantization == "fp8" and not getattr(model, "quantizes_to_fp8", True):
        raise ValueError(f"--quantization fp8 is not supported for {config.architecture} (its linear layers are not "
                         "in fp8_model.py's layouts)")
    fp8_checkpoint = checkpoint_format(json.loads((path / "config.json").read_text()))
    if gguf is not None:
        _load_gguf_quantized(model, gguf)
    elif load_format == "dummy":
        init_dummy_weights(model, seed, _initializer_range(path))
        logger.info("random weights (load format dummy, seed %d) for %s", seed, path)
    elif fp8_checkpoint is not None:
        if not getattr(model, "loads_fp8_checkpoints", False):
            raise ValueError(f"FP8 checkpoints load only for the Llama family, not {config.architecture}; load its "
                             "unquantized checkpoint with --quantization fp8 instead")
        prepare_checkpoint(model, fp8_checkpoint)
        model.load_weights(iter_safetensors(path))
    else:
        model.load_weights(iter_safetensors(path))
    if quantization == "fp8" or (fp8_checkpoint is not None and load_format == "dummy"):
        quantize_model(model)
    return model.eval(), config


def _load_gguf_quantized(model, gguf) -> None:
    from radixlm.kernels import cpu_quant
    from radixlm.runtime.models.gguf_weights import load_gguf_weights, quantization_name

    if not getattr(model, "loads_gguf_weights", True):
        raise ValueError(f"{model.config.architecture}: GGUF weights cannot be kept quantized (--quantization none "
                         "dequantizes them)")
    if model.embed_tokens.device.type != "cpu":
        raise ValueError("GGUF weights are kept quantized on CPUs only (--quantization none dequantizes them)")
    start = time.perf_counter()
    model.quantization = load_gguf_weights(model, gguf, cpu_quant.best_isa())
    size = sum(w.nbytes for w in {id(w): w for w in _quant_weights(model)}.values())
    logger.info("--quantization %s: %s, %.1f MiB of linear weights (%.1f s)", quantization_name(model.quantization),
                Path(gguf).name, size / 2**20, time.perf_counter() - start)


def _quant_weights(model):
    from radixlm.runtime.models.quant_linear import QuantWeight

    return [v for m in model.modules() for v in vars(m).values() if isinstance(v, QuantWeight)]


def resolve_load_format(load_format: Optional[str] = None) -> str:
    """load_format, else $RADIXLM_LOAD_FORMAT, else "auto"; ValueError for one not in LOAD_FORMATS."""
    value = load_format or os.environ.get("RADIXLM_LOAD_FORMAT") or "auto"
    if value not in LOAD_FORMATS:
        raise ValueError(f"load format must be one of {', '.join(LOAD_FORMATS)}, not {value!r}")
    return value


@torch.no_grad()
def init_dummy_weights(model: torch.nn.Module, seed: int = DUMMY_SEED, std: float = 0.02) -> None:
    """Fill every parameter where it lives, in named order from one generator seeded with `seed` on the
    parameters' device: norm weights 1, biases 0, everything else normal(0, std).  The same seed, shape and
    device give the same weights."""
    generator = None
    for name, param in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if "norm" in leaf:
            param.fill_(1.0)
        elif "bias" in leaf:
            param.zero_()
        else:
            if generator is None or generator.device != param.device:
                generator = torch.Generator(device=param.device)
                generator.manual_seed(seed)
            param.normal_(0.0, std, generator=generator)


def _initializer_range(path: Path, default: float = 0.02) -> float:
    """The config's initializer_range (its text_config's for multimodal configs), else `default`."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    value = cfg.get("initializer_range", cfg.get("text_config", {}).get("initializer_range"))
    return float(value) if value else default


def _default_backend_factory(dtype, device):
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.memory_pool import KVPool

    def factory(config: ModelConfig):
        pool = KVPool(config.num_layers, 1, config.num_kv_heads, config.head_dim, dtype=dtype, device=device,
                      v_is_k=config.kv_v_is_k)
        return create_attention_backend("auto", pool, config.sm_scale)

    return factory


def load_tokenizer(path):
    """The model's fast tokenizer (transformers AutoTokenizer) from a folder resolve_model_path accepts; without a
    chat template of its own, the processor's (chat_template.json, as vision-language checkpoints keep it)."""
    from transformers import AutoTokenizer

    from radixlm.runtime.models.multimodal_text import processor_chat_template

    folder = resolve_model_path(str(path))
    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = processor_chat_template(folder)
    return tokenizer
