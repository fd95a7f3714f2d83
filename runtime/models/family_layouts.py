"""FamilyLayouts: the fields of ModelConfig that describe one family's own layout (its layer kinds, recurrent state,
shared or looped blocks), each None outside that family.  ModelConfig derives from it; a new family's layout goes here.

No torch here: the scheduler and launcher read this too.
"""

from dataclasses import dataclass
from typing import Optional

from .chameleon_config import ChameleonLayout
from .decoder_config import DecoderLayout
from .doge_config import DogeAttention
from .dory_config import DoryLoops
from .dots3_config import Dots3Layers
from .gemma3n_config import Gemma3nLayers
from .gemma4_config import Gemma4Layers
from .gpt_config import GptLayout
from .hrm_text_config import HrmCycles
from .hy_v4_config import HyperStreams
from .inkling_config import InklingLayout
from .kolibri1_1_config import Kolibri11Layers
from .lfm2_config import ShortConv
from .linear_attention_config import LinearAttention
from .linear_hybrid_config import KimiDelta, LightningAttention
from .llama4_config import Llama4Attention
from .longcat_flash_config import LongcatLayout
from .mamba_config import Mamba2
from .mamba_stack_config import Mamba1
from .mimo_v2_flash_config import MimoLayers
from .minimax_m3_config import MiniMaxM3Layers
from .modernbert_config import ModernBertLayout
from .muse_config import MuseLayout
from .newtext_config import Cohere2MoeLayers
from .qwen4_exp_config import HyperConnections
from .recurrent_gemma_config import GriffinLayers
from .rwkv_config import RwkvLayout
from .step3_config import Step3Layers
from .xlstm_config import XlstmLayout
from .zamba2_config import SharedBlocks
from .zaya_config import ZayaLayout


