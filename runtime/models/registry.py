"""Model registry: HF architecture name -> our torch model class."""

from radixlm.runtime.models.afmoe import AfmoeForCausalLM
from radixlm.runtime.models.alibi import BloomForCausalLM, MptForCausalLM
from radixlm.runtime.models.apertus1p5 import Apertus1p5TextForCausalLM
from radixlm.runtime.models.aria import AriaTextForCausalLM
from radixlm.runtime.models.assembled import AXK1ForCausalLM, ExaoneMoeForCausalLM, FlexOlmoForCausalLM
from radixlm.runtime.models.bamba import BambaForCausalLM
from radixlm.runtime.models.bart_decoder import BartDecoderForCausalLM, BigBirdPegasusDecoderForCausalLM
from radixlm.runtime.models.beam import BeamForCausalLM
from radixlm.runtime.models.bert_decoder import BertDecoderForCausalLM, RoCBertDecoderForCausalLM
from radixlm.runtime.models.bitnet import BitNetForCausalLM
from radixlm.runtime.models.chameleon import ChameleonForCausalLM
from radixlm.runtime.models.cohere import CohereForCausalLM
from radixlm.runtime.models.cohere2_moe import Cohere2MoeForCausalLM
from radixlm.runtime.models.cohere_compass import CohereCompassForCausalLM
from radixlm.runtime.models.dbrx import DbrxForCausalLM
from radixlm.runtime.models.deepseek import DeepseekForCausalLM
from radixlm.runtime.models.diffllama import DiffLlamaForCausalLM
from radixlm.runtime.models.doge import DogeForCausalLM
from radixlm.runtime.models.dory import DoryForCausalLM
from radixlm.runtime.models.dots3 import Dots3NoteForCausalLM
from radixlm.runtime.models.dsa import AXK2ForCausalLM, DsaForCausalLM
from radixlm.runtime.models.early_gpt import (
    BioGptForCausalLM,
    CTRLLMHeadModel,
    GPTNeoXJapaneseForCausalLM,
    OpenAIGPTLMHeadModel,
)
from radixlm.runtime.models.encdec import GitDecoderForCausalLM, XlmForCausalLM
from radixlm.runtime.models.ergo import ErgoForCausalLM
from radixlm.runtime.models.ernie4_5_moe import Ernie4_5_MoeForCausalLM, HunYuanMoEV1ForCausalLM
from radixlm.runtime.models.falcon import FalconForCausalLM
from radixlm.runtime.models.falcon_h1 import FalconH1ForCausalLM
from radixlm.runtime.models.flint import FlintForCausalLM
from radixlm.runtime.models.gemma import GemmaForCausalLM, VaultGemmaForCausalLM
from radixlm.runtime.models.gemma2 import Gemma2ForCausalLM
from radixlm.runtime.models.gemma3 import Gemma3ForCausalLM
from radixlm.runtime.models.gemma3n import Gemma3nForCausalLM
from radixlm.runtime.models.gemma4 import Gemma4ForCausalLM
from radixlm.runtime.models.glm4 import Glm4ForCausalLM, GlmForCausalLM
from radixlm.runtime.models.gpt2 import GPT2LMHeadModel, GPTBigCodeForCausalLM, GPTNeoForCausalLM
from radixlm.runtime.models.gpt_neox import CodeGenForCausalLM, GPTJForCausalLM, GPTNeoXForCausalLM
from radixlm.runtime.models.gpt_oss import GptOssForCausalLM
from radixlm.runtime.models.granite_hybrid import GraniteMoeHybridForCausalLM
from radixlm.runtime.models.granite_moe import GraniteMoeForCausalLM
from radixlm.runtime.models.granite_swa import GraniteMoeSWAForCausalLM, GraniteSWAForCausalLM
from radixlm.runtime.models.hrm_text import HrmTextForCausalLM
from radixlm.runtime.models.hy_v3 import HYV3ForCausalLM
from radixlm.runtime.models.hy_v4 import HYV4ForCausalLM
from radixlm.runtime.models.hyperclovax import HyperCLOVAXForCausalLM
from radixlm.runtime.models.inkling import InklingForCausalLM
from radixlm.runtime.models.inkling2 import Inkling2ForCausalLM
from radixlm.runtime.models.inkling2_loop import Inkling2LoopForCausalLM
from radixlm.runtime.models.jamba import JambaForCausalLM
from radixlm.runtime.models.jetmoe import JetMoeForCausalLM
from radixlm.runtime.models.kimi_linear import KimiLinearForCausalLM
from radixlm.runtime.models.kolibri import Kolibri1ForCausalLM
from radixlm.runtime.models.kolibri1_1 import Kolibri1_1ForCausalLM
from radixlm.runtime.models.laguna import LagunaForCausalLM, MellumForCausalLM
from radixlm.runtime.models.lara_mini import LaraMiniForCausalLM
from radixlm.runtime.models.lfm2 import Lfm2ForCausalLM, Lfm2MoeForCausalLM
from radixlm.runtime.models.lfm3 import Lfm3ForCausalLM
from radixlm.runtime.models.llama import LlamaForCausalLM
from radixlm.runtime.models.llama4 import Llama4ForCausalLM
from radixlm.runtime.models.llama_like import (
    ApertusForCausalLM,
    ArceeForCausalLM,
    CwmForCausalLM,
    Ernie4_5ForCausalLM,
    Exaone4ForCausalLM,
    HeliumForCausalLM,
    HunYuanDenseV1ForCausalLM,
    NanoChatForCausalLM,
)
from radixlm.runtime.models.longcat_flash import LongcatFlashForCausalLM
from radixlm.runtime.models.mamba_stack import MambaStackForCausalLM
from radixlm.runtime.models.mimo_v2_flash import MiMoV2FlashForCausalLM
from radixlm.runtime.models.minicpm3 import MiniCPM3ForCausalLM
from radixlm.runtime.models.minicpm5_moe import MiniCPM5MoeForCausalLM
from radixlm.runtime.models.minimax_m2 import MiniMaxM2ForCausalLM
from radixlm.runtime.models.minimax_m3 import MiniMaxM3ForCausalLM
from radixlm.runtime.models.minimax_text import MiniMaxForCausalLM
from radixlm.runtime.models.mistral_large4 import MistralLarge4ForCausalLM
from radixlm.runtime.models.mllama import MllamaForCausalLM
from radixlm.runtime.models.modernbert_decoder import ModernBertDecoderForCausalLM
from radixlm.runtime.models.moe_model import MoEForCausalLM
from radixlm.runtime.models.multimodal_text import MULTIMODAL_TEXT_ARCHITECTURES, language_model_class
from radixlm.runtime.models.muse import MuseGlimmerTextForCausalLM
from radixlm.runtime.models.muse_spark import MuseSparkTextForCausalLM
from radixlm.runtime.models.nemotron import Jais2ForCausalLM, NemotronForCausalLM
from radixlm.runtime.models.nemotron_h import NemotronHForCausalLM
from radixlm.runtime.models.olmo import OlmoForCausalLM
from radixlm.runtime.models.olmo2 import Olmo2ForCausalLM
from radixlm.runtime.models.olmo3 import Olmo3ForCausalLM
from radixlm.runtime.models.olmo_hybrid import OlmoHybridForCausalLM
from radixlm.runtime.models.olmoe import OlmoeForCausalLM
from radixlm.runtime.models.opt import OPTForCausalLM
from radixlm.runtime.models.persimmon import PersimmonForCausalLM
from radixlm.runtime.models.phi import PhiForCausalLM
from radixlm.runtime.models.phi3 import Phi3ForCausalLM
from radixlm.runtime.models.phimoe import PhimoeForCausalLM
from radixlm.runtime.models.qwen3_next import Qwen3NextForCausalLM
from radixlm.runtime.models.qwen4_exp import Qwen4ExpForCausalLM
from radixlm.runtime.models.recurrent_gemma import RecurrentGemmaForCausalLM
from radixlm.runtime.models.roformer import RoFormerDecoderForCausalLM
from radixlm.runtime.models.rwkv import RwkvForCausalLM
from radixlm.runtime.models.stablelm import StableLmForCausalLM
from radixlm.runtime.models.starcoder2 import Starcoder2ForCausalLM
from radixlm.runtime.models.step3 import Step3ForCausalLM
from radixlm.runtime.models.xglm import XGLMForCausalLM
from radixlm.runtime.models.xlstm import xLSTMForCausalLM
from radixlm.runtime.models.xmod import XmodDecoderForCausalLM
from radixlm.runtime.models.zamba import ZambaForCausalLM
from radixlm.runtime.models.zamba2 import Zamba2ForCausalLM
from radixlm.runtime.models.zaya import ZayaForCausalLM

