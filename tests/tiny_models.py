"""Tiny random Llama-family models saved as loadable HF folders (config, safetensors, tokenizer).

make_tiny_model(tmp_path_factory, arch, max_shard_size=None) -> Path builds one.  tests/conftest.py
turns it into fixtures: `tiny_model("qwen3") -> Path`, built once per session and arch;
`make_tiny(arch, max_shard_size=None) -> Path`, a fresh build each call.
Every weight (norms and biases included) is random, so a mis-mapped weight changes the logits.
"""

import torch

TINY_ARCHS = ("llama", "qwen2", "qwen3", "mistral")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    '{"name": "Alice", "age": 30, "tags": ["a", "b"], "ok": true, "score": 1.5}',
    "Hello, world! How are you today? I am fine, thank you.",
    "def add(a, b):\n    return a + b\n",
    "0123456789 +-*/=<>()[]{} :;,.'\"",
]


def make_tiny_tokenizer(vocab_size: int = 400):
    """Byte-level BPE (any text encodes) with <|endoftext|>, <|im_start|>, <|im_end|> (eos)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _hf_config(arch: str, vocab: int, eos: int, pad: int):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, eos_token_id=eos, pad_token_id=pad,
                  bos_token_id=None, max_position_embeddings=256)
    if arch == "llama":  # untied, llama3 rope scaling that changes most frequencies
        return LlamaConfig(num_hidden_layers=3, tie_word_embeddings=False, rope_theta=10000.0,
                           rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                           **common)
    if arch == "qwen2":  # tied, q/k/v bias, linear rope scaling
        return Qwen2Config(num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1e6,
                           rope_scaling={"rope_type": "linear", "factor": 2.0}, **common)
    if arch == "qwen3":  # explicit head_dim != hidden/heads, q/k norm, attention bias incl. o_proj
        return Qwen3Config(num_hidden_layers=2, tie_word_embeddings=False, head_dim=32,
                           attention_bias=True, rope_theta=10000.0, **common)
    if arch == "mistral":  # tied, multi-query, sliding window smaller than the context
        common.update(num_key_value_heads=1, max_position_embeddings=512)
        return MistralConfig(num_hidden_layers=2, tie_word_embeddings=True, sliding_window=128,
                             rope_theta=10000.0, **common)
    raise ValueError(f"unknown tiny arch {arch!r}; choose from {TINY_ARCHS}")


def make_tiny_model(tmp_path_factory, arch: str, max_shard_size=None, tokenizer=None):
    """Build, randomise and save a tiny HF model of `arch` in {"llama","qwen2","qwen3","mistral"}.

    Returns the folder (config.json, generation_config.json, *.safetensors, tokenizer files).
    max_shard_size (e.g. "100KB") makes save_pretrained shard the weights with an index json.
    tokenizer: one from make_tiny_tokenizer with tokens added (the vocabulary follows its length).
    """
    from transformers import AutoModelForCausalLM

    tok = tokenizer or make_tiny_tokenizer()
    eos, pad = tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")
    config = _hf_config(arch, len(tok), eos, pad)
    gen = torch.Generator().manual_seed(1000 + TINY_ARCHS.index(arch))
    model = AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if p.dim() == 1:  # norms around 1, biases around 0
                p.copy_((1.0 if "norm" in name else 0.0) + 0.1 * noise)
            else:
                p.copy_(0.1 * noise)
    folder = tmp_path_factory.mktemp(f"tiny-{arch}")
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(folder, **kwargs)
    tok.save_pretrained(folder)
    return folder
