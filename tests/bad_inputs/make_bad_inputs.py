#!/usr/bin/env python3
"""Writes the small bad input files in this folder (run from anywhere; they are committed).

Each file is one row of README's "Bad input" table or one case of tests/test_bad_input.cpp.
Files bigger than a few kilobytes (a 200,000-deep JSON array, a sparse checkpoint whose header
asks for a 2 TiB KV cache) are built by the test itself instead.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, data):
    path = os.path.join(HERE, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq_len, nan_final=False):
    """A legacy llama2.c checkpoint: small finite weights (0.01), norms 1, rms_final NaN if asked."""
    head_dim = dim // heads
    kv_dim = kv_heads * head_dim
    out = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq_len)
    floats = []
    floats += [0.01] * (vocab * dim)                       # token_embedding
    floats += [1.0] * (layers * dim)                       # rms_att
    floats += [0.01] * (layers * dim * dim)                # wq
    floats += [0.01] * (layers * kv_dim * dim) * 2         # wk, wv
    floats += [0.01] * (layers * dim * dim)                # wo
    floats += [1.0] * (layers * dim)                       # rms_ffn
    floats += [0.01] * (layers * hidden * dim) * 3         # w1, w2, w3
    floats += [float("nan") if nan_final else 1.0] * dim   # rms_final
    floats += [0.0] * (seq_len * head_dim)                 # legacy RoPE tables
    return out + struct.pack("<%df" % len(floats), *floats)


def llama2c_tokenizer(pieces):
    out = struct.pack("<i", max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        b = p.encode()
        out += struct.pack("<fi", -float(i), len(b)) + b
    return out


def hf_byte_level(vocab, added=(), merges=(), pre=None):
    return json.dumps({
        "model": {"type": "BPE", "vocab": vocab, "merges": list(merges)},
        "added_tokens": list(added),
        "pre_tokenizer": pre or {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    })


def byte_vocab():
    """GPT-2's printable form of the 256 bytes, ids 0..255 (byte_level.hpp)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    printable = dict(zip(bs, (chr(c) for c in cs)))
    return {printable[b]: b for b in range(256)}


# Checkpoints ------------------------------------------------------------------------------------
write("not_a_model.bin", "This is a text file, not a llama2.c checkpoint.\n")
with open(os.path.join(HERE, "..", "..", "models", "stories260K.bin"), "rb") as f:
    write("truncated_model.bin", f.read(4096))
write("nan_weights.bin", checkpoint(8, 8, 1, 2, 2, 512, 64, nan_final=True))
write("short_context.bin", checkpoint(8, 8, 1, 2, 2, 512, 8))
# A valid header whose KV cache is 2 x 1024 layers x 4,194,304 positions x 64 x 4 bytes = 2 TiB;
# `truncate -s` makes the weights (zeros, sparse: no disk used) so the file size matches.
write("huge_kv_header.bin", struct.pack("<7i", 64, 1, 1024, 32, 32, 512, 4194304))

# llama2.c tokenizer.bin -------------------------------------------------------------------------
with open(os.path.join(HERE, "..", "..", "models", "tok512.bin"), "rb") as f:
    write("truncated_tok512.bin", f.read(1000))
# A byte piece written with a sign: sscanf("<0x%2X") read it as byte -2 and indexed a table.
write("byte_piece_sign.tokenizer.bin", llama2c_tokenizer(["<unk>", "<s>", "</s>", "<0x-2>", " ", "a"]))

# tokenizer.json (one folder each: the loader reads tokenizer_config.json beside the file) -------
v = byte_vocab()
write("huge_id/tokenizer.json", hf_byte_level({**v, "hello": 16777215}))
write("float_id/tokenizer.json", hf_byte_level({**v, "hello": 1e20}))
write("added_id_overflow/tokenizer.json",
      hf_byte_level(v, added=[{"id": 2147483647, "content": "<|end|>", "special": True}]))
deep = "[" * 100 + "]" * 100
write("deep_json/tokenizer.json",
      hf_byte_level(v).replace('"merges": []', '"merges": [' + deep + "]"))
write("no_unk/tokenizer.json", json.dumps({
    "model": {"type": "BPE", "vocab": {"\u2581": 0, "a": 1, "b": 2}, "merges": [], "unk_token": None,
              "byte_fallback": False},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
}))
write("split_literal/tokenizer.json", hf_byte_level(v, pre={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"String": "a\\E(b"}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}))

# .tiktoken, GPT-2 encoder.json, GGUF --------------------------------------------------------------
write("huge_rank.tiktoken", "IQ== 0\nYQ== 2000000000\n")
write("gpt2_huge_id/encoder.json", json.dumps({**v, "hello": 16777215}))
write("gpt2_huge_id/vocab.bpe", "#version: 0.2\n")


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


# "tokenizer.ggml.tokens" claims 2,000,000,000 strings in a file of 80 bytes.
write("huge_count.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("tokenizer.ggml.tokens") +
      struct.pack("<IIQ", 9, 8, 2000000000) + gguf_string("a"))
