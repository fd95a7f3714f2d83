"""MoEConfig: the mixture-of-experts numbers of a Hugging Face config, read once (no torch here).

Routing (moe_router.py runs it), as each family's HF code does it:
  Mixtral, Qwen2/Qwen3-MoE: softmax over all experts' router logits (float32), keep the top k, renormalise them to
    sum to 1 when `norm_topk_prob` (Mixtral always: the same as a softmax over the top-k logits; Qwen as configured).
    A layer is sparse unless it is in `mlp_only_layers` or (layer + 1) % decoder_sparse_step != 0 (Qwen); sparse
    layers of Qwen2-MoE add a shared expert scaled by sigmoid(shared_expert_gate(x)).
  gpt-oss: a router with a bias, top k of its logits then a softmax over those k (the same weights as a softmax over
    all then renormalised), experts with biases and a clamped SwiGLU (swiglu_limit / swiglu_alpha, gpt_oss.py),
    every layer sparse.
  DeepSeek-V3, GLM-4.5 (Glm4Moe) and dots.llm1 (Dots1): a float32 router, sigmoid scores, e_score_correction_bias
    added for the choice only (noaux_tc), the choice limited to the topk_group best of n_group groups (a group
    scored by the sum of its two best), weights renormalised when norm_topk_prob, times routed_scaling_factor.
  DeepSeek-V2: softmax scores, no bias, topk_method "greedy" or "group_limited_greedy" (a group scored by its best),
    never renormalised (HF's DeepseekV2TopkRouter), times routed_scaling_factor.
  MiniMax-M2: a router in the model dtype, sigmoid scores (float32), e_score_correction_bias for the choice only, no
    groups, weights always renormalised, every layer sparse, no shared expert (Mixtral's checkpoint names).
  OLMoE: Qwen's softmax then top k, renormalised when norm_topk_prob (False in the released models), every layer
    sparse, no shared expert.
  ERNIE 4.5 MoE: a float32 router, softmax scores, moe_statics.e_score_correction_bias [1, E] added for the choice
    only, the chosen scores renormalised (HF's clamp at moe_norm_min differs from our 1e-20 only below it); layers
    moe_layer_start_index..moe_layer_end_index that are every moe_layer_interval-th are sparse, with
    moe_num_shared_experts un-gated shared experts of width moe_intermediate_size each, as one MLP.
  Hunyuan MoE (HunYuanMoEV1): a float32 router, Qwen3-MoE's softmax then top k renormalised, every layer sparse with
    experts of width intermediate_size and one un-gated shared MLP as wide (moe_topk, num_experts: one value for
    every layer).
  Granite 3 MoE (GraniteMoe, GraniteMoeShared): Mixtral's softmax over the top-k logits, every layer sparse;
    GraniteMoeShared adds an un-gated shared MLP of width shared_intermediate_size.
  Phi-3.5-MoE (Phimoe): a router in the model dtype and HF's eval-mode sparsemixer (moe_router.py): two experts, each
    weighted by a softmax over the experts within 2 * router_jitter_noise (relative) of it, never renormalised.
  DBRX: softmax scores in the model dtype, top moe_top_k divided by their p-norm (moe_normalize_expert_weights).
  Arcee Trinity (Afmoe): a router in the model dtype, sigmoid scores (float32), expert_bias for the choice only, the
    chosen scores renormalised, times route_scale; layers num_dense_layers.. sparse, with num_shared_experts
    un-gated shared experts of width moe_intermediate_size each, as one MLP.
  Solar Open, EXAONE MoE (K-EXAONE), A.X K1 and MiniCPM 5 MoE route as DeepSeek-V3 (EXAONE MoE names its counts
    num_experts and num_shared_experts); Solar Open has no dense layers, EXAONE MoE, A.X K1 and MiniCPM 5 MoE take
    theirs from mlp_layer_types.
  DeepSeek-V3.2, GLM-5 and A.X K2 route as DeepSeek-V3 too, but A.X K2 without groups where n_group is None, and
    with them scores the experts outside the best groups 0, not -inf (a negative biased choice can lose to them).
  FlexOlmo routes as OLMoE.
  Kolibri 1: a float32 router, e_score_correction_bias added to the logits (not the scores) for the choice, the
    chosen logits' sigmoids as weights, renormalised when norm_topk_prob; every layer sparse, with one un-gated shared
    MLP of width shared_expert_intermediate_size.
  Laguna: a router in the model dtype, its logits soft-capped (moe_router_logit_softcapping), sigmoid scores,
    e_score_correction_bias for the choice only, weights always renormalised, times moe_routed_scaling_factor; the
    sparse layers of mlp_layer_types add one un-gated shared MLP of width shared_expert_intermediate_size.
  Mellum: Qwen3-MoE's routing in the sparse layers of mlp_layer_types.
  Flint: a float32 router, sigmoid scores without a bias, top k renormalised when norm_topk_prob; Qwen2-MoE's
    sparse layers (mlp_only_layers, decoder_sparse_step), each with an un-gated shared MLP.
  Hy3 (HYV3): a float32 router, sigmoid scores, e_score_correction_bias for the choice only, no groups, weights
    always renormalised, times router_scaling_factor; the sparse layers of mlp_layer_types hold num_shared_experts
    un-gated shared experts of width moe_intermediate_size each, as one MLP.
  Ergo, Beam, Dots 3 Note and Hy V4: dsv4_moe_config.py.
  Mistral 4: DeepSeek-V3's groups (each scored by its two best) over softmax scores, no bias, a router in the model
    dtype, renormalised when norm_topk_prob, times routed_scaling_factor.
  DeepSeek-V2/V3, GLM-4.5, dots.llm1, Mistral 4: layers first_k_dense_replace.. are sparse (and only every moe_layer_freq-th of them where the config
  has it), each with n_shared_experts un-gated shared experts, one MLP of width moe_intermediate_size *
  n_shared_experts added to the routed experts' output.
"""

