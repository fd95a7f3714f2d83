"""More vision-language checkpoints served for text prompts (multimodal_text.py): those whose language model is a
text model we serve unchanged, its text path (token embeddings in, the text model's logits out) the text model's.

Each checkpoint keeps its language model under a prefix of its own, which save_pretrained writes as released:
language_model.model.* (LLaVA-NeXT, InternVL, Aya Vision ...), model.language_model.* (Cohere2 Vision, LFM2-VL,
Exaone 4.5 ...), model.text_model.* (Idefics 2/3, SmolVLM), model.model.* (LLaVA-OneVision-1.5), llm.* (Ovis 2.5),
language_model.backbone.* (Nemotron-H Omni), none (Cosmos 3 Omni: layers.*, embed_tokens.*, norm.*).  Qianfan-OCR's
layers are language_model.model.encoder.layers.* as transformers saves them (its load renames encoder.layers. to
layers. everywhere), Kimi K2.5's language_model.model.blocks.* (its vision tower's blocks. renamed back everywhere);
both are language_model.model.layers.* as released; Emu3's text_model.model.* and text_model.lm_head.*.  Everything
else in the checkpoint is the vision (or audio, or image generation) side's and is dropped.  Phi-4-multimodal
(Phi4MultimodalForCausalLM) has no text_config: its flat config is Phi-3's (language_config), its language model
Phi-3's under the text model's names, its image and audio embedders model.embed_tokens_extend.* (HF's text path
leaves the embeddings as they are: image and audio token ids are embedded as any token).  Its vision and speech LoRA
adapters are not in a transformers checkpoint (PEFT folders of their own, which HF's text path does not load); a
checkpoint with the remote code's PEFT names (base_layer, lora_A) is refused, as HF would not load its weights.
Llama 3.2 Vision's text model (MllamaForCausalLM, mllama.py) and ERNIE 4.5 VL's (ERNIE 4.5 MoE over its text experts,
ernie_vl_config.py) are served here too.

Where the conditional-generation model's text path differs from its text model's, the difference is a text_config
change (text_config_changes): Cohere2 Vision's lm head does not scale the logits by logit_scale as Cohere 2 does;
PaddleOCR-VL's use_bias is Llama's attention_bias and mlp_bias; GLM-4.1V/4.6V's attention (GLM-4's with M-RoPE,
the same for text) has q/k/v biases whatever the config says (and heads of hidden_size / heads: another head_dim is
refused), GLM-OCR's none, GLM-4.5V's (GLM-4.5's) no q/k norms, Hy V4 VL's q_a and kv_a norms
rms_norm_eps (Hy V4's: RMSNorm's default 1e-6).  GLM-OCR's multi-token-prediction layer (the one
after the last) is skipped, as HF skips it; Cosmos 3 Omni's newer checkpoints name the attention as diffusers does
(to_q ... norm_k), renamed to the text model's (text_model_name); Inkling's released language model names
(model.llm.*) are inkling_mm_names.py's.  Cosmos 3 Edge: Arcee's layer (its fc1, fc2 are
Arcee's up_proj, down_proj), released like Cosmos 3 Omni with an image and action generator beside it (dropped, as
HF drops it), its lm head never tied (HF declares no tied weights).  Molmo2: Qwen 3's or OLMo 2's (molmo2_text.py).
DeepSeek-OCR 2: deepseek_ocr2_config.py's text model, its SAM and Qwen2 towers dropped.  MiniMax-M3
(MiniMaxM3SparseForConditionalGeneration): its language model as released (block_sparse_moe.*, read by minimax_m3.py)
or under transformers 5's names, its patch merger (patch_merge_mlp.*) dropped with the tower and projector.
Muse Glimmer and Muse Spark:
muse.py's and muse_spark.py's text models, their image, video (and audio) ids embedded as id 0
(multimodal_text.text_config), as HF's text path does; Muse Glimmer's lm head tied by the top-level
tie_word_embeddings only (text_config's is not read), Muse Spark's never (HF declares no tied weights).
Mistral Large 4:
mistral_large4.py's text model, its Pixtral tower dropped (and its draft head: mistral_large4.py).
Step 3.7: step3.py's text
model (released: model.layers.*, vision_model.*, vit_large_projector.*).

No torch here.
"""

import re
from typing import Optional

