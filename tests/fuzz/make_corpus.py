#!/usr/bin/env python3
"""make_corpus.py - (re)generate the seed corpora in tests/fuzz/corpus/.

usage: make_corpus.py BANGTRACE SHARED OUTDIR

BANGTRACE is a built bangtrace (it records the seed traces), SHARED the
shared test data (stories260K, tok512, the llama.cpp vocabulary vectors).
Seeds are kept small on purpose (a few KB each, ~1 MiB in all): the GGUF
seeds are tiny models written here (SPM and BPE vocabularies, every
metadata type, a vocab-only file), the traces are short runs vacuumed to
512-byte pages. Run from the source tree root; the output is committed.
"""
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack('<Q', len(b)) + b


def gval(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        out = struct.pack('<IQ', et, len(items))
        return out + b''.join(gval(et, x) for x in items)
    fmt = {U8: '<B', I8: '<b', U16: '<H', I16: '<h', U32: '<I', I32: '<i', F32: '<f',
           BOOL: '<?', U64: '<Q', I64: '<q', F64: '<d'}[t]
    return struct.pack(fmt, v)


def gguf(kvs, tensors, version=3, align=32):
    """kvs: [(key, type, value)], tensors: [(name, shape, f32 values)]"""
    out = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack('<I', t) + gval(t, v)
    off, blobs = 0, []
    for name, shape, vals in tensors:
        out += gstr(name) + struct.pack('<I', len(shape)) + b''.join(struct.pack('<Q', n) for n in shape)
        out += struct.pack('<IQ', 0, off)
        blob = struct.pack('<%df' % len(vals), *vals)
        blobs.append(blob)
        off += (len(blob) + align - 1) // align * align
    out += b'\0' * (-len(out) % align)
    for blob in blobs:
        out += blob + b'\0' * (-len(blob) % align)
    return out


def tiny_model(vocab_kvs, n_vocab, dim=8, hidden=16, layers=1, heads=2, kv_heads=1, extra=()):
    hd = dim // heads
    kvs = [('general.architecture', STR, 'llama'), ('general.name', STR, 'fuzz-tiny'),
           ('llama.embedding_length', U32, dim), ('llama.feed_forward_length', U32, hidden),
           ('llama.block_count', U32, layers), ('llama.attention.head_count', U32, heads),
           ('llama.attention.head_count_kv', U32, kv_heads), ('llama.context_length', U32, 32),
           ('llama.rope.dimension_count', U32, hd), ('llama.rope.freq_base', F32, 10000.0),
           ('llama.attention.layer_norm_rms_epsilon', F32, 1e-5)] + list(vocab_kvs) + list(extra)
    val = lambda n: [((i * 37) % 17 - 8) / 16.0 for i in range(n)]
    ts = [('token_embd.weight', [dim, n_vocab], val(dim * n_vocab)), ('output_norm.weight', [dim], [1.0] * dim)]
    for l in range(layers):
        ts += [('blk.%d.attn_norm.weight' % l, [dim], [1.0] * dim),
               ('blk.%d.attn_q.weight' % l, [dim, dim], val(dim * dim)),
               ('blk.%d.attn_k.weight' % l, [dim, kv_heads * hd], val(dim * kv_heads * hd)),
               ('blk.%d.attn_v.weight' % l, [dim, kv_heads * hd], val(dim * kv_heads * hd)),
               ('blk.%d.attn_output.weight' % l, [dim, dim], val(dim * dim)),
               ('blk.%d.ffn_norm.weight' % l, [dim], [1.0] * dim),
               ('blk.%d.ffn_gate.weight' % l, [dim, hidden], val(dim * hidden)),
               ('blk.%d.ffn_up.weight' % l, [dim, hidden], val(dim * hidden)),
               ('blk.%d.ffn_down.weight' % l, [hidden, dim], val(dim * hidden))]
    return kvs, ts


CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are a fuzzer<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
          "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def spm_vocab():
    toks = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)]
    toks += ['\u2581', '\u2581a', '\u2581the', 'e', 't', 'h', 'he', '\u2581he', 'llo', '<|im_start|>', '<|im_end|>']
    types = [2, 3, 3] + [6] * 256 + [1] * 9 + [3, 3]
    return [('tokenizer.ggml.model', STR, 'llama'), ('tokenizer.ggml.tokens', ARR, (STR, toks)),
            ('tokenizer.ggml.scores', ARR, (F32, [-float(i) for i in range(len(toks))])),
            ('tokenizer.ggml.token_type', ARR, (I32, types)),
            ('tokenizer.ggml.bos_token_id', U32, 1), ('tokenizer.ggml.eos_token_id', U32, 2),
            ('tokenizer.ggml.unknown_token_id', U32, 0), ('tokenizer.ggml.add_bos_token', BOOL, True),
            ('tokenizer.chat_template', STR, CHATML)], len(toks)