MODEL_REGISTRY = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "Gemma2ForCausalLM": Gemma2ForCausalLM,
    "Gemma3ForCausalLM": Gemma3ForCausalLM,
    "Phi3ForCausalLM": Phi3ForCausalLM,
    "MixtralForCausalLM": MoEForCausalLM,
    "Qwen2MoeForCausalLM": MoEForCausalLM,
    "Qwen3MoeForCausalLM": MoEForCausalLM,
    "GptOssForCausalLM": GptOssForCausalLM,
    "GemmaForCausalLM": GemmaForCausalLM,
    "Olmo2ForCausalLM": Olmo2ForCausalLM,
    "Olmo3ForCausalLM": Olmo3ForCausalLM,
    "GraniteForCausalLM": LlamaForCausalLM,
    "SmolLM3ForCausalLM": LlamaForCausalLM,
    "Starcoder2ForCausalLM": Starcoder2ForCausalLM,
    "StableLmForCausalLM": StableLmForCausalLM,
    "PhiForCausalLM": PhiForCausalLM,
    "CohereForCausalLM": CohereForCausalLM,
    "Glm4ForCausalLM": Glm4ForCausalLM,
    "MinistralForCausalLM": LlamaForCausalLM,
    "SeedOssForCausalLM": LlamaForCausalLM,
    "Ernie4_5ForCausalLM": Ernie4_5ForCausalLM,
    "Exaone4ForCausalLM": Exaone4ForCausalLM,
    "HunYuanDenseV1ForCausalLM": HunYuanDenseV1ForCausalLM,
    "ArceeForCausalLM": ArceeForCausalLM,
    "DeepseekV2ForCausalLM": DeepseekForCausalLM,
    "DeepseekV3ForCausalLM": DeepseekForCausalLM,
    "Glm4MoeLiteForCausalLM": DeepseekForCausalLM,
    "Ministral3ForCausalLM": LlamaForCausalLM,
    "Glm4MoeForCausalLM": MoEForCausalLM,
    "Dots1ForCausalLM": MoEForCausalLM,
    "MiniMaxM2ForCausalLM": MiniMaxM2ForCausalLM,
    "GlmForCausalLM": GlmForCausalLM,
    "HeliumForCausalLM": HeliumForCausalLM,
    "NemotronForCausalLM": NemotronForCausalLM,
    "OlmoForCausalLM": OlmoForCausalLM,
    "ApertusForCausalLM": ApertusForCausalLM,
    "VaultGemmaForCausalLM": VaultGemmaForCausalLM,
    "NanoChatForCausalLM": NanoChatForCausalLM,
    "OlmoeForCausalLM": OlmoeForCausalLM,
    "GraniteMoeForCausalLM": GraniteMoeForCausalLM,
    "GraniteMoeSharedForCausalLM": GraniteMoeForCausalLM,
    "Ernie4_5_MoeForCausalLM": Ernie4_5_MoeForCausalLM,
    "HunYuanMoEV1ForCausalLM": HunYuanMoEV1ForCausalLM,
    "Llama4ForCausalLM": Llama4ForCausalLM,
    "Qwen3NextForCausalLM": Qwen3NextForCausalLM,
    "Qwen3_5ForCausalLM": Qwen3NextForCausalLM,
    "Qwen3_5MoeForCausalLM": Qwen3NextForCausalLM,
    "GraniteMoeHybridForCausalLM": GraniteMoeHybridForCausalLM,
    "BambaForCausalLM": BambaForCausalLM,
    "NemotronHForCausalLM": NemotronHForCausalLM,
    "FalconH1ForCausalLM": FalconH1ForCausalLM,
    "GPT2LMHeadModel": GPT2LMHeadModel,
    "GPTBigCodeForCausalLM": GPTBigCodeForCausalLM,
    "GPTNeoXForCausalLM": GPTNeoXForCausalLM,
    "GPTJForCausalLM": GPTJForCausalLM,
    "OPTForCausalLM": OPTForCausalLM,
    "FalconForCausalLM": FalconForCausalLM,
    "PhimoeForCausalLM": PhimoeForCausalLM,
    "DbrxForCausalLM": DbrxForCausalLM,
    "MiniCPM3ForCausalLM": MiniCPM3ForCausalLM,
    "AfmoeForCausalLM": AfmoeForCausalLM,
    "Cohere2ForCausalLM": CohereForCausalLM,
    "CwmForCausalLM": CwmForCausalLM,
    "Jais2ForCausalLM": Jais2ForCausalLM,
    "HyperCLOVAXForCausalLM": HyperCLOVAXForCausalLM,
    "DiffLlamaForCausalLM": DiffLlamaForCausalLM,
    "SolarOpenForCausalLM": MoEForCausalLM,
    "ExaoneMoeForCausalLM": ExaoneMoeForCausalLM,
    "FlexOlmoForCausalLM": FlexOlmoForCausalLM,
    "YoutuForCausalLM": DeepseekForCausalLM,
    "AXK1ForCausalLM": AXK1ForCausalLM,
    "Lfm2ForCausalLM": Lfm2ForCausalLM,
    "Lfm2MoeForCausalLM": Lfm2MoeForCausalLM,
    "Gemma4ForCausalLM": Gemma4ForCausalLM,
    "DeepseekV32ForCausalLM": DsaForCausalLM,
    "GlmMoeDsaForCausalLM": DsaForCausalLM,
    "AXK2ForCausalLM": AXK2ForCausalLM,
    "Mistral4ForCausalLM": DeepseekForCausalLM,
    "MiniCPM5MoeForCausalLM": MiniCPM5MoeForCausalLM,
    "Kolibri1ForCausalLM": Kolibri1ForCausalLM,
    "HYV3ForCausalLM": HYV3ForCausalLM,
    "LagunaForCausalLM": LagunaForCausalLM,
    "Step3p5ForCausalLM": Step3ForCausalLM,
    "MellumForCausalLM": MellumForCausalLM,
    "FlintForCausalLM": FlintForCausalLM,
    "Mamba2ForCausalLM": MambaStackForCausalLM,
    "MambaForCausalLM": MambaStackForCausalLM,
    "FalconMambaForCausalLM": MambaStackForCausalLM,
    "OlmoHybridForCausalLM": OlmoHybridForCausalLM,
    "JambaForCausalLM": JambaForCausalLM,
    "Zamba2ForCausalLM": Zamba2ForCausalLM,
    "ZambaForCausalLM": ZambaForCausalLM,
    "RecurrentGemmaForCausalLM": RecurrentGemmaForCausalLM,
    "RwkvForCausalLM": RwkvForCausalLM,
    "xLSTMForCausalLM": xLSTMForCausalLM,
    "GraniteSWAForCausalLM": GraniteSWAForCausalLM,
    "GraniteMoeSWAForCausalLM": GraniteMoeSWAForCausalLM,
    "Lfm3ForCausalLM": Lfm3ForCausalLM,
    "HrmTextForCausalLM": HrmTextForCausalLM,
    "DoryForCausalLM": DoryForCausalLM,
    "GPTNeoForCausalLM": GPTNeoForCausalLM,
    "CodeGenForCausalLM": CodeGenForCausalLM,
    "PersimmonForCausalLM": PersimmonForCausalLM,
    "XGLMForCausalLM": XGLMForCausalLM,
    "BloomForCausalLM": BloomForCausalLM,
    "MptForCausalLM": MptForCausalLM,
    "OpenAIGPTLMHeadModel": OpenAIGPTLMHeadModel,
    "BioGptForCausalLM": BioGptForCausalLM,
    "CTRLLMHeadModel": CTRLLMHeadModel,
    "GPTNeoXJapaneseForCausalLM": GPTNeoXJapaneseForCausalLM,
    "JetMoeForCausalLM": JetMoeForCausalLM,
    "Gemma3nForCausalLM": Gemma3nForCausalLM,
    "Cohere2MoeForCausalLM": Cohere2MoeForCausalLM,
    "BitNetForCausalLM": BitNetForCausalLM,
    "AriaTextForCausalLM": AriaTextForCausalLM,
    "Emu3ForCausalLM": LlamaForCausalLM,
    "CohereCompassForCausalLM": CohereCompassForCausalLM,
    "Apertus1p5TextForCausalLM": Apertus1p5TextForCausalLM,
    "Gemma4UnifiedForCausalLM": Gemma4ForCausalLM,
    "LaraMiniForCausalLM": LaraMiniForCausalLM,
    "MiniMaxForCausalLM": MiniMaxForCausalLM,
    "KimiLinearForCausalLM": KimiLinearForCausalLM,
    "BailingHybridForCausalLM": KimiLinearForCausalLM,
    "Qwen4ExpForCausalLM": Qwen4ExpForCausalLM,
    "ErgoForCausalLM": ErgoForCausalLM,
    "ZayaForCausalLM": ZayaForCausalLM,
    "BeamForCausalLM": BeamForCausalLM,
    "Dots3NoteForCausalLM": Dots3NoteForCausalLM,
    "HYV4ForCausalLM": HYV4ForCausalLM,
    "MiniMaxM3VLForCausalLM": MiniMaxM3ForCausalLM,
    "LongcatFlashForCausalLM": LongcatFlashForCausalLM,
    "MiMoV2FlashForCausalLM": MiMoV2FlashForCausalLM,
    "ChameleonForConditionalGeneration": ChameleonForCausalLM,
    "DeepseekOcr2TextForCausalLM": MoEForCausalLM,
    "MuseGlimmerTextForCausalLM": MuseGlimmerTextForCausalLM,
    "MuseSparkTextForCausalLM": MuseSparkTextForCausalLM,
    "MistralLarge4TextForCausalLM": MistralLarge4ForCausalLM,
    "DogeForCausalLM": DogeForCausalLM,
    "Kolibri1_1ForCausalLM": Kolibri1_1ForCausalLM,
    "InklingForCausalLM": InklingForCausalLM,
    "Inkling2ForCausalLM": Inkling2ForCausalLM,
    "Inkling2LoopForCausalLM": Inkling2LoopForCausalLM,
    "BartForCausalLM": BartDecoderForCausalLM,
    "MBartForCausalLM": BartDecoderForCausalLM,
    "PLBartForCausalLM": BartDecoderForCausalLM,
    "MvpForCausalLM": BartDecoderForCausalLM,
    "BlenderbotForCausalLM": BartDecoderForCausalLM,
    "BlenderbotSmallForCausalLM": BartDecoderForCausalLM,
    "PegasusForCausalLM": BartDecoderForCausalLM,
    "MarianForCausalLM": BartDecoderForCausalLM,
    "TrOCRForCausalLM": BartDecoderForCausalLM,
    "BigBirdPegasusForCausalLM": BigBirdPegasusDecoderForCausalLM,
    "BertLMHeadModel": BertDecoderForCausalLM,
    "RobertaForCausalLM": BertDecoderForCausalLM,
    "XLMRobertaForCausalLM": BertDecoderForCausalLM,
    "CamembertForCausalLM": BertDecoderForCausalLM,
    "Data2VecTextForCausalLM": BertDecoderForCausalLM,
    "ElectraForCausalLM": BertDecoderForCausalLM,
    "ErnieForCausalLM": BertDecoderForCausalLM,
    "RemBertForCausalLM": BertDecoderForCausalLM,
    "MegatronBertForCausalLM": BertDecoderForCausalLM,
    "XLMRobertaXLForCausalLM": BertDecoderForCausalLM,
    "RobertaPreLayerNormForCausalLM": BertDecoderForCausalLM,
    "BertGenerationDecoder": BertDecoderForCausalLM,
    "BigBirdForCausalLM": BertDecoderForCausalLM,
    "RoFormerForCausalLM": RoFormerDecoderForCausalLM,
    "RoCBertForCausalLM": RoCBertDecoderForCausalLM,
    "XmodForCausalLM": XmodDecoderForCausalLM,
    "GitForCausalLM": GitDecoderForCausalLM,
    "XLMWithLMHeadModel": XlmForCausalLM,
    "MllamaForCausalLM": MllamaForCausalLM,
    "ModernBertDecoderForCausalLM": ModernBertDecoderForCausalLM,
}


def get_model_class(architecture: str, language_model=None):
    """The class implementing `architecture`; ValueError when we have none.  language_model: a multimodal
    checkpoint's (ModelConfig.language_model), whose class then loads the checkpoint's text weights."""
    if language_model is not None:
        return language_model_class(get_model_class(language_model))
    try:
        return MODEL_REGISTRY[architecture]
    except KeyError:
        raise ValueError(f"unsupported model architecture {architecture!r}; supported: "
                         f"{', '.join(MODEL_REGISTRY)}, and for text prompts "
                         f"{', '.join(MULTIMODAL_TEXT_ARCHITECTURES)}") from None