from .ernie_vl_config import ERNIE_VL, ernie_vl_rope, ernie_vl_text_name
from .mistral_large4_config import mistral_large4_text_name
from .molmo2_text import MOLMO2, molmo2_text_view

MISTRAL_LARGE4 = "MistralLarge4ForConditionalGeneration"

WRAPPER_ARCHITECTURES = (
    "LlavaNextForConditionalGeneration", "LlavaNextVideoForConditionalGeneration",
    "LlavaOnevisionForConditionalGeneration", "LlavaOnevision15ForConditionalGeneration",
    "VipLlavaForConditionalGeneration", "VideoLlavaForConditionalGeneration", "InternVLForConditionalGeneration",
    "LightOnOcrForConditionalGeneration", "AyaVisionForConditionalGeneration", "Cohere2VisionForConditionalGeneration",
    "Idefics2ForConditionalGeneration", "Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration",
    "Exaone4_5_ForConditionalGeneration", "GotOcr2ForConditionalGeneration", "Lfm2VlForConditionalGeneration",
    "Ovis2ForConditionalGeneration", "QianfanOCRForConditionalGeneration", "VideoLlama3ForConditionalGeneration",
    "HyperCLOVAXVisionV2ForConditionalGeneration", "DeepseekVLForConditionalGeneration",
    "Kimi_K25ForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration", "MiniCPMV4_7ForConditionalGeneration",
    "MiniCPMOcrForConditionalGeneration", "GraniteDoclingForConditionalGeneration",
    "Granite4VisionForConditionalGeneration", "Ovis2_5ForConditionalGeneration", "Lfm3VlForConditionalGeneration",
    "Qwen2_5OmniThinkerForConditionalGeneration", "Qwen3OmniMoeThinkerForConditionalGeneration",
    "DeepseekVLHybridForConditionalGeneration", "JanusForConditionalGeneration", "HunYuanVLForConditionalGeneration",
    "Glm4vForConditionalGeneration", "Glm46VForConditionalGeneration", "Glm4vMoeForConditionalGeneration",
    "NemotronH_Omni_Reasoning_V3", "GlmOcrForConditionalGeneration", "PaddleOCRVLForConditionalGeneration",
    "FuyuForCausalLM", "Cosmos3OmniForConditionalGeneration", "MllamaForConditionalGeneration",
    "Apertus1p5ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
    "Ernie4_5_VLMoeForConditionalGeneration", "AriaForConditionalGeneration", "CohereCompassForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "Emu3ForConditionalGeneration", "Dots3NoteForConditionalGeneration",
    "Phi4MultimodalForCausalLM",
    "Cosmos3EdgeForConditionalGeneration", MOLMO2, "DeepseekOcr2ForConditionalGeneration",
    "InklingForConditionalGeneration", "Inkling2ForConditionalGeneration", "Inkling2LoopForConditionalGeneration",
    "HYV4VLForConditionalGeneration", "MiniMaxM3SparseForConditionalGeneration",
    "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration",
    MISTRAL_LARGE4,
    "Step3p7ForConditionalGeneration",
)
# whose config is the language model's own, with the vision and audio configs beside its fields (no text_config)
_FLAT_ARCHITECTURES = ("Phi4MultimodalForCausalLM",)
WRAPPER_TEXT_PREFIXES = (("model.text_model.", "model."), ("model.model.", "model."), ("llm.model.", "model."),
                         ("llm.lm_head.", "lm_head."), ("language_model.backbone.", "backbone."),
                         ("language_model.model.encoder.layers.", "model.layers."),   # Qianfan-OCR's as HF saves it
                         ("language_model.model.blocks.", "model.layers."),   # Kimi K2.5's as HF saves it
                         ("layers.", "model.layers."), ("embed_tokens.", "model.embed_tokens."),   # Cosmos 3 Omni's
                         ("norm.", "model.norm."),
                         ("text_model.model.", "model."), ("text_model.lm_head.", "lm_head."))   # Emu3's as released