from dataclasses import dataclass
from math import inf
from typing import Optional

from .dsv4_moe_config import DSV4_MOE_READERS
from .step3_config import STEP3_TEXT, step3_moe

NOAUX_TC_ARCHITECTURES = ("DeepseekV3ForCausalLM", "Glm4MoeForCausalLM", "Dots1ForCausalLM",   # sigmoid + bias
                          "Glm4MoeLiteForCausalLM", "SolarOpenForCausalLM", "ExaoneMoeForCausalLM", "AXK1ForCausalLM",
                          "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM", "AXK2ForCausalLM", "MiniCPM5MoeForCausalLM",
                          "Dots3NoteForCausalLM", "HYV4ForCausalLM", "MiMoV2FlashForCausalLM")
DEEPSEEK_STYLE_ARCHITECTURES = NOAUX_TC_ARCHITECTURES + ("DeepseekV2ForCausalLM", "Mistral4ForCausalLM",
                                                         "DeepseekOcr2TextForCausalLM",   # dense
                                                         "MistralLarge4TextForCausalLM")
# first, shared experts
GRANITE_MOE_ARCHITECTURES = ("GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM", "GraniteMoeSWAForCausalLM")
# Qwen2-MoE's experts: a shared expert scaled by sigmoid(shared_expert_gate(x))
QWEN2_MOE_STYLE = ("Qwen2MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM")
MOE_ARCHITECTURES = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                     "GptOssForCausalLM") + DEEPSEEK_STYLE_ARCHITECTURES + ("MiniMaxM2ForCausalLM",
                                                                           "OlmoeForCausalLM") + (
    GRANITE_MOE_ARCHITECTURES) + ("Ernie4_5_MoeForCausalLM", "HunYuanMoEV1ForCausalLM", "PhimoeForCausalLM",
                                  "DbrxForCausalLM", "AfmoeForCausalLM", "FlexOlmoForCausalLM") + QWEN2_MOE_STYLE[1:]
MOE_ARCHITECTURES += ("Kolibri1ForCausalLM", "Kolibri1_1ForCausalLM", "HYV3ForCausalLM", "LagunaForCausalLM", "MellumForCausalLM",
                      "FlintForCausalLM")
