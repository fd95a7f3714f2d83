"""Rotary position embeddings: each position's cos/sin rows, as HF computes them for each rope type.

rope_cos_sin_cache(config, length) -> [length, R] float32 (cos in [:, :R/2], sin in [:, R/2:]), the table
layer_ops.Rotary gathers from; R is config.rope_dim, the head dim or, where the model rotates only the first
dims of each head (partial_rotary_factor), fewer.  Types: default, linear, llama3, YaRN and Phi-3's longrope.
LongRoPE is chosen per position: positions below original_max_position_embeddings rotate by the short factors, later
ones by the long factors, both scaled by the attention factor (Phi-3.5-MoE: short_mscale, then long_mscale).  HF picks
one set for a whole forward pass by its longest position (and re-encodes the prompt when a generation first crosses
the boundary), so a single prefill that crosses it differs from HF there; every position's rotation here is fixed,
which a shared KV cache needs.
query_scale: Llama 4's per-position query factor (Ministral 3's llama_4_scaling_beta), applied after the rotation.
"""

import math

import torch

from radixlm.runtime.models.config import ModelConfig


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """Inverse frequencies [R/2] float32, with linear, llama3 or YaRN scaling applied as in HF."""
    dim = config.rope_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling["rope_type"] == "linear":
        return inv_freq / scaling["factor"]
    if scaling["rope_type"] == "llama3":
        factor, old_len = scaling["factor"], scaling["original_max_position_embeddings"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq  # [D/2]
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    if scaling["rope_type"] == "yarn":
        return _yarn_inv_freq(config, inv_freq)
    raise ValueError(f"unsupported rope scaling {scaling!r}")


def _yarn_inv_freq(config: ModelConfig, inv_freq: torch.Tensor) -> torch.Tensor:
    """YaRN (HF _compute_yarn_parameters): interpolated (/ factor) frequencies below the correction range,
    extrapolated (unchanged) above it, a linear ramp between."""
    s, dim, base = config.rope_scaling, config.rope_dim, config.rope_theta
    orig = s["original_max_position_embeddings"]

    def correction_dim(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(s["beta_fast"]), correction_dim(s["beta_slow"])
    if s["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # [R/2]
    extrapolation = 1 - ramp  # [R/2]
    return inv_freq / s["factor"] * (1 - extrapolation) + inv_freq * extrapolation  # [R/2]


def rope_cos_sin_cache(config: ModelConfig, length: int) -> torch.Tensor:
    """[length, R] float32: cos of position * inv_freq in [:, :R/2], sin in [:, R/2:]."""
    t = torch.arange(length, dtype=torch.int64).float()  # [L]
    scaling = config.rope_scaling
    if scaling is not None and scaling["rope_type"] == "longrope":
        return _longrope_cache(config, t)
    freqs = torch.outer(t, rope_inv_freq(config))  # [L, R/2]
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # [L, R]
    if scaling is not None and scaling["rope_type"] == "yarn":
        cache = cache * scaling["attention_factor"]  # [L, R]
    return cache


def _longrope_cache(config: ModelConfig, t: torch.Tensor) -> torch.Tensor:
    """Phi-3 LongRoPE rows for positions t [L]: short factors below the original context, long ones after."""
    s, dim = config.rope_scaling, config.rope_dim
    base = config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)  # [R/2]
    short = 1.0 / (torch.tensor(s["short_factor"], dtype=torch.float32) * base)  # [R/2]
    long_ = 1.0 / (torch.tensor(s["long_factor"], dtype=torch.float32) * base)  # [R/2]
    inv_freq = torch.where((t >= s["original_max_position_embeddings"])[:, None], long_, short)  # [L, D/2]
    freqs = t[:, None] * inv_freq  # [L, D/2]
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # [L, R]
    if "long_attention_factor" not in s:
        return cache * s["attention_factor"]  # [L, R]
    beyond = (t >= s["original_max_position_embeddings"])[:, None]  # [L, 1]
    return cache * torch.where(beyond, s["long_attention_factor"], s["attention_factor"])  # [L, R]


def query_scale(config: ModelConfig, positions: torch.Tensor, dtype) -> torch.Tensor | None:
    """Each token's query factor 1 + beta * log(1 + floor(position / original_max_position_embeddings)) [T, 1, 1]
    in `dtype` (HF: float32, then the query's dtype), or None where config.query_scale is unset.  positions [T]
    int64; device ops only (no host sync), so a CUDA graph captures it reading its static positions."""
    if config.query_scale is None:
        return None
    beta, original = config.query_scale
    scale = 1 + beta * torch.log(1 + torch.floor(positions / original))  # [T] float32
    return scale.to(dtype)[:, None, None]  # [T, 1, 1]
