#!/usr/bin/env python3
"""make_bad_files.py - write damaged copies of a small GGUF model for the
bad-input and inspect tests.

usage: make_bad_files.py TINY.gguf OUTDIR

TINY.gguf is shared/models/gguf-tiny/llama-2-tiny-random.gguf. It is parsed
and re-emitted by the small GGUF codec below (plain Python, no numpy or gguf
package), with one defect per output file, so each file exercises exactly
one check. good.gguf is the unmodified re-emission: the tests first check
that it loads, which proves the codec itself is sound.

Every file name and the defect it carries is printed, one per line.
"""
import math
import os
import struct
import sys

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: '<B', I8: '<b', U16: '<H', I16: '<h', U32: '<I', I32: '<i',
              F32: '<f', BOOL: '<?', U64: '<Q', I64: '<q', F64: '<d'}
# ggml tensor types used here: (elements per block, bytes per block)
T_F32, T_F16, T_Q4_1, T_Q8_0, T_MXFP4 = 0, 1, 3, 8, 39
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_1: (32, 20), T_Q8_0: (32, 34), T_MXFP4: (32, 17)}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take('<Q')
        s = self.d[self.p:self.p + n]
        self.p += n
        return s

    def value(self, vt):
        if vt == STR:
            return self.string()
        if vt == ARR:
            et, n = self.take('<I'), self.take('<Q')
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR_FMT[vt])


def enc_str(s):
    if isinstance(s, str):
        s = s.encode()
    return struct.pack('<Q', len(s)) + s


def enc_value(vt, v):
    if vt == STR:
        return enc_str(v)
    if vt == ARR:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(enc_value(et, x) for x in items)
    return struct.pack(SCALAR_FMT[vt], v)