MOE_ARCHITECTURES += ("JetMoeForCausalLM",)   # its experts and attention experts: jetmoe.py
MOE_ARCHITECTURES += ("Cohere2MoeForCausalLM", "AriaTextForCausalLM")   # _cohere2_moe, _aria_text
MOE_ARCHITECTURES += tuple(DSV4_MOE_READERS)
MOE_ARCHITECTURES += (STEP3_TEXT,)   # step3_config.step3_moe


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    intermediate_size: int            # of one expert
    norm_topk_prob: bool
    sparse_layers: tuple              # indices of the layers with experts; the others have a dense MLP
    shared_expert_intermediate_size: int = 0   # Qwen2-MoE, DeepSeek style; 0: no shared expert
    shared_expert_gate: bool = True   # Qwen2-MoE: scaled by sigmoid(shared_expert_gate(x)); DeepSeek style: not
    # expert parallelism (distributed/sharding.py): this rank holds experts expert_offset..+num_local_experts-1
    expert_offset: int = 0
    num_local_experts: Optional[int] = None    # None: all of them
    swiglu_limit: Optional[float] = None       # gpt-oss: the clamp of its SwiGLU (None: plain silu(gate) * up)
    swiglu_alpha: float = 1.702                # gpt-oss: gate * sigmoid(alpha * gate)
    scoring: str = "softmax"                   # "softmax" over all experts or "sigmoid" of each logit
    correction_bias: bool = False              # e_score_correction_bias [E] added to the scores for the choice
    n_group: int = 1                           # expert groups; only the topk_group best groups compete
    topk_group: int = 1
    outside_groups_score: float = float("-inf")   # the choice score of experts outside those groups (A.X K2: 0)
    group_score: str = "top2_sum"              # a group's score: its two best scores summed (V3) or "max" (V2)
    routed_scaling_factor: float = 1.0         # multiplies the routed experts' weights
    router_float32: bool = False               # router weight and logits in float32 whatever the model dtype
    jitter_eps: float = 0.0                    # scoring "sparsemixer" (Phi-3.5-MoE): its router_jitter_noise
    weight_norm_p: Optional[float] = None      # DBRX: the top-k weights divided by their p-norm
    topk_norm_eps: float = 1e-20               # renormalised weights: w / (sum + it) (LFM2-MoE: 1e-6)
    bias_on_logits: bool = False               # Kolibri 1: the correction bias added to the logits for the choice
    router_softcap: Optional[float] = None     # Laguna: logits -> cap * tanh(logits / cap) before scoring

    @property
    def local_experts(self) -> int:
        return self.num_experts if self.num_local_experts is None else self.num_local_experts

    @classmethod
    def from_hf(cls, hf_config, arch: str) -> "MoEConfig":
        """ValueError for a top k outside 1..num_experts, or a routing rule we do not run (naming the field)."""
        if arch == STEP3_TEXT:
            return _check(step3_moe(cls, hf_config), arch)
        if arch in DSV4_MOE_READERS:
            return _check(DSV4_MOE_READERS[arch](cls, hf_config, _deepseek_style), arch)
        if arch in DEEPSEEK_STYLE_ARCHITECTURES:
            return _check(_deepseek_style(cls, hf_config, arch), arch)
        if arch == "Ernie4_5_MoeForCausalLM":
            return _check(_ernie4_5_moe(cls, hf_config), arch)
        if arch == "HunYuanMoEV1ForCausalLM":
            return _check(_hunyuan_moe(cls, hf_config, arch), arch)
        if arch == "PhimoeForCausalLM":
            return _check(_phimoe(cls, hf_config, arch), arch)
        if arch == "DbrxForCausalLM":
            return _check(_dbrx(cls, hf_config), arch)
        if arch == "AfmoeForCausalLM":
            return _check(_afmoe(cls, hf_config), arch)
        if arch in ("Kolibri1ForCausalLM", "Kolibri1_1ForCausalLM"):
            return _check(_kolibri1(cls, hf_config), arch)
        if arch == "HYV3ForCausalLM":
            return _check(_hy_v3(cls, hf_config), arch)
        if arch == "FlintForCausalLM":
            return _check(_flint(cls, hf_config), arch)
        if arch in ("LagunaForCausalLM", "MellumForCausalLM"):
            return _check(_laguna(cls, hf_config, arch), arch)
        if arch in ("Cohere2MoeForCausalLM", "AriaTextForCausalLM"):
            return _check(_cohere2_moe(cls, hf_config) if arch[0] == "C" else _aria_text(cls, hf_config), arch)
        num_layers = int(hf_config.num_hidden_layers)
        limit = None
        rule = {}
        if arch in ("MixtralForCausalLM", "GptOssForCausalLM", "MiniMaxM2ForCausalLM", "JetMoeForCausalLM") + (
                GRANITE_MOE_ARCHITECTURES):
            experts, inter, norm = int(hf_config.num_local_experts), int(hf_config.intermediate_size), True
            sparse = tuple(range(num_layers))
            if arch == "GptOssForCausalLM":
                limit = float(hf_config.swiglu_limit)
            if arch == "MiniMaxM2ForCausalLM":
                _expect(hf_config, arch, "scoring_func", ("sigmoid",))
                _expect(hf_config, arch, "use_routing_bias", (True,))
                rule = dict(scoring="sigmoid", correction_bias=True)
        elif arch in ("OlmoeForCausalLM", "FlexOlmoForCausalLM"):
            experts, inter = int(hf_config.num_experts), int(hf_config.intermediate_size)
            norm, sparse = bool(hf_config.norm_topk_prob), tuple(range(num_layers))
        else:
            experts = int(getattr(hf_config, "num_experts", None) or hf_config.num_local_experts)
            inter = int(hf_config.moe_intermediate_size)
            norm = arch == "Qwen3_5MoeForCausalLM" or bool(hf_config.norm_topk_prob)   # Qwen3.5's always renormalises
            dense_only = set(getattr(hf_config, "mlp_only_layers", None) or ())
            step = int(getattr(hf_config, "decoder_sparse_step", 1) or 1)
            sparse = tuple(i for i in range(num_layers) if i not in dense_only and (i + 1) % step == 0)
        shared = int(getattr(hf_config, "shared_expert_intermediate_size", 0) or 0)
        if arch in GRANITE_MOE_ARCHITECTURES[1:]:   # the shared MLP where shared_intermediate_size
            shared = int(getattr(hf_config, "shared_intermediate_size", 0) or 0)
            rule = dict(shared_expert_gate=False)
        elif arch not in QWEN2_MOE_STYLE:
            shared = 0
        return _check(cls(num_experts=experts, top_k=int(hf_config.num_experts_per_tok), intermediate_size=inter,
                          norm_topk_prob=norm, sparse_layers=sparse, shared_expert_intermediate_size=shared,
                          swiglu_limit=limit, swiglu_alpha=float(getattr(hf_config, "swiglu_alpha", 1.702) or 1.702),
                          **rule),
                      arch)


