"""Molmo2 (HF Molmo2ForConditionalGeneration) served for text prompts: its language model (Molmo2TextModel) as the
text model of the same layer.

Molmo2's decoder layer is Llama's with q/k RMSNorms in one of two layouts: qk_norm_type "qwen3" (a norm per head)
with pre-norms is Qwen 3's layer; qk_norm_type "olmo" (one norm over the whole q and k projections) with norm_after
(each sublayer's output normalised before it joins the residual, by input_layernorm and post_attention_layernorm) is
OLMo 2's (post_attention_layernorm and post_feedforward_layernorm there).  Refused: the other two combinations,
qkv_bias (HF's has no o_proj bias, Qwen 3's attention_bias has), and rope scaling on some layers only
(rope_scaling_layers).  HF's ForConditionalGeneration declares no tied weights: its lm head is always its own.

The embedding has additional_vocab_size rows past the vocabulary (the image and video markers, which the lm head
never emits): dropped, so prompt ids past the vocabulary are refused at the API.  Released checkpoints name the
language model as the original code did: model.transformer.blocks.{i}.* (att_proj = [q; k; v], attn_out,
ff_proj = [up; gate], ff_out, attn_norm, ff_norm), wte.embedding and wte.new_embedding (the additional rows), ln_f;
transformers 5 saves those two tables split at another row than the vocabulary's end, so the vocabulary's rows are
taken from both.  transformers 5's modules are model.language_model.* (Llama's names, one embedding of vocabulary
and additional rows).

No torch here: config.py reads this.
"""

MOLMO2 = "Molmo2ForConditionalGeneration"
_OLMO2 = "Olmo2ForCausalLM"
_LAYER_NAMES = {"self_attn.attn_out.": "self_attn.o_proj.", "mlp.ff_out.": "mlp.down_proj.",
                "attn_norm.": "input_layernorm.", "ff_norm.": "post_attention_layernorm."}
_TABLES = ("model.transformer.wte.embedding", "model.transformer.wte.new_embedding")
_FF_PROJ = ("up_proj", "gate_proj")   # ff_proj's halves, in order
_POST_NORMS = {"input_layernorm.": "post_attention_layernorm.",
               "post_attention_layernorm.": "post_feedforward_layernorm."}


def molmo2_text_view(arch: str, text) -> dict:
    """The text_config changes making Molmo2's text config Qwen 3's or OLMo 2's; ValueError for what neither runs."""
    layout = (text.qk_norm_type, bool(text.norm_after))
    if layout not in (("qwen3", False), ("olmo", True)):
        raise ValueError(f"{arch}: qk_norm_type {text.qk_norm_type!r} with norm_after={text.norm_after} is not "
                         "supported (only 'qwen3' with pre-norms, 'olmo' with norm_after)")
    if text.attention_bias:
        raise ValueError(f"{arch}: qkv_bias=True is not supported")
    rope = text.rope_parameters or {}
    scaled = rope.get("rope_type", "default") != "default"
    if scaled and sorted(text.rope_scaling_layers) != list(range(text.num_hidden_layers)):
        raise ValueError(f"{arch}: rope_scaling_layers {text.rope_scaling_layers} (scaled rope on some layers only) "
                         "is not supported")
    changes = {"tie_word_embeddings": False}
    return {**changes, "architectures": [_OLMO2]} if layout[0] == "olmo" else changes


def molmo2_text_tensors(name: str, tensor, config, tables: dict):
    """One language-model tensor of a Molmo2 checkpoint (its prefix already the text model's, model.transformer.*
    as released) -> the text model's (name, tensor) pairs.  tables: the embedding's tables as they are read; the
    vocabulary's rows of [embedding; new_embedding] are yielded once they are in."""
    olmo = config.language_model == _OLMO2
    if name in _TABLES:
        tables[name] = tensor
        embedding, done = tables.get(_TABLES[0]), tables.get("done")
        if not done and embedding is not None and (embedding.shape[0] >= config.vocab_size or len(tables) == 2):
            tables["done"] = True
            yield "model.embed_tokens.weight", _first_rows(embedding, tables.get(_TABLES[1]), config.vocab_size)
        return
    if name.startswith("model.transformer."):
        name = "model." + name[len("model.transformer."):]
        name = name.replace("model.blocks.", "model.layers.", 1) if name != "model.ln_f.weight" else "model.norm.weight"
        for old, new in _LAYER_NAMES.items():
            name = name.replace(old, new)
        if ".self_attn.att_proj." in name:
            q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
            for part, rows in zip("qkv", (tensor[:q], tensor[q:q + kv], tensor[q + kv:])):
                yield name.replace(".att_proj.", f".{part}_proj."), rows
            return
        if ".mlp.ff_proj." in name:
            half = tensor.shape[0] // 2
            for part, rows in zip(_FF_PROJ, (tensor[:half], tensor[half:])):
                yield name.replace(".ff_proj.", f".{part}."), rows
            return
    if name == "model.embed_tokens.weight":
        tensor = tensor[:config.vocab_size]
    if olmo and ".layers." in name:
        norm = next((old for old in _POST_NORMS if f".{old}" in name), None)
        name = name.replace(f".{norm}", f".{_POST_NORMS[norm]}") if norm else name
    yield name, tensor


def _first_rows(embedding, new_embedding, rows: int):
    """The first `rows` rows of [embedding; new_embedding]."""
    if embedding.shape[0] >= rows:
        return embedding[:rows]
    out = embedding.new_empty((rows, embedding.shape[1]))
    out[:embedding.shape[0]] = embedding
    out[embedding.shape[0]:] = new_embedding[:rows - embedding.shape[0]]
    return out
