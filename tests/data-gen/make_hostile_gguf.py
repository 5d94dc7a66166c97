#!/usr/bin/env python3
"""make_hostile_gguf.py - a loadable GGUF whose every model-supplied string
tries to drive the terminal, for tests/text_safety.sh.

usage: make_hostile_gguf.py TINY.gguf OUTDIR

writes OUTDIR/hostile_run.gguf (loads and runs), OUTDIR/hostile.gguf (the
same plus a tensor with a hostile name, which inspect lists and the loader
refuses as unused, quoting the name escaped) and OUTDIR/hostile_arch.gguf
(the same with a hostile general.architecture, which no loader accepts: its
error message must quote the name escaped).

TINY.gguf is shared/models/gguf-tiny/llama-2-tiny-random.gguf, re-emitted
with the codec of make_bad_files.py. The strings carry OSC 0 (set the
terminal title), OSC 52 (write the clipboard), CSI sequences, a raw C1 CSI
byte (0x9b), U+009B encoded as UTF-8, a bidi override (U+202E), BEL and
invalid UTF-8: general.name, general.architecture-adjacent keys, the chat
template, an extra metadata key (in its name and its value), an extra tensor
name, and the pieces of every ordinary token (so whatever the random model
generates is hostile). The byte-fallback tokens stay, so any prompt still
tokenizes.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bad_files as gg  # noqa: E402

EVIL = (b'\x1b]0;pwned-title\x07'            # OSC 0: terminal title
        b'\x1b]52;c;cHduZWQ=\x07'            # OSC 52: clipboard
        b'\x1b[2J\x1b[31m'                   # CSI: clear screen, red
        b'\x9b31m'                           # raw C1 CSI (invalid UTF-8)
        b'\xc2\x9b32m'                       # U+009B as UTF-8
        b'\xe2\x80\xae'                      # U+202E bidi override
        b'\xff\xfe')                         # invalid UTF-8


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kvs, tensors = gg.parse(sys.argv[1])
    out = []
    for k, vt, v in kvs:
        if k == 'general.name':
            v = b'evil' + EVIL + b'model'
        elif k == 'tokenizer.ggml.tokens':
            et, items = v
            types = next(tv for kk, tt, tv in kvs if kk == 'tokenizer.ggml.token_type')[1]
            # type 1 = normal token: hostile, but unique
            items = [b'tok%d' % i + EVIL if types[i] == 1 else p for i, p in enumerate(items)]
            v = (et, items)
        out.append([k, vt, v])
    out.append(['tokenizer.chat_template', gg.STR, b'{{ "' + EVIL.replace(b'"', b'') + b'" }}'])
    out.append([b'evil.key' + EVIL, gg.STR, b'value' + EVIL])
    out.append(['evil.array', gg.ARR, (gg.STR, [EVIL, b'two' + EVIL])])
    # hostile_run.gguf: every tensor one the model reads, so it runs (the
    # loader refuses a tensor its architecture does not read);
    # hostile.gguf adds one with a hostile name, for inspect and that error.
    gg.emit(os.path.join(sys.argv[2], 'hostile_run.gguf'), out, tensors)
    extra = dict(next(t for t in tensors if t['name'] == 'output_norm.weight'))
    extra['name'] = b'evil.tensor' + EVIL
    tensors = tensors + [extra]
    gg.emit(os.path.join(sys.argv[2], 'hostile.gguf'), out, tensors)
    arch = [[k, vt, b'\x1b]0;t\x07\x9b' if k == 'general.architecture' else v] for k, vt, v in out]
    gg.emit(os.path.join(sys.argv[2], 'hostile_arch.gguf'), arch, tensors)


if __name__ == '__main__':
    main()