def _deepseek_style(cls, hf_config, arch: str) -> MoEConfig:
    """DeepSeek-V2/V3, GLM-4.5 and dots.llm1 (the module docstring's rules)."""
    experts = int(getattr(hf_config, "n_routed_experts", None) or hf_config.num_experts)   # EXAONE MoE: num_experts
    inter = int(hf_config.moe_intermediate_size)
    first_dense = int(getattr(hf_config, "first_k_dense_replace", 0) or 0)
    freq = int(getattr(hf_config, "moe_layer_freq", 1) or 1)
    sparse = tuple(i for i in range(int(hf_config.num_hidden_layers)) if i >= first_dense and i % freq == 0)
    types = getattr(hf_config, "mlp_layer_types", None)     # GLM-4.7-Flash: "dense" or "sparse" per layer
    if types:
        sparse = tuple(i for i, kind in enumerate(types) if kind == "sparse")
    n_group, topk_group = int(getattr(hf_config, "n_group", 1) or 1), int(getattr(hf_config, "topk_group", 1) or 1)
    norm = bool(getattr(hf_config, "norm_topk_prob", False))
    if arch == "Mistral4ForCausalLM":
        rule = dict(scoring="softmax", group_score="top2_sum")
    elif arch == "MistralLarge4TextForCausalLM":   # float32, always renormalised, 0 outside the chosen groups
        norm, rule = True, dict(scoring="softmax", group_score="top2_sum", outside_groups_score=0.0)
    elif arch in NOAUX_TC_ARCHITECTURES:
        _expect(hf_config, arch, "scoring_func", ("sigmoid",))
        _expect(hf_config, arch, "topk_method", ("noaux_tc",))
        rule = dict(scoring="sigmoid", correction_bias=True, group_score="top2_sum")
    else:
        method = _expect(hf_config, arch, "topk_method", ("greedy", "group_limited_greedy")) or "greedy"
        _expect(hf_config, arch, "scoring_func", ("softmax",))
        if norm:
            raise ValueError(f"{arch}: norm_topk_prob=True is not supported (HF's DeepseekV2 router never "
                             "renormalises; DeepSeek's own code would)")
        if method == "greedy":
            n_group = topk_group = 1
        rule = dict(scoring="softmax", group_score="max")
    return cls(num_experts=experts, top_k=int(hf_config.num_experts_per_tok), intermediate_size=inter,
               norm_topk_prob=norm, sparse_layers=sparse,
               shared_expert_intermediate_size=inter * _shared_experts(hf_config), shared_expert_gate=False,
               n_group=n_group, topk_group=topk_group,
               outside_groups_score=rule.pop("outside_groups_score", 0.0 if arch == "AXK2ForCausalLM" else -inf),
               routed_scaling_factor=float(getattr(hf_config, "routed_scaling_factor", 1.0) or 1.0),
               router_float32=arch != "Mistral4ForCausalLM", **rule)