WRAPPER_VISION_PREFIXES = (
    "image_newline", "model.image_newline", "image_tower.", "video_tower.", "model.image_tower.", "model.video_tower.",
    "model.vision_model.", "model.connector.", "model.vision_encoder.", "model.vision_projection.", "model.aligner.",
    "model.projector.", "model.vision_projector.", "model.visual_embeddings_table.", "mlp1.", "model.mlp1.",
    "mm_projector.", "model.mm_projector.", "model.merger.", "model.layerwise_projectors.", "model.spatial_projectors.",
    "visual_tokenizer.", "vte.", "audio_tower.",   # Qwen Omni thinkers: audio too
    "model.high_res_vision_", "model.vqmodel.", "model.generation_",   # Janus's image generation side too
    "vit.", "mlp_AR.", "vision_embed_tokens.",   # HunYuanVL, PaddleOCR-VL, Fuyu
    "blocks.", "merger.", "patch_embed.", "pos_embed.", "deepstack_merger_list.",   # Cosmos 3 Omni
    "model.vision_tokenizer.", "model.audio_tokenizer.",   # Apertus 1.5's image and audio tokenizers
    "vqmodel.",   # Emu3's VQ-VAE as released
    "vision_encoder.", "audio_encoder.",   # Dots 3 Note's as released (its modules: model.vision_tower., audio_tower.)
    "model.resampler_model.",   # ERNIE 4.5 VL's (its vision tower: model.vision_model.)
    "model.vision_embedder.",   # Gemma 4 Unified's patch embedder (its embed_vision and embed_audio: Gemma 4's names)
    "model.embed_tokens_extend.",   # Phi-4-multimodal's image and audio embedders
    "model.vision_backbone.",   # Molmo2's as released
    "model.sam_model.", "model.qwen2_model.", "model.view_seperator", "model.view_separator",   # DeepSeek-OCR 2's
    "model.audio.",   # Inkling's audio tower as released (its vision tower's: model.visual.)
    "patch_merge_mlp.",   # MiniMax-M3's patch merger as released (its module's: model.multi_modal_projector.)
    "model.vision_adapter.",   # Muse Glimmer's (its vision tower: model.vision_tower., model.vision_projection.)
    "patch_merger.", "pre_mm_projector_norm.", "vision_language_adapter.",   # Mistral Large 4's as released
    "vit_large_projector.",   # Step 3.7's projector as released (its vision tower: vision_model.)
)
# text_config model types of these checkpoints only -> the text architecture that runs them
WRAPPER_LANGUAGE_MODEL_TYPES = {
    "granite_docling_text": "GraniteForCausalLM", "granite4_vision_text": "GraniteForCausalLM",
    "glm4v_text": "Glm4ForCausalLM", "glm4v_moe_text": "Glm4MoeForCausalLM", "glm_ocr_text": "Glm4ForCausalLM",
    "paddleocr_vl_text": "LlamaForCausalLM", "hunyuan_vl_text": "HunYuanDenseV1ForCausalLM",
    "qwen2_5_omni_text": "Qwen2ForCausalLM", "qwen3_omni_moe_text": "Qwen3MoeForCausalLM",
    "ernie4_5_vl_moe_text": "Ernie4_5_MoeForCausalLM", "phi4_multimodal": "Phi3ForCausalLM",
    "cosmos3_edge_text": "ArceeForCausalLM", "hy_v4_vl_text": "HYV4ForCausalLM",
    "minimax_m3_vl_text": "MiniMaxM3VLForCausalLM",
    "molmo2_text": "Qwen3ForCausalLM",   # or OLMo 2's (molmo2_text.py)
    "step3p5": "Step3p5ForCausalLM",   # Step 3.7's (step3_config.py, step3.py)
}
# whose checkpoints carry a multi-token-prediction layer after the last (model.layers.{num_layers}.*), which HF skips
_MTP_LAYER_ARCHITECTURES = ("GlmOcrForConditionalGeneration",)
# infixes of the language model's names as some checkpoints write them -> the text model's
_INFIX_RENAMES = {"Cosmos3OmniForConditionalGeneration": tuple(   # newer checkpoints' diffusers-style attention names
    (f".self_attn.{old}.", f".self_attn.{new}.") for old, new in (("to_q", "q_proj"), ("to_k", "k_proj"),
                                                                  ("to_v", "v_proj"), ("to_out", "o_proj"),
                                                                  ("norm_q", "q_norm"), ("norm_k", "k_norm")))}
_INFIX_RENAMES["Cosmos3EdgeForConditionalGeneration"] = _INFIX_RENAMES["Cosmos3OmniForConditionalGeneration"] + (
    (".mlp.fc1.", ".mlp.up_proj."), (".mlp.fc2.", ".mlp.down_proj."))   # as released, then transformers 5's