def bpe_vocab(pre='gpt-2'):
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    toks = [chr(c) for c in cs] + ['\u0120t', 'he', '\u0120the', 'll', 'llo', '<|endoftext|>']
    merges = ['\u0120 t', 'h e', '\u0120t he', 'l l', 'll o']
    types = [1] * (len(toks) - 1) + [3]
    return [('tokenizer.ggml.model', STR, 'gpt2'), ('tokenizer.ggml.pre', STR, pre),
            ('tokenizer.ggml.tokens', ARR, (STR, toks)), ('tokenizer.ggml.merges', ARR, (STR, merges)),
            ('tokenizer.ggml.token_type', ARR, (I32, types)),
            ('tokenizer.ggml.bos_token_id', U32, len(toks) - 1), ('tokenizer.ggml.eos_token_id', U32, len(toks) - 1)], len(toks)


def l2c(dim=8, hidden=16, layers=1, heads=2, kv_heads=1, vocab=16, seq=8, shared=True):
    hs = dim // heads
    n = (vocab * dim + layers * dim + layers * dim * dim * 2 + layers * dim * kv_heads * hs * 2 +
         layers * dim + layers * dim * hidden * 3 + dim + seq * hs + (0 if shared else vocab * dim))
    hdr = struct.pack('<7i', dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, seq)
    return hdr + struct.pack('<%df' % n, *[((i * 13) % 7 - 3) / 8.0 for i in range(n)])