def _shared_experts(hf_config) -> int:
    """The shared experts' count: n_shared_experts (DeepSeek's name) or num_shared_experts (EXAONE MoE's)."""
    for field in ("n_shared_experts", "num_shared_experts"):
        value = getattr(hf_config, field, None)
        if value is not None:
            return int(value)
    return 0


def _ernie4_5_moe(cls, hf_config) -> MoEConfig:
    """ERNIE 4.5 MoE (the module docstring's rule)."""
    n, inter = int(hf_config.num_hidden_layers), int(hf_config.moe_intermediate_size)
    start, step = int(hf_config.moe_layer_start_index), int(hf_config.moe_layer_interval)
    end = int(hf_config.moe_layer_end_index)
    end = n - 1 if end == -1 else end
    return cls(num_experts=int(hf_config.moe_num_experts), top_k=int(hf_config.moe_k), intermediate_size=inter,
               norm_topk_prob=True, sparse_layers=tuple(i for i in range(n) if (i + 1) % step == 0 and start <= i <= end),
               shared_expert_intermediate_size=inter * int(getattr(hf_config, "moe_num_shared_experts", 0) or 0),
               shared_expert_gate=False, correction_bias=True, router_float32=True)


def _hunyuan_moe(cls, hf_config, arch: str) -> MoEConfig:
    """Hunyuan MoE as HF's HunYuanMoEV1 runs it: one expert count, top k and width for every layer."""
    inter = int(hf_config.intermediate_size)
    experts, top_k = _same_per_layer(hf_config, arch, "num_experts"), _same_per_layer(hf_config, arch, "moe_topk")
    if _same_per_layer(hf_config, arch, "moe_intermediate_size") not in (None, inter):
        raise ValueError(f"{arch}: moe_intermediate_size other than intermediate_size ({inter}) is not supported "
                         "(HF's HunYuanMoEV1 sizes every expert by intermediate_size)")
    if _same_per_layer(hf_config, arch, "num_shared_expert") not in (None, 1):
        raise ValueError(f"{arch}: num_shared_expert other than 1 is not supported (HF's HunYuanMoEV1 has one shared MLP)")
    return cls(num_experts=int(experts), top_k=int(top_k), intermediate_size=inter, norm_topk_prob=True,
               sparse_layers=tuple(range(int(hf_config.num_hidden_layers))), shared_expert_intermediate_size=inter,
               shared_expert_gate=False, router_float32=True)


