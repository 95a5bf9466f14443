#!/usr/bin/env python3
"""check_dequantize.py GGUF_PY TOOL MODELS_DIR — glass reads every quantized block as llama.cpp does.

The oracle is llama.cpp's own Python package gguf-py (GGUF_PY: its folder in the llama.cpp source
that node-llama-cpp bundles), whose quants.py dequantizes each ggml type with numpy in ggml's
order of fp32 operations. TOOL is tests/families/ggml_blocks.cpp (glass's ggml_quants.hpp).
For Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K, bit for bit (fp32 bit patterns equal):
  1. random blocks: every byte random, the fp16 fields (d, dmin, m) random finite values;
  2. extreme blocks: d = ±65504 and the smallest subnormal, all-zero and all-0xFF quants, zero scales;
  3. glass's writer: random weights (normal, all positive, constant, one outlier) quantized by glass,
     read back by both; and gguf-py's own quantizer's blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) read by glass;
  4. every tensor of the quantized family models (MODELS_DIR/*-{Q4_1,...,Q6_K}.gguf).
Prints one line per check and exits 1 on the first difference, naming the type and the weight.
"""
import glob
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    # A python3 first on PATH (pyenv, venv) may lack Debian's python3-numpy: try the system one.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("check_dequantize.py: needs numpy (Debian: apt-get install python3-numpy)")

sys.path.insert(0, sys.argv[1])
from gguf import GGUFReader  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

TOOL, MODELS = sys.argv[2], sys.argv[3]
TYPES = ["Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
# Byte offsets of each block's fp16 fields (ggml-common.h).
HALVES = {"Q4_0": [0], "Q8_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
          "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
rng = np.random.default_rng(20261204)
tmp = tempfile.mkdtemp()


def glass(mode, gtype, data):
    src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    with open(src, "wb") as f:
        f.write(data)
    qtype = GGMLQuantizationType[gtype]
    subprocess.run([TOOL, mode, str(int(qtype)), src, dst], check=True)
    with open(dst, "rb") as f:
        out = f.read()
    return np.frombuffer(out, dtype=np.float32) if mode == "dequantize" else out


def same(gtype, blocks, what, quiet=False):
    """glass's and gguf-py's reading of `blocks` (uint8 [n, block_bytes]) agree bit for bit."""
    qtype = GGMLQuantizationType[gtype]
    ours = glass("dequantize", gtype, blocks.tobytes())
    theirs = dequantize(blocks, qtype).astype(np.float32).reshape(-1)
    if ours.shape != theirs.shape:
        sys.exit("%s %s: %d weights from glass, %d from gguf-py" % (gtype, what, ours.size, theirs.size))
    diff = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
    if diff.size:
        i = diff[0]
        sys.exit("FAIL %s %s: weight %d (block %d) glass %r, gguf-py %r (%d weights differ)"
                 % (gtype, what, i, i // GGML_QUANT_SIZES[qtype][0], ours[i], theirs[i], diff.size))
    if not quiet:
        print("ok   %-5s %-42s %7d weights bit for bit" % (gtype, what, ours.size))
    return ours.size


def random_blocks(gtype, n):
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[gtype]]
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for at in HALVES[gtype]:
        h = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 3, n)).astype(np.float16)
        b[:, at:at + 2] = h.view(np.uint8).reshape(n, 2)
    return b


def extreme_blocks(gtype):
    _, size = GGML_QUANT_SIZES[GGMLQuantizationType[gtype]]
    out = []
    for fill in (0x00, 0xFF, 0x88, 0x0F):
        for h in (65504.0, -65504.0, 2.0 ** -24, 0.0, 1.0):
            b = np.full(size, fill, dtype=np.uint8)
            for at in HALVES[gtype]:
                b[at:at + 2] = np.array([h], dtype=np.float16).view(np.uint8)
            out.append(b)
    return np.stack(out)


def weights(n):
    w = rng.standard_normal(n).astype(np.float32) * 0.05
    w[: n // 4] = np.abs(w[: n // 4])            # a quarter all positive
    w[n // 4: n // 4 + 256] = 0.013              # a constant super-block
    w[n // 2] = 3.0                              # an outlier
    return w


for t in TYPES:
    same(t, random_blocks(t, 4096), "random blocks")
    same(t, extreme_blocks(t), "extreme blocks")
    x = weights(256 * 64)
    blocks = np.frombuffer(glass("quantize", t, x.tobytes()), dtype=np.uint8)
    same(t, blocks.reshape(-1, GGML_QUANT_SIZES[GGMLQuantizationType[t]][1]), "blocks glass wrote")
    if t in ("Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1"):
        same(t, quantize(x.reshape(64, 256), GGMLQuantizationType[t]).reshape(-1, GGML_QUANT_SIZES[GGMLQuantizationType[t]][1]),
             "blocks gguf-py wrote")

files = sorted(f for f in glob.glob(os.path.join(MODELS, "*.gguf"))
               if any(f.endswith("-%s.gguf" % k) for k in ("Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K")))
if not files:
    sys.exit("no quantized family models in %s" % MODELS)
for path in files:
    counts = {}
    for t in GGUFReader(path).tensors:
        name = t.tensor_type.name
        if name in TYPES:
            counts[name] = counts.get(name, 0) + same(
                name, np.asarray(t.data).reshape(-1, GGML_QUANT_SIZES[t.tensor_type][1]),
                "%s %s" % (os.path.basename(path), t.name), quiet=True)
    print("ok   %-22s %s bit for bit" % (os.path.basename(path),
                                         ", ".join("%s %d weights" % kv for kv in sorted(counts.items()))))
print("dequantization equal to llama.cpp's gguf-py on every block")
