"""Requantize a GGUF's block-quantized tensors to Q8_0, Q4_0 or Q4_1 with the gguf package (its own quantizers),
copying every metadata field and the float tensors as they are.  For machines where llama.cpp's llama-quantize
(bench/build_llama_server.sh) is not built yet; K-quants (Q4_K_M) need llama-quantize (gguf has no Q4_K
quantizer).  Rows of a width the target's blocks do not divide keep their format.

    .venv/bin/python bench/requantize_gguf.py IN.gguf OUT.gguf Q8_0
"""

import argparse

import numpy as np


def requantize(src: str, dst: str, target: str) -> dict:
    import gguf
    from gguf import GGMLQuantizationType, quants

    kind = GGMLQuantizationType[target]
    reader = gguf.GGUFReader(src)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), val_type, sub_type=sub_type)
    counts: dict = {}
    tensors = []
    for t in reader.tensors:
        data, fmt = t.data, t.tensor_type
        width = int(t.shape[0])
        if fmt not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16) and width % 32 == 0:
            dense = quants.dequantize(np.asarray(data), fmt)                 # [N, K] float32
            data, fmt = quants.quantize(dense, kind), kind                   # [N, row_bytes] uint8
        counts[fmt.name] = counts.get(fmt.name, 0) + 1
        tensors.append((t.name, np.ascontiguousarray(data), fmt))
    for name, data, fmt in tensors:
        shape = quants.quant_shape_from_byte_shape(data.shape, fmt) if data.dtype == np.uint8 else data.shape
        writer.add_tensor(name, data, raw_shape=data.shape if data.dtype == np.uint8 else shape, raw_dtype=fmt)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("target", choices=("Q8_0", "Q4_0", "Q4_1"))
    args = ap.parse_args()
    print(requantize(args.src, args.dst, args.target))


if __name__ == "__main__":
    main()
