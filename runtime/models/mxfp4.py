"""MXFP4 (OCP microscaling FP4), as gpt-oss checkpoints store their expert weights: dequantized at load.

A weight [..., R, C] is stored as `*_blocks` [..., R, C/32, 16] uint8, two FP4 (e2m1) values a byte (the low nibble
first), and `*_scales` [..., R, C/32] uint8, one power-of-two exponent per block of 32 values, biased by 127:
value = FP4[nibble] * 2^(scale - 127).  (transformers.integrations.mxfp4 dequantizes the same way, then
transposes to its own [..., C, R] layout; we keep rows first.)
"""

import torch

FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """blocks [..., G, B] uint8, scales [..., G] uint8 -> [..., G * 2B] in dtype.  ValueError on mismatched shapes."""
    if blocks.shape[:-1] != scales.shape:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} do not match scales {tuple(scales.shape)}")
    blocks = blocks.to(torch.uint8)
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=blocks.device)         # [16]
    lo = lut[(blocks & 0x0F).long()]                                                  # [..., G, B]
    hi = lut[(blocks >> 4).long()]                                                    # [..., G, B]
    values = torch.stack((lo, hi), dim=-1).flatten(-2)                                # [..., G, 2B] low nibble first
    exponent = scales.to(torch.int32) - 127                                           # [..., G]
    out = torch.ldexp(values, exponent.unsqueeze(-1).float())                         # [..., G, 2B]
    return out.flatten(-2).to(dtype)                                                  # [..., G * 2B]