def _phimoe(cls, hf_config, arch: str) -> MoEConfig:
    """Phi-3.5-MoE: sparsemixer picks two experts whatever num_experts_per_tok says (HF ignores it)."""
    if int(hf_config.num_experts_per_tok) != 2:
        raise ValueError(f"{arch}: num_experts_per_tok {hf_config.num_experts_per_tok} is not supported (HF's "
                         "sparsemixer always picks 2 experts)")
    return cls(num_experts=int(hf_config.num_local_experts), top_k=2, intermediate_size=int(hf_config.intermediate_size),
               norm_topk_prob=False, sparse_layers=tuple(range(int(hf_config.num_hidden_layers))),
               scoring="sparsemixer", jitter_eps=float(hf_config.router_jitter_noise))


def _dbrx(cls, hf_config) -> MoEConfig:
    """DBRX: every layer sparse; moe_normalize_expert_weights None leaves the top-k softmax scores as they are."""
    ffn = hf_config.ffn_config
    p = getattr(ffn, "moe_normalize_expert_weights", None)
    return cls(num_experts=int(ffn.moe_num_experts), top_k=int(ffn.moe_top_k), intermediate_size=int(ffn.ffn_hidden_size),
               norm_topk_prob=False, sparse_layers=tuple(range(int(hf_config.num_hidden_layers))),
               weight_norm_p=None if p is None else float(p))


def _afmoe(cls, hf_config) -> MoEConfig:
    """Arcee Trinity (the module docstring's rule).  Its remote code's routing options, which HF's AfmoeConfig does
    not read, are refused unless they name that rule."""
    arch = "AfmoeForCausalLM"
    _expect(hf_config, arch, "score_func", ("sigmoid",))
    _expect(hf_config, arch, "route_norm", (True,))
    _expect(hf_config, arch, "n_group", (1,))
    inter, dense = int(hf_config.moe_intermediate_size), int(hf_config.num_dense_layers or 0)
    return cls(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok), intermediate_size=inter,
               norm_topk_prob=True, sparse_layers=tuple(range(dense, int(hf_config.num_hidden_layers))),
               shared_expert_intermediate_size=inter * int(hf_config.num_shared_experts or 0), shared_expert_gate=False,
               scoring="sigmoid", correction_bias=True, routed_scaling_factor=float(hf_config.route_scale or 1.0))


def _kolibri1(cls, hf_config) -> MoEConfig:
    """Kolibri 1 (the module docstring's rule); Kolibri 1.1's mlp_only_layers dense."""
    dense = set(getattr(hf_config, "mlp_only_layers", None) or ())
    return cls(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok),
               intermediate_size=int(hf_config.moe_intermediate_size), norm_topk_prob=bool(hf_config.norm_topk_prob),
               sparse_layers=tuple(i for i in range(int(hf_config.num_hidden_layers)) if i not in dense),
               shared_expert_intermediate_size=int(hf_config.shared_expert_intermediate_size or 0),
               shared_expert_gate=False, scoring="sigmoid", correction_bias=True, bias_on_logits=True,
               router_float32=True)


def _hy_v3(cls, hf_config) -> MoEConfig:
    """Hy3 (the module docstring's rule)."""
    inter = int(hf_config.moe_intermediate_size)
    return cls(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok), intermediate_size=inter,
               norm_topk_prob=True, sparse_layers=tuple(i for i, t in enumerate(hf_config.mlp_layer_types) if t == "sparse"),
               shared_expert_intermediate_size=inter * int(hf_config.num_shared_experts or 0), shared_expert_gate=False,
               scoring="sigmoid", correction_bias=True, router_float32=True,
               routed_scaling_factor=float(hf_config.router_scaling_factor))


def _laguna(cls, hf_config, arch: str) -> MoEConfig:
    """Laguna and Mellum (the module docstring's rules)."""
    sparse = tuple(i for i, t in enumerate(hf_config.mlp_layer_types) if t == "sparse")
    common = dict(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok),
                  intermediate_size=int(hf_config.moe_intermediate_size), sparse_layers=sparse)
    if arch == "MellumForCausalLM":
        return cls(norm_topk_prob=bool(hf_config.norm_topk_prob), **common)
    return cls(norm_topk_prob=True, shared_expert_intermediate_size=int(hf_config.shared_expert_intermediate_size or 0),
               shared_expert_gate=False, scoring="sigmoid", correction_bias=True,
               routed_scaling_factor=float(hf_config.moe_routed_scaling_factor or 1.0),
               router_softcap=float(hf_config.moe_router_logit_softcapping or 0.0) or None, **common)