def l2c_tok(pieces):
    out = struct.pack('<i', max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        b = p.encode()
        out += struct.pack('<fi', -float(i), len(b)) + b
    return out


def safetensors(tensors, meta=True):
    """A safetensors file: [(name, dtype, shape, bytes)] back to back."""
    import json
    header, off = {}, 0
    if meta:
        header['__metadata__'] = {'format': 'pt'}
    for name, dt, shape, data in tensors:
        header[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    return struct.pack('<Q', len(h)) + h + b''.join(t[3] for t in tensors)


def safetensors_seeds():
    f32 = lambda n: struct.pack('<%df' % n, *[0.5 * i for i in range(n)])
    return [
        ('tiny-f32.safetensors', [('model.embed_tokens.weight', 'F32', [4, 2], f32(8)), ('model.norm.weight', 'F32', [2], f32(2))]),
        ('mixed.safetensors', [('a', 'BF16', [3], b'\x80\x3f' * 3), ('b', 'F16', [1, 2], b'\x00\x3c' * 2),
                               ('c', 'I64', [1], b'\0' * 8), ('empty', 'F32', [0], b''), ('scalar', 'F32', [], f32(1))]),
        ('empty.safetensors', []),
    ]


def write(d, name, data):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def small_trace(bt, out, args):
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, 't.db')
        subprocess.run([bt, 'run'] + args + ['--trace', p], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shrink(p, out)


def shrink(src, out):
    d = sqlite3.connect(src)
    d.execute('PRAGMA journal_mode=DELETE')
    d.execute('PRAGMA page_size=512')
    d.execute('VACUUM')
    d.close()
    shutil.copyfile(src, out)


def main():
    bt, shared, top = sys.argv[1], sys.argv[2], sys.argv[3]
    models = os.path.join(shared, 'models')
    stories, tok512 = os.path.join(models, 'llama2c/stories260K.bin'), os.path.join(models, 'llama2c/tok512.bin')

    d = os.path.join(top, 'gguf')
    sv, sn = spm_vocab()
    bv, bn = bpe_vocab()
    kvs, ts = tiny_model(sv, sn)
    write(d, 'tiny-spm.gguf', gguf(kvs, ts))
    write(d, 'tiny-spm-v2.gguf', gguf(kvs, ts, version=2))
    kvs, ts = tiny_model(bv, bn, layers=2, heads=2, kv_heads=2, extra=[('general.alignment', U32, 64)])
    write(d, 'tiny-bpe.gguf', gguf(kvs, ts, align=64))
    every = [('k.u8', U8, 7), ('k.i8', I8, -7), ('k.u16', U16, 700), ('k.i16', I16, -700), ('k.u32', U32, 7 << 20),
             ('k.i32', I32, -(7 << 20)), ('k.f32', F32, 0.5), ('k.bool', BOOL, True), ('k.str', STR, 'x\x1b]0;t\x07'),
             ('k.u64', U64, 1 << 40), ('k.i64', I64, -(1 << 40)), ('k.f64', F64, 0.25),
             ('k.arr', ARR, (ARR, [(U8, [1, 2]), (STR, ['a', 'bc'])]))]
    write(d, 'vocab-only.gguf', gguf([('general.architecture', STR, 'llama')] + bv + every, []))

    d = os.path.join(top, 'safetensors')
    for name, ts in safetensors_seeds():
        write(d, name, safetensors(ts))

    d = os.path.join(top, 'llama2c')
    write(d, 'tiny-shared.bin', l2c())
    write(d, 'tiny-separate.bin', l2c(shared=False, layers=2, heads=4, kv_heads=2))
    write(d, 'tiny-mqa.bin', l2c(dim=16, hidden=8, heads=4, kv_heads=1, vocab=3, seq=2))

    d = os.path.join(top, 'llama2c_tok')
    write(d, 'tok512.bin', struct.pack('<H', 511) + open(tok512, 'rb').read())   # n_vocab = 1 + 511
    pieces = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)] + [' ', ' a', 'a', 'b', ' the', 'he']
    write(d, 'tiny.bin', struct.pack('<H', len(pieces) - 1) + l2c_tok(pieces))

    d = os.path.join(top, 'request')
    bodies = {
        'chat.json': open('examples/chat.json').read(),
        'completions.json': '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, '
                            '"top_k": 40, "seed": -1, "stop": ["\\n\\n", "END"], "stream": false, "model": "x"}',
        'conv.json': '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, '
                     '{"role": "assistant", "content": " Hello "}, {"role": "user", "content": "\\u00e9\\u0000x"}], '
                     '"max_completion_tokens": 3, "frobnicate": 1}',
    }
    templates = {
        'chatml': CHATML,
        'qwen': "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
                "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}",
        'llama3': "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}",
        'llama2': "{% if messages[0]['role'] == 'system' %}{{ bos_token + '[INST] <<SYS>>\\n' }}{% endif %}",
        'zephyr': "{% if messages[0].role != \"system\" %}{{ \"<|system|>\\nDefault</s>\\n\" }}{% endif %}<|user|>",
        'empty-default': "{% if messages[0]['role'] != 'system' %}{{ '' }}{% endif %}",
    }
    for bn_, body in bodies.items():
        write(d, bn_, body)
        for tn, t in templates.items():
            write(d, bn_.replace('.json', '') + '+' + tn, body + '\0' + t)

    d = os.path.join(top, 'inject')
    specs = ['nan@layer=3,op=ffn_down,step=9', 'inf@op=attn_q,layer=0,step>=1,count=64',
             'nan@op=logits,step=5,count=49152', 'zero@op=ffn_act,layer=7,count=1536',
             'scale=1e4@op=attn_resid,layer=12,step=3', 'noise=0.05@op=attn_output,count=576',
             'longctx@pos>=200,op=attn_k,scale=1.5', 'kvcorrupt@layer=2,pos=5', 'kvcorrupt@layer=0,pos=0,value=inf',
             'bitflip:tensor=blk.0.ffn_down.weight,index=7,bit=30', 'crash@step=3', 'nan',
             'nan@model=draft,layer=1,op=ffn_gate,index=5', '-inf@step=2,op=output_norm,index=0']
    for i, s in enumerate(specs):
        write(d, 'spec%02d' % i, s)
    write(d, 'all', '\n'.join(specs))

    d = os.path.join(top, 'tokenizer')
    for sel, vf in enumerate(['llama2c', 'ggml-vocab-llama-spm.gguf', 'ggml-vocab-gpt-2.gguf',
                              'ggml-vocab-falcon.gguf', 'ggml-vocab-deepseek-coder.gguf']):
        inp = os.path.join(models, 'gguf-vocab', (vf if vf != 'llama2c' else 'ggml-vocab-llama-spm.gguf') + '.inp')
        cases = [c.strip('\n') for c in open(inp, encoding='utf-8').read().split('__ggml_vocab_test__')]
        cases = [c for c in cases if c][:12]
        for i, c in enumerate(cases):
            write(d, '%d-%02d' % (sel, i), bytes([sel]) + c.encode())
        write(d, '%d-special' % sel, bytes([sel | 0x30]) + '<s>Hello<|endoftext|> <|im_start|>'.encode())

    d = os.path.join(top, 'trace')
    os.makedirs(d, exist_ok=True)
    base = ['--model', stories, '--tokenizer', tok512, '--prompt', 'Once']
    small_trace(bt, os.path.join(d, 'clean.db'), base + ['-n', '2'])
    small_trace(bt, os.path.join(d, 'collapse.db'), base + ['-n', '3', '--inject', 'nan@step=1,layer=2,op=ffn_gate,index=5'])
    small_trace(bt, os.path.join(d, 'spec.db'), base + ['-n', '3', '--spec-k', '2', '--draft-self', '2'])
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, 's.db')
        subprocess.run([sys.executable, 'tests/data-gen/make_spec_trace.py', p, '--k', '2', '--tokens', '3',
                        '--inject', 'target:3:1:ffn_gate', '--schema', 'traces/schema.sql'], check=True, stdout=subprocess.DEVNULL)
        shrink(p, os.path.join(d, 'spec-synthetic.db'))
    reply_seeds(top)
    numerics_seeds(top)