def parse(path):
    with open(path, 'rb') as f:
        data = f.read()
    r = Reader(data)
    assert r.d[:4] == b'GGUF', 'not a GGUF file'
    r.p = 4
    version, n_t, n_kv = r.take('<I'), r.take('<Q'), r.take('<Q')
    assert version in (2, 3)
    kvs = []
    for _ in range(n_kv):
        k = r.string().decode()
        vt = r.take('<I')
        kvs.append([k, vt, r.value(vt)])
    tensors = []
    for _ in range(n_t):
        name = r.string().decode()
        nd = r.take('<I')
        dims = [r.take('<Q') for _ in range(nd)]
        ty, off = r.take('<I'), r.take('<Q')
        tensors.append({'name': name, 'dims': dims, 'type': ty, 'off': off})
    align = next((v for k, t, v in kvs if k == 'general.alignment'), 32)
    base = (r.p + align - 1) // align * align
    for t in tensors:
        n = 1
        for d in t['dims']:
            n *= d
        blk, size = BLOCK[t['type']]
        t['data'] = data[base + t['off']:base + t['off'] + n // blk * size]
    return kvs, tensors


def emit(path, kvs, tensors, version=3, align=32, tweak=None):
    """Write a GGUF. tweak(info_list) may edit the tensor infos (dims, type,
    off) after the offsets have been laid out, to create inconsistencies."""
    infos, blobs, off = [], [], 0
    for t in tensors:
        off = (off + align - 1) // align * align
        infos.append({'name': t['name'], 'dims': list(t['dims']), 'type': t['type'], 'off': off})
        blobs.append((off, t['data']))
        off += len(t['data'])
    if tweak:
        tweak(infos)
    out = bytearray(b'GGUF' + struct.pack('<IQQ', version, len(infos), len(kvs)))
    for k, vt, v in kvs:
        out += enc_str(k) + struct.pack('<I', vt) + enc_value(vt, v)
    for i in infos:
        out += enc_str(i['name']) + struct.pack('<I', len(i['dims']))
        out += b''.join(struct.pack('<Q', d) for d in i['dims'])
        out += struct.pack('<IQ', i['type'], i['off'])
    out += b'\0' * (-len(out) % align)
    base = len(out)
    for o, b in blobs:
        out += b'\0' * (base + o - len(out))
        out += b
    with open(path, 'wb') as f:
        f.write(out)


def f16_values(blob):
    return list(struct.unpack('<%de' % (len(blob) // 2), blob))


def quant_q8_0(vals):
    out = bytearray()
    for b in range(0, len(vals), 32):
        x = vals[b:b + 32]
        amax = max(abs(v) for v in x)
        d = amax / 127.0 if amax else 0.0
        q = [int(round(v / d)) if d else 0 for v in x]
        out += struct.pack('<e', d) + struct.pack('<32b', *[max(-127, min(127, v)) for v in q])
    return bytes(out)


def quant_q4_1(vals):
    out = bytearray()
    for b in range(0, len(vals), 32):
        x = vals[b:b + 32]
        lo, hi = min(x), max(x)
        d = (hi - lo) / 15.0 if hi > lo else 0.0
        q = [min(15, max(0, int(round((v - lo) / d)))) if d else 0 for v in x]
        packed = bytes(q[j] | (q[j + 16] << 4) for j in range(16))
        out += struct.pack('<ee', d, lo) + packed
    return bytes(out)


# MXFP4's E2M1 values doubled to integers (ggml's kvalues_mxfp4); the scale
# is 2^(e-127), so a code's weight is KVALUES[code] * 2^(e-128).
MXFP4_KVALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


def quant_mxfp4(vals):
    """gguf-py's MXFP4 rule: e = floor(log2(amax)) - 2 + 127 (0 for an
    all-zero block), then the nearest code (the first on a tie)."""
    out = bytearray()
    for b in range(0, len(vals), 32):
        x = vals[b:b + 32]
        amax = max(abs(v) for v in x)
        e = min(254, max(0, math.floor(math.log2(amax)) - 2 + 127)) if amax > 0 else 0
        d = math.ldexp(1.0, e - 128)
        q = [min(range(16), key=lambda i: abs(d * MXFP4_KVALUES[i] - v)) for v in x]
        out += bytes([e]) + bytes(q[j] | (q[j + 16] << 4) for j in range(16))
    return bytes(out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    kvs, tensors = parse(src)
    made = []

    def out(name, what, **kw):
        emit(os.path.join(outdir, name), kw.pop('kvs', kvs), kw.pop('tensors', tensors), **kw)
        made.append((name, what))

    def with_kv(key, vt, value):
        new = [list(kv) for kv in kvs if kv[0] != key]
        if vt is not None:
            new.append([key, vt, value])
        return new

    def tensor_edit(target, **fields):
        def tweak(infos):
            for i in infos:
                if i['name'] == target:
                    for k, v in fields.items():
                        i[k] = v(i[k]) if callable(v) else v
        return tweak

    out('good.gguf', 'unmodified re-emission (must load)')
    out('unknown_type.gguf', 'tensor blk.0.attn_norm.weight has type 99',
        tweak=tensor_edit('blk.0.attn_norm.weight', type=99))
    out('absurd_dims.gguf', 'token_embd.weight claims 8 x 2^62 elements',
        tweak=tensor_edit('token_embd.weight', dims=[8, 1 << 62]))
    out('huge_dims.gguf', 'token_embd.weight claims 8 x 2^40 elements (data past EOF)',
        tweak=tensor_edit('token_embd.weight', dims=[8, 1 << 40]))
    out('ndims5.gguf', 'blk.0.ffn_norm.weight has 5 dimensions',
        tweak=tensor_edit('blk.0.ffn_norm.weight', dims=[8, 1, 1, 1, 1]))
    out('zero_dim.gguf', 'blk.0.attn_q.weight has a zero dimension',
        tweak=tensor_edit('blk.0.attn_q.weight', dims=[8, 0]))
    out('data_past_eof.gguf', 'output.weight data offset moved 1 MiB past the end',
        tweak=tensor_edit('output.weight', off=lambda o: o + (1 << 20)))
    out('misaligned.gguf', 'output_norm.weight offset not a multiple of 32',
        tweak=tensor_edit('output_norm.weight', off=lambda o: o + 4))
    out('dup_tensor.gguf', 'two tensors named blk.0.attn_q.weight',
        tweak=tensor_edit('blk.0.attn_k.weight', name='blk.0.attn_q.weight'))
    out('bad_alignment.gguf', 'general.alignment is 24',
        kvs=with_kv('general.alignment', U32, 24), align=24)
    out('other_arch.gguf', "general.architecture is 'qwen9' (valid container, unsupported model)",
        kvs=with_kv('general.architecture', STR, 'qwen9'))
    out('version1.gguf', 'GGUF version 1', version=1)
    out('version99.gguf', 'GGUF version 99', version=99)

    tt = next(v for k, t, v in kvs if k == 'tokenizer.ggml.token_type')
    out('token_type_len.gguf', 'tokenizer.ggml.token_type has one entry fewer than the vocabulary',
        kvs=with_kv('tokenizer.ggml.token_type', ARR, (tt[0], tt[1][:-1])))
    out('bos_range.gguf', 'tokenizer.ggml.bos_token_id is outside the vocabulary',
        kvs=with_kv('tokenizer.ggml.bos_token_id', U32, 999999))

    # A byte-level BPE variant of the same vocabulary with well-formed merges
    # except one; the tokens containing '\u2581' stand in for real pieces.
    bpe = with_kv('tokenizer.ggml.model', STR, 'gpt2')
    bpe = [kv for kv in bpe if kv[0] != 'tokenizer.ggml.scores'] + [['tokenizer.ggml.pre', STR, 'gpt-2']]
    good_merges = ['\u2581 t', 'e r', 'i n']

    def merges(extra):
        return [kv for kv in bpe] + [['tokenizer.ggml.merges', ARR, (STR, [m.encode() for m in good_merges + extra])]]
    out('bpe_good.gguf', 'BPE variant with consistent merges (must load)', kvs=merges([]))
    out('merge_missing_token.gguf', "a merge names 'qqzxv', which is not a token", kvs=merges(['qqzxv \u2581t']))
    out('merge_no_space.gguf', 'a merge without a space', kvs=merges(['nospace']))

    # Quantized weights: ffn_down is [32, 8], the only tensor whose rows fit
    # a 32-element block.
    def quantized(ty, fn):
        ts = [dict(t) for t in tensors]
        for t in ts:
            if t['name'] == 'blk.0.ffn_down.weight':
                t['type'], t['data'] = ty, fn(f16_values(t['data']))
        return ts
    q8 = quantized(T_Q8_0, quant_q8_0)
    out('q8_0.gguf', 'blk.0.ffn_down.weight as Q8_0 (must load, clean)', tensors=q8)
    q41 = quantized(T_Q4_1, quant_q4_1)
    out('q4_1.gguf', 'blk.0.ffn_down.weight as Q4_1 (must load, clean)', tensors=q41)

    def flip_scale(ts, block, field_off, inf):
        """Set all exponent bits of one block's f16 scale (or min): with
        inf, also clear the mantissa so the field is exactly +/-Inf; else
        keep it, which gives NaN unless the mantissa was zero."""
        ts = [dict(t) for t in ts]
        for t in ts:
            if t['name'] == 'blk.0.ffn_down.weight':
                at = block * BLOCK[t['type']][1] + field_off
                b = bytearray(t['data'])
                if inf:
                    b[at], b[at + 1] = 0, (b[at + 1] & 0x80) | 0x7c
                else:
                    b[at + 1] |= 0x7c
                t['data'] = bytes(b)
        return ts
    out('q8_0_bad_scale.gguf', 'Q8_0 block 3 of blk.0.ffn_down.weight has an Inf scale',
        tensors=flip_scale(q8, 3, 0, True))
    out('q4_1_bad_min.gguf', 'Q4_1 block 5 of blk.0.ffn_down.weight has an Inf/NaN min',
        tensors=flip_scale(q41, 5, 2, False))

    mx = quantized(T_MXFP4, quant_mxfp4)
    out('mxfp4.gguf', 'blk.0.ffn_down.weight as MXFP4 (must load, clean)', tensors=mx)

    def nan_exponent(ts, block, zero_codes):
        """Set one MXFP4 block's E8M0 exponent to 0xFF (NaN in the MX spec;
        ggml decodes it as 2^128, so its codes above 0.5 become Inf); with
        zero_codes, also make every code 0, so no weight is Inf and only
        the scale check can see it."""
        ts = [dict(t) for t in ts]
        for t in ts:
            if t['name'] == 'blk.0.ffn_down.weight':
                at = block * BLOCK[T_MXFP4][1]
                b = bytearray(t['data'])
                b[at] = 0xFF
                if zero_codes:
                    b[at + 1:at + 17] = bytes(16)
                t['data'] = bytes(b)
        return ts
    out('mxfp4_nan_scale.gguf', 'MXFP4 block 3 of blk.0.ffn_down.weight has the E8M0 exponent 0xFF',
        tensors=nan_exponent(mx, 3, False))
    out('mxfp4_nan_scale_zero.gguf', 'MXFP4 block 5 of blk.0.ffn_down.weight: exponent 0xFF, all codes 0',
        tensors=nan_exponent(mx, 5, True))

    for name, what in made:
        print('%s\t%s' % (name, what))


if __name__ == '__main__':
    main()
