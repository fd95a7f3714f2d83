"""The raw bytes of a token, for OpenAI logprob `bytes`: a token that ends inside a UTF-8 character
decodes to U+FFFD as text, but its bytes are the bytes it stands for.

Byte-level BPE vocabularies (GPT-2, Llama 3, SmolLM2, Qwen) spell each byte as one printable character
(GPT-2's bytes_to_unicode table); SentencePiece vocabularies spell raw bytes as `<0xAB>` and a space as
U+2581.  Anything else falls back to the UTF-8 of the decoded text.
"""

import functools
import re

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=1)
def _byte_level_decoder() -> dict:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_byte_level: dict = {}


def _is_byte_level(tokenizer) -> bool:
    """Whether the vocabulary spells bytes GPT-2's way: a space is U+0120 inside its tokens."""
    key = id(tokenizer)
    if key not in _byte_level:
        pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode(" a a", add_special_tokens=False))
        _byte_level[key] = any("\u0120" in p for p in pieces if isinstance(p, str))
    return _byte_level[key]


def token_bytes(tokenizer, token_id: int, text: str) -> list:
    """The bytes token_id stands for, as a list of ints."""
    piece = tokenizer.convert_ids_to_tokens(int(token_id)) if tokenizer is not None and token_id is not None \
        else None
    if isinstance(piece, str) and piece:
        match = _BYTE_PIECE.fullmatch(piece)
        if match:
            return [int(match.group(1), 16)]
        decoder = _byte_level_decoder()
        if _is_byte_level(tokenizer) and all(ch in decoder for ch in piece):
            return [decoder[ch] for ch in piece]
        if "\u2581" in piece:
            return list(piece.replace("\u2581", " ").encode("utf-8"))
    return list((text or "").encode("utf-8"))
