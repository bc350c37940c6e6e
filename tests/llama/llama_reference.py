"""A LLaMA forward pass in PyTorch, the oracle of llama_check_test.

Reads a LLaMA GGUF file with its own parser (struct module; F32, F16, Q8_0
and Q4_0 tensors dequantized to float64), runs greedy decoding of n_decode
tokens after a prompt, and writes the generated token ids and the logits of
every position (prompt and decoded tokens, float32) to the output file:
  int32 n_rows, int32 n_vocab, int32 n_decode, int32 tokens[n_decode],
  float32 logits[n_rows][n_vocab].

RoPE follows Hugging Face's LLaMA (rotate_half pairs (i, i + d/2)) on Q/K
weights un-permuted from the GGUF layout: llama.cpp's converter permutes
them so that its NORMAL mode (pairs (2i, 2i+1)) computes the same thing.

With CACHE q8_0, q4_0, q4_1, q5_0 or q5_1, K (after RoPE) and V pass through that type on
their way to attention, as tessera's KV cache stores them (SET_ROWS with
ggml's reference quantizers, in float32) and FLASH_ATTN_EXT reads them.

Usage: llama_reference.py MODEL.gguf TOKENS(comma-separated) N_DECODE OUT
                          [CACHE: f32 (default), q8_0, q4_0, q4_1, q5_0
                           or q5_1]
"""
import struct
import sys