@dataclass(frozen=True, kw_only=True)
class FamilyLayouts:
    llama4: Optional[Llama4Attention] = None   # Llama 4 (llama4_config.py): chunked attention, q/k L2 norms, temperature
    # Qwen3-Next, Qwen3.5 (linear_attention_config.py): gated delta-net layers, a recurrent state per request
    linear_attention: Optional[LinearAttention] = None
    mamba2: Optional[Mamba2] = None   # Granite 4.0 (mamba_config.py): Mamba-2 mixers, a recurrent state per request
    mamba1: Optional[Mamba1] = None   # Mamba, Falcon Mamba, Jamba (mamba_stack_config.py): Mamba-1 mixers
    residual_in_fp32: bool = False    # the pure Mamba stacks: the residual stream kept in float32
    shared_blocks: Optional[SharedBlocks] = None   # Zamba2 (zamba2_config.py): shared transformer blocks
    short_conv: Optional[ShortConv] = None   # LFM2 (lfm2_config.py): short convolutions, their inputs kept per request
    gpt: Optional[GptLayout] = None   # GPT-2, GPT-BigCode, OPT (gpt_config.py): learned positions, OPT's projections
    gemma4: Optional[Gemma4Layers] = None   # Gemma 4 (gemma4_config.py): per-layer shapes, KV shared across layers
    hrm: Optional[HrmCycles] = None   # HRM-Text (hrm_text_config.py): two stacks run in cycles, a KV layer per run
    dory: Optional[DoryLoops] = None   # Dory (dory_config.py): a looped section; num_layers counts its KV layers
    gemma3n: Optional[Gemma3nLayers] = None   # Gemma 3n (gemma3n_config.py): AltUp, LAuReL; its attention's: gemma4
    cohere2_moe: Optional[Cohere2MoeLayers] = None   # Cohere 2 MoE (newtext_config.py): its norm, shared experts
    alibi_slopes: Optional[tuple] = None   # BLOOM, MPT (alibi_config.py): each head's ALiBi slope, every layer
    griffin: Optional[GriffinLayers] = None   # RecurrentGemma (recurrent_gemma_config.py): RG-LRU and local attention
    rwkv: Optional[RwkvLayout] = None   # RWKV-4 (rwkv_config.py): time and channel mixes, no attention
    xlstm: Optional[XlstmLayout] = None   # xLSTM (xlstm_config.py): mLSTM blocks, no attention
    lightning: Optional[LightningAttention] = None   # MiniMax (linear_hybrid_config.py): lightning attention layers
    kimi_delta: Optional[KimiDelta] = None   # Kimi Linear (linear_hybrid_config.py): Kimi delta attention layers
    hyper: Optional[HyperConnections] = None   # Qwen4-Exp (qwen4_exp_config.py): residual streams, hyper-connections
    global_attention_scale: Optional[float] = None   # Ergo (ergo_config.py): the full layers' factor on their scores
    zaya: Optional[ZayaLayout] = None   # Zaya (zaya_config.py): convolved q/k and delayed values, a state per request
    dots3: Optional[Dots3Layers] = None   # Dots 3 Note (dots3_config.py): MLA shapes per layer, padded to one width
    hyper_streams: Optional[HyperStreams] = None   # Hy V4 (hy_v4_config.py): residual streams per token
    longcat: Optional[LongcatLayout] = None   # LongCat-Flash (longcat_flash_config.py): zero experts, MLA scales
    mimo: Optional[MimoLayers] = None   # MiMo-V2-Flash (mimo_v2_flash_config.py): KV heads per layer, narrower values
    doge: Optional[DogeAttention] = None   # Doge (doge_config.py): its head dim, the pool's one less
    kolibri1_1: Optional[Kolibri11Layers] = None   # Kolibri 1.1 (kolibri1_1_config.py): indexed layers, shared KV
    inkling: Optional[InklingLayout] = None   # Inkling (inkling_config.py): learned distance biases, short convolutions
    decoder: Optional[DecoderLayout] = None   # BART-, BERT-like decoders (decoder_config.py): embedding norms, heads
    self_attention_layers: tuple = ()   # Mllama (mllama_config.py): each layer's index in the checkpoint, if not its own
    # Gemma 4's multimodal checkpoints (multimodal_text.py): (pad id, the image/video/audio ids HF embeds as the pad)
    placeholders_as_pad: tuple = ()
    modernbert: Optional[ModernBertLayout] = None   # ModernBERT decoder (modernbert_config.py): norm biases, head
    # Falcon-RW (gpt_config.py): with alibi_slopes, HF's bfloat16-rounded ALiBi biases times this scale (torch_ref's)
    alibi_bf16: Optional[float] = None
    chameleon: Optional[ChameleonLayout] = None   # Chameleon (chameleon_config.py): image tokens, swin_norm
    minimax_m3: Optional[MiniMaxM3Layers] = None   # MiniMax-M3 (minimax_m3_config.py): dense layers, clamped SwiGLU
    muse: Optional[MuseLayout] = None   # Muse Glimmer's text model (muse_config.py): logit multiplier, post-norm eps
    # Mistral Large 4 (mistral_large4_config.py): per layer, the layer whose KV it attends over (its own where it stores)
    kv_source_layers: Optional[tuple] = None
    step3: Optional[Step3Layers] = None   # Step 3.7's text model (step3_config.py): query heads and clamps per layer

    @property
    def recurrent_layers(self) -> tuple:
        """The layers that keep a recurrent state per request instead of KV (gated delta nets, Mamba-2 mixers, LFM2's
        short convolutions)."""
        if self.linear_attention is not None:
            return self.linear_attention.linear_layers
        if self.griffin is not None:
            return self.griffin.recurrent_layers
        if self.rwkv is not None:
            return self.rwkv.recurrent_layers
        if self.xlstm is not None:
            return self.xlstm.recurrent_layers
        if self.lightning is not None:
            return self.lightning.linear_layers
        if self.kimi_delta is not None:
            return self.kimi_delta.linear_layers
        if self.short_conv is not None:
            return self.short_conv.conv_layers
        if self.mamba1 is not None:
            return self.mamba1.mamba_layers
        return self.mamba2.mamba_layers if self.mamba2 is not None else ()

    @property
    def kv_layers(self) -> int:
        """Layers with a KV cache (the hybrid families' attention layers; every layer otherwise)."""
        if self.gemma4 is not None:   # the layers that reuse an earlier layer's KV hold none
            return self.gemma4.kv_layers
        if self.kv_source_layers is not None:   # Mistral Large 4's likewise
            return sum(src == i for i, src in enumerate(self.kv_source_layers))
        if self.shared_blocks is not None:   # Zamba, Zamba2: the hybrid layers' shared blocks alone
            return len(self.shared_blocks.hybrid_layers)
        if self.mamba2 is not None and self.mamba2.block_kinds:   # Nemotron-H's MLP and MoE blocks hold none
            return sum(kind in ("attention", "parallel", "hybrid") for kind in self.mamba2.block_kinds)
        return self.num_layers - len(self.recurrent_layers)