def reply_seeds(top):
    """fuzz_reply: status byte, header lines, NUL, body (what a server sends probe/canary/ctxwalk)."""
    d = os.path.join(top, 'reply')
    hdr = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-request-id: req-0001\r\n\r\n'
    bodies = {
        'completion': (0, b'{"choices":[{"text":"The capital of France is Paris.","finish_reason":"stop"}]}'),
        'chat': (0, b'{"choices":[{"message":{"role":"assistant","content":"four"},"finish_reason":"stop"}]}'),
        'ids-wall': (0, b'{"choices":[{"text":"!!!!!!!!!!!!","finish_reason":"length"}],'
                        b'"bangtrace":{"completion_ids":[0,0,0,0,0,0,0,0,0,0,0,0],"n_vocab":512}}'),
        'ids-oov': (0, b'{"choices":[{"text":"a","finish_reason":"invalid_token"}],"bangtrace":{"completion_ids":[3,600],"n_vocab":512}}'),
        'loop': (0, b'{"choices":[{"text":"the cat sat. the cat sat. the cat sat. the cat sat. the cat sat.","finish_reason":"length"}]}'),
        'past-stop': (0, b'{"choices":[{"text":"yes\\nUser: and then","finish_reason":"stop"}]}'),
        'error': (242, b'{"error":{"message":"model not found","type":"invalid_request_error"}}'),
        'not-completion': (0, b'{"object":"list","data":[]}'),
    }
    for name, (st, body) in bodies.items():
        write(d, name, bytes([st]) + hdr + b'\0' + body)
    write(d, 'no-headers', bytes([0]) + b'{"choices":[{"text":"   ","finish_reason":"stop"}]}')


def numerics_seeds(top):
    """fuzz_numerics: SPEC, NUL, f32 values."""
    d = os.path.join(top, 'numerics')
    vals = struct.pack('<40f', *([1.0, 10000.0, 65504.0, 65520.0, -1e-8, 3.14159, -2.5, 1e38, float('inf'), float('nan')] * 4))
    for i, spec in enumerate(['f32', 'f16', 'bf16', 'llama.cpp-cpu', 'llama.cpp-cpu-nofa', 'llama.cpp-cuda-f16',
                              'vllm-bf16', 'act=f16,kv=q8_0', 'llama.cpp-cpu,kv=bf16,softmax=f16', 'norm=ggml,rope=ggml',
                              'kv=f16,attn=ggml-mm']):
        write(d, '%02d' % i, spec.encode() + b'\0' + vals)
    write(d, 'bad', b'act=f16,,kv=f8\0')


if __name__ == '__main__':
    main()