import numpy as np
import torch


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, fmt):
        size = struct.calcsize(fmt)
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return values[0] if len(values) == 1 else values

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f",
               7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(self, vtype):
        if vtype in self.SCALARS:
            return self.take(self.SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype = self.take("I")
            n = self.take("Q")
            return [self.value(etype) for _ in range(n)]
        raise ValueError("unknown GGUF value type %d" % vtype)


def dequantize(ggml_type, raw, count):
    if ggml_type == 0:  # F32
        return np.frombuffer(raw, dtype="<f4", count=count).astype(np.float64)
    if ggml_type == 1:  # F16
        return np.frombuffer(raw, dtype="<f2", count=count).astype(np.float64)
    if ggml_type == 8:  # Q8_0: fp16 d, 32 x int8
        blocks = np.frombuffer(raw, dtype=np.uint8,
                               count=count // 32 * 34).reshape(-1, 34)
        d = blocks[:, :2].copy().view("<f2").astype(np.float64)
        q = blocks[:, 2:].copy().view(np.int8).astype(np.float64)
        return (d * q).reshape(-1)
    if ggml_type == 2:  # Q4_0: fp16 d, 16 bytes; j low nibble, j+16 high
        blocks = np.frombuffer(raw, dtype=np.uint8,
                               count=count // 32 * 18).reshape(-1, 18)
        d = blocks[:, :2].copy().view("<f2").astype(np.float64)
        qs = blocks[:, 2:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64)
        return (d * (q - 8.0)).reshape(-1)
    if ggml_type in (3, 6, 7):  # Q4_1, Q5_0, Q5_1: blocks of 32
        # Q4_1: fp16 d, fp16 m, 16 bytes; Q5_0: fp16 d, 4 bytes of fifth
        # bits, 16 bytes; Q5_1: fp16 d, fp16 m, 4 + 16 bytes. Value j < 16
        # is the low nibble of byte j, value j + 16 its high nibble; bit i
        # of the little-endian fifth-bit word is value i's bit 4.
        size = {3: 20, 6: 22, 7: 24}[ggml_type]
        blocks = np.frombuffer(raw, dtype=np.uint8,
                               count=count // 32 * size).reshape(-1, size)
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float64)
        qs = blocks[:, size - 16:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int64)
        if ggml_type != 3:
            at = 2 if ggml_type == 6 else 4
            qh = blocks[:, at:at + 4].copy().view("<u4").astype(np.int64)
            q |= ((qh >> np.arange(32)) & 1) << 4
        if ggml_type == 6:
            return (d * (q - 16.0)).reshape(-1)
        m = blocks[:, 2:4].copy().view("<f2").astype(np.float64)
        return (d * q + m).reshape(-1)
    if ggml_type in (10, 11):  # Q2_K, Q3_K: 16 sub-blocks of 16
        # Value 128h + 32j + l: bits 2j of qs[32h + l]; Q3_K's third bit is
        # bit 4h + j of hmask[l].
        size = 84 if ggml_type == 10 else 110
        blocks = np.frombuffer(raw, dtype=np.uint8,
                               count=count // 256 * size).reshape(-1, size)
        at = 16 if ggml_type == 10 else 32
        qs = blocks[:, at:at + 64].reshape(-1, 2, 1, 32).astype(np.int64)
        shifts = np.arange(4).reshape(1, 1, 4, 1)
        q = ((qs >> (2 * shifts)) & 3).reshape(-1, 16, 16)
        if ggml_type == 10:
            # scales[g]: scale in the low nibble, min in the high one.
            sc = blocks[:, 0:16].astype(np.float64)
            d = blocks[:, 80:82].copy().view("<f2").astype(np.float64)
            dmin = blocks[:, 82:84].copy().view("<f2").astype(np.float64)
            values = (d[:, :, None] * (sc % 16)[:, :, None] * q
                      - dmin[:, :, None] * (sc // 16)[:, :, None])
            return values.reshape(-1)
        hm = blocks[:, 0:32].reshape(-1, 1, 1, 32).astype(np.int64)
        hbits = (4 * np.arange(2).reshape(1, 2, 1, 1) + shifts)
        q = q | (((hm >> hbits) & 1).reshape(-1, 16, 16) << 2)
        packed = blocks[:, 96:108].astype(np.int64)
        g = np.arange(16)
        low = np.where(g < 8, packed[:, g % 8] & 0x0F, packed[:, g % 8] >> 4)
        high = (packed[:, 8 + g % 4] >> (2 * (g // 4))) & 3
        scale = (low | (high << 4)) - 32.0
        d = blocks[:, 108:110].copy().view("<f2").astype(np.float64)
        return (d[:, :, None] * scale[:, :, None] * (q - 4.0)).reshape(-1)
    if ggml_type == 12:  # Q4_K: super-blocks of 256 in 8 sub-blocks of 32
        blocks = np.frombuffer(raw, dtype=np.uint8,
                               count=count // 256 * 144).reshape(-1, 144)
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float64)
        dmin = blocks[:, 2:4].copy().view("<f2").astype(np.float64)
        sc, m = k_scales_mins(blocks[:, 4:16])
        qs = blocks[:, 16:144].reshape(-1, 4, 32)
        # Bytes 32c..32c+31: values 64c + l (low nibble), 64c + 32 + l (high).
        q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32)
        values = (d[:, :, None] * sc[:, :, None] * q
                  - dmin[:, :, None] * m[:, :, None])
        return values.reshape(-1)
    if ggml_type == 14:  # Q6_K: ql[128], qh[64], int8 scales[16], fp16 d
        blocks = np.frombuffer(raw, dtype=np.uint8,
                               count=count // 256 * 210).reshape(-1, 210)
        ql = blocks[:, 0:128].reshape(-1, 2, 2, 32).astype(np.int64)
        qh = blocks[:, 128:192].reshape(-1, 2, 1, 32).astype(np.int64)
        scales = blocks[:, 192:208].copy().view(np.int8).astype(np.float64)
        d = blocks[:, 208:210].copy().view("<f2").astype(np.float64)
        # Value 128h + 32t + l: ql[64h + 32(t % 2) + l], nibble t // 2;
        # bits 2t, 2t + 1 of qh[32h + l] on top; minus 32.
        low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)  # t = 0..3
        high = np.concatenate([(qh >> (2 * t)) & 3 for t in range(4)], axis=2)
        q = (low | (high << 4)).reshape(-1, 16, 16) - 32.0
        return (d[:, :, None] * scales[:, :, None] * q).reshape(-1)
    raise ValueError("unsupported ggml type %d" % ggml_type)


def k_scales_mins(packed):
    """The 6-bit scales and mins of Q4_K/Q5_K's 8 sub-blocks from their 12
    packed bytes: j < 4 in the low 6 bits of bytes j (scale) and j + 4
    (min); j >= 4 in the nibbles of byte j + 4 with their top 2 bits in
    the high bits of bytes j - 4 (scale) and j (min)."""
    p = packed.astype(np.int64)
    sc = np.empty((p.shape[0], 8), dtype=np.int64)
    m = np.empty_like(sc)
    for j in range(4):
        sc[:, j] = p[:, j] & 63
        m[:, j] = p[:, j + 4] & 63
    for j in range(4, 8):
        sc[:, j] = (p[:, j + 4] & 0x0F) | ((p[:, j - 4] >> 6) << 4)
        m[:, j] = (p[:, j + 4] >> 4) | ((p[:, j] >> 6) << 4)
    return sc.astype(np.float64), m.astype(np.float64)


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.pos = 4
    version = r.take("I")
    assert version in (2, 3), version
    n_tensors = r.take("Q")
    n_kv = r.take("Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("I")
        ne = [r.take("Q") for _ in range(n_dims)]
        ggml_type = r.take("i")
        offset = r.take("Q")
        infos.append((name, ne, ggml_type, offset))
    alignment = kv.get("general.alignment", 32)
    start = (r.pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, ne, ggml_type, offset in infos:
        count = int(np.prod(ne))
        values = dequantize(ggml_type, data[start + offset:], count)
        # ne[0] is innermost: numpy shape is ne reversed.
        tensors[name] = torch.from_numpy(values.reshape(list(reversed(ne))))
    return kv, tensors


def unpermute(w, n_head):
    # Inverse of llama.cpp convert_hf_to_gguf.py's LlamaModel.permute.
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def round_half_away(x):
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def through_cache(x, cache):
    """x [n, heads, hd] stored in a KV cache of type `cache`, read back."""
    if cache == "f32":
        return x
    b = x.to(torch.float32).reshape(-1, 32)
    if cache == "q8_0":
        # d = amax / 127 (stored as F16); q = round(x / d)
        d = b.abs().amax(dim=1, keepdim=True) / 127
        q = round_half_away(b * torch.where(d > 0, 1 / d, torch.zeros_like(d)))
    elif cache == "q4_0":
        # d = (the value of largest magnitude) / -8; q = min(15, x / d + 8.5)
        # truncated, stored as q - 8
        m = b.gather(1, b.abs().argmax(dim=1, keepdim=True))
        d = m / -8
        idd = torch.where(d != 0, 1 / d, torch.zeros_like(d))
        q = torch.clamp(torch.floor(b * idd + 8.5), max=15) - 8
    elif cache == "q5_0":
        # as q4_0 with 32 levels: d = m / -16; q = min(31, x / d + 16.5)
        # truncated, stored as q - 16
        m = b.gather(1, b.abs().argmax(dim=1, keepdim=True))
        d = m / -16
        idd = torch.where(d != 0, 1 / d, torch.zeros_like(d))
        q = torch.clamp(torch.floor(b * idd + 16.5), max=31) - 16
    elif cache in ("q4_1", "q5_1"):
        # d = (max - min) / top and the minimum, both stored as F16;
        # q = min(top, (x - min) / d + 0.5) truncated
        top = 15 if cache == "q4_1" else 31
        lo = b.amin(dim=1, keepdim=True)
        d = (b.amax(dim=1, keepdim=True) - lo) / top
        idd = torch.where(d != 0, 1 / d, torch.zeros_like(d))
        q = torch.clamp(torch.floor((b - lo) * idd + 0.5), max=top)
        d16 = d.to(torch.float16).to(torch.float32)
        m16 = lo.to(torch.float16).to(torch.float32)
        return (q * d16 + m16).to(torch.float64).reshape(x.shape)
    else:
        raise ValueError("cache type " + cache)
    d16 = d.to(torch.float16).to(torch.float32)
    return (q * d16).to(torch.float64).reshape(x.shape)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(kv, t, tokens, cache):
    n_layer = kv["llama.block_count"]
    n_embd = kv["llama.embedding_length"]
    n_head = kv["llama.attention.head_count"]
    n_head_kv = kv.get("llama.attention.head_count_kv", n_head)
    eps = kv["llama.attention.layer_norm_rms_epsilon"]
    base = kv.get("llama.rope.freq_base", 10000.0)
    hd = n_embd // n_head
    n = len(tokens)

    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float64)
                               / hd))
    if "rope_freqs.weight" in t:
        inv_freq = inv_freq / t["rope_freqs.weight"]
    angles = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    cos = torch.cat((angles, angles), dim=-1).cos()[:, None, :]
    sin = torch.cat((angles, angles), dim=-1).sin()[:, None, :]
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)

    x = t["token_embd.weight"][torch.tensor(tokens)]
    for l in range(n_layer):
        p = "blk.%d." % l
        h = rms_norm(x, t[p + "attn_norm.weight"], eps)
        wq = unpermute(t[p + "attn_q.weight"], n_head)
        wk = unpermute(t[p + "attn_k.weight"], n_head_kv)
        q = (h @ wq.T).reshape(n, n_head, hd)
        k = (h @ wk.T).reshape(n, n_head_kv, hd)
        v = (h @ t[p + "attn_v.weight"].T).reshape(n, n_head_kv, hd)
        q = q * cos + rotate_half(q) * sin
        k = through_cache(k * cos + rotate_half(k) * sin, cache)
        v = through_cache(v, cache)
        group = n_head // n_head_kv
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5 + mask
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
        x = x + attn.reshape(n, n_embd) @ t[p + "attn_output.weight"].T
        h = rms_norm(x, t[p + "ffn_norm.weight"], eps)
        g = h @ t[p + "ffn_gate.weight"].T
        u = h @ t[p + "ffn_up.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ t[p + "ffn_down.weight"].T
    x = rms_norm(x, t["output_norm.weight"], eps)
    out = t.get("output.weight", t["token_embd.weight"])
    return x @ out.T


def main():
    path, tokens_arg, n_decode, out_path = sys.argv[1:5]
    cache = sys.argv[5] if len(sys.argv) > 5 else "f32"
    prompt = [int(s) for s in tokens_arg.split(",")]
    n_decode = int(n_decode)
    kv, tensors = read_gguf(path)
    assert kv["general.architecture"] == "llama"
    seq = list(prompt)
    generated = []
    with torch.no_grad():
        for _ in range(n_decode):
            logits = forward(kv, tensors, seq, cache)
            generated.append(int(logits[-1].argmax()))
            seq.append(generated[-1])
        # Logits of the prompt and of each decoded token fed back.
        logits = forward(kv, tensors, seq, cache)
    n_vocab = logits.shape[1]
    with open(out_path, "wb") as f:
        f.write(struct.pack("<iii", logits.shape[0], n_vocab, n_decode))
        f.write(struct.pack("<%di" % n_decode, *generated))
        f.write(logits.numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