def _flint(cls, hf_config) -> MoEConfig:
    """Flint (the module docstring's rule)."""
    dense_only, step = set(hf_config.mlp_only_layers or ()), int(getattr(hf_config, "decoder_sparse_step", 1) or 1)
    return cls(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok),
               intermediate_size=int(hf_config.moe_intermediate_size), norm_topk_prob=bool(hf_config.norm_topk_prob),
               sparse_layers=tuple(i for i in range(int(hf_config.num_hidden_layers))
                                   if i not in dense_only and (i + 1) % step == 0),
               shared_expert_intermediate_size=int(hf_config.shared_expert_intermediate_size or 0),
               shared_expert_gate=False, scoring="sigmoid", router_float32=True)


def _cohere2_moe(cls, hf_config) -> MoEConfig:
    """Cohere 2 MoE: a router in the model dtype; "softmax" (Mixtral's rule) or "sigmoid" scores of the top k,
    renormalised where norm_topk_prob; the sparse layers of mlp_layer_types, each with num_shared_experts un-gated
    shared experts of width intermediate_size as one MLP (newtext_config.py: summed or averaged)."""
    arch, inter = "Cohere2MoeForCausalLM", int(hf_config.intermediate_size)
    scoring = _expect(hf_config, arch, "expert_selection_fn", ("softmax", "sigmoid")) or "softmax"
    kinds = hf_config.mlp_layer_types or ["sparse"] * int(hf_config.num_hidden_layers)
    return cls(num_experts=int(hf_config.num_experts), top_k=int(hf_config.num_experts_per_tok), intermediate_size=inter,
               norm_topk_prob=scoring == "softmax" or bool(hf_config.norm_topk_prob),
               sparse_layers=tuple(i for i, kind in enumerate(kinds) if kind == "sparse"), scoring=scoring,
               shared_expert_intermediate_size=inter * int(hf_config.num_shared_experts or 0), shared_expert_gate=False)


def _aria_text(cls, hf_config) -> MoEConfig:
    """Aria: Mixtral's rule on every layer, with moe_num_shared_experts un-gated shared experts as one MLP."""
    inter = int(hf_config.intermediate_size)
    return cls(num_experts=int(hf_config.moe_num_experts), top_k=int(hf_config.moe_topk), intermediate_size=inter,
               norm_topk_prob=True, sparse_layers=tuple(range(int(hf_config.num_hidden_layers))),
               shared_expert_intermediate_size=inter * int(hf_config.moe_num_shared_experts or 0),
               shared_expert_gate=False)


def _same_per_layer(hf_config, arch: str, field: str):
    """The config's `field` (None when absent), an int or a list of one int per layer; ValueError when they differ."""
    value = getattr(hf_config, field, None)
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise ValueError(f"{arch}: {field} differing by layer ({value!r}) is not supported")
        value = value[0]
    return value


def _expect(hf_config, arch: str, field: str, allowed: tuple):
    """The config's `field` (None when absent); ValueError naming it when set to anything outside `allowed`."""
    value = getattr(hf_config, field, None)
    if value is not None and value not in allowed:
        raise ValueError(f"{arch}: {field} {value!r} is not supported; supported: {', '.join(map(str, allowed))}")
    return value


def _check(moe: MoEConfig, arch: str) -> MoEConfig:
    e, k = moe.num_experts, moe.top_k
    if not 1 <= k <= e:
        raise ValueError(f"{arch}: num_experts_per_tok {k} must be in 1..{e} (the experts)")
    if moe.n_group > 1:
        per_group = e // moe.n_group
        if e % moe.n_group or per_group < 2:
            raise ValueError(f"{arch}: n_group {moe.n_group} must divide the {e} experts into groups of 2 or more")
        if not 1 <= moe.topk_group <= moe.n_group or k > moe.topk_group * per_group:
            raise ValueError(f"{arch}: topk_group {moe.topk_group} must be in 1..n_group ({moe.n_group}) and its "
                             f"groups hold at least num_experts_per_tok ({k}) experts")
    return moe