# Cosmos 3 Edge's image and action generator, in its released checkpoints, which HF drops
_COSMOS3_EDGE_GENERATOR = re.compile(
    r"^(model\.)?(action_modality_embed$|action_proj_(in|out)\.|time_embedder\.|proj_(in|out)\.|norm_moe_gen\.)"
    r"|^model\.layers\.\d+\.(input_layernorm_moe_gen|post_attention_layernorm_moe_gen|mlp_moe_gen|"
    r"self_attn\.(add_[qkv]_proj|to_add_out|norm_added_[qk]|k_norm_und_for_gen))\.")


def language_config(arch: str, hf_config):
    """The config of `arch`'s language model: its text_config, or the config itself where it is flat."""
    return hf_config if arch in _FLAT_ARCHITECTURES else hf_config.text_config


def text_model_name(name: str, config) -> Optional[str]:
    """A language model's checkpoint name (its prefix already the text model's) as the text model loads it, None for
    a tensor HF skips: GLM-OCR's multi-token-prediction layer, ERNIE 4.5 VL's vision experts.  config: the
    ModelConfig.  ValueError for Phi-4-multimodal's remote-code PEFT names."""
    if config.architecture in _FLAT_ARCHITECTURES and (".base_layer." in name or ".lora_" in name):
        raise ValueError(f"{config.architecture}: {name} is a LoRA adapter's name (the remote code's checkpoint); "
                         "transformers' Phi4MultimodalForCausalLM loads base weights under their own names only")
    if config.architecture in _MTP_LAYER_ARCHITECTURES and name.startswith(f"model.layers.{config.num_layers}."):
        return None
    if config.architecture == ERNIE_VL:
        return ernie_vl_text_name(name, config.moe.num_experts)
    if config.architecture == "Cosmos3EdgeForConditionalGeneration" and _COSMOS3_EDGE_GENERATOR.match(name):
        return None
    if config.architecture == MISTRAL_LARGE4:
        return mistral_large4_text_name(name)
    for old, new in _INFIX_RENAMES.get(config.architecture, ()):
        name = name.replace(old, new)
    return name


def text_config_changes(arch: str, text) -> dict:
    """The text_config fields to change so that the text model computes what `arch`'s text path does."""
    if arch == "Cohere2VisionForConditionalGeneration":   # its lm head leaves out Cohere 2's logit_scale
        return {"logit_scale": 1.0}
    if text.model_type == "glm4v_text":   # q/k/v biases, heads of hidden / heads, whatever the config says
        head_dim = getattr(text, "head_dim", None)
        if head_dim not in (None, text.hidden_size // text.num_attention_heads):
            raise ValueError(f"{arch}: head_dim {head_dim} other than hidden_size / num_attention_heads is not "
                             "supported (HF's attention ignores it, its rotary does not)")
        return {"attention_bias": True}
    if text.model_type == "glm_ocr_text":   # GLM-4.1V's without biases, heads of head_dim
        return {"attention_bias": False}
    if text.model_type == "paddleocr_vl_text":   # Llama's layer, use_bias on all seven projections
        return {"attention_bias": bool(text.use_bias), "mlp_bias": bool(text.use_bias)}
    if text.model_type == "glm4v_moe_text":   # no q/k norms
        return {"use_qk_norm": False}
    if text.model_type == "hy_v4_vl_text":   # its latent norms' eps is rms_norm_eps, Hy V4's RMSNorm's default
        return {"latent_norm_eps": float(text.rms_norm_eps)}
    if text.model_type == "ernie4_5_vl_moe_text":
        ernie_vl_rope(arch, text)
    if text.model_type == "phi4_multimodal":   # Phi-3's attention and MLP, no biases whatever the config says
        return {"attention_bias": False, "mlp_bias": False}
    if text.model_type == "cosmos3_edge_text":   # HF's model declares no tied weights
        return {"tie_word_embeddings": False}
    if text.model_type == "molmo2_text":
        return molmo2_text_view(arch, text)
    if text.model_type == "step3p5":   # num_attention_heads: the full layers' (step3_config.py reads each layer's)
        return {"allow_global_per_layer_attribute_access": True}
    return {}
