"""KV pool (per-layer K and V buffers indexed by slot) and the req_to_token block table."""

import torch

KV_CACHE_DTYPES = ("auto", "fp8_e4m3")


def resolve_kv_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    """--kv-cache-dtype -> the pool's dtype: auto is the model's; fp8_e4m3 is torch.float8_e4m3fn."""
    if kv_cache_dtype == "auto":
        return model_dtype
    if kv_cache_dtype == "fp8_e4m3":
        return torch.float8_e4m3fn
    raise ValueError(f"kv cache dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not {kv_cache_dtype!r}")


class KVPool:
    """K and V buffers for every layer: [num_slots, num_kv_heads, head_dim] each.  v_is_k: each layer's V buffer is
    its K buffer (multi-head latent attention caches one vector per token, read as both: models/mla.py).

    Slot 0 .. num_slots-1 are handed out by radix_cache.allocator; this class only stores tensors.
    float8_e4m3fn buffers hold K / k_scales[layer] and V / v_scales[layer] (one scale per layer for K and one
    for V, per tensor; 1.0 unless set: e4m3 reaches +-448, and values past it are clamped when stored).
    """

    def __init__(self, num_layers, num_slots, num_kv_heads, head_dim, dtype=torch.float32, device="cpu",
                 v_is_k=False):
        self.num_layers = num_layers
        self.v_is_k = v_is_k
        self.k_scales = [1.0] * num_layers
        self.v_scales = [1.0] * num_layers
        self.num_slots = num_slots
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.k_buffers, self.v_buffers = [], []
        self.resize(num_slots)

    def resize(self, num_slots: int) -> None:
        """New, zeroed buffers of num_slots slots (the old ones are dropped first, then their memory
        is reused): for sizing the pool after a warm-up forward, before any request holds KV."""
        self.k_buffers.clear()
        self.v_buffers.clear()
        self.num_slots = num_slots
        shape = (num_slots, self.num_kv_heads, self.head_dim)
        for bufs in (self.k_buffers,) if self.v_is_k else (self.k_buffers, self.v_buffers):
            bufs.extend(torch.zeros(shape, dtype=self.dtype, device=self.device)  # [S, Hkv, D]
                        for _ in range(self.num_layers))
        if self.v_is_k:
            self.v_buffers.extend(self.k_buffers)

    @staticmethod
    def bytes_per_token(num_layers, num_kv_heads, head_dim, dtype, v_is_k=False) -> int:
        return (1 if v_is_k else 2) * num_layers * num_kv_heads * head_dim * dtype.itemsize


class ReqToTokenPool:
    """req_to_token[row, position] -> KV slot, one row per running request."""

    def __init__(self, num_rows, max_context, device="cpu"):
        self.table = torch.zeros((num_rows, max_context), dtype=torch.int32, device=device)  # [R, C]
        self.device = device
        self.free_rows = list(range(num_rows - 1, -1, -1))

    def alloc(self):
        return self.free_rows.pop() if self.free_rows else None

    def free(self, row):
        self.free_rows.append(row)

    def write(self, row, start, slots):
        """table[row, start:start+len(slots)] = slots."""
        if slots:
            self.table[row, start:start + len(slots)] = torch.tensor(slots, dtype=torch.int32, device=self.device)
