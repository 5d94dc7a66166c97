#!/usr/bin/env python3
"""gguf_drop_key.py SRC DST KEY GGUF_PY_DIR - copy a GGUF without one metadata key
(bad-input tests: a hybrid model missing a hyperparameter). A KEY that names
a tensor drops the tensor; TENSOR:short writes that 1-D tensor one value short."""
import sys
sys.path.insert(0, sys.argv[4])
import gguf
src, dst, drop = sys.argv[1], sys.argv[2], sys.argv[3]
r = gguf.GGUFReader(src)
arch = r.fields["general.architecture"]
arch = bytes(arch.parts[arch.data[0]]).decode()
w = gguf.GGUFWriter(dst, arch)
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture" or name == drop:
        continue
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == gguf.GGUFValueType.STRING:
            v = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
        else:
            v = [f.parts[i].tolist()[0] for i in f.data]
        w.add_key_value(name, v, t, sub)
    elif t == gguf.GGUFValueType.STRING:
        w.add_key_value(name, bytes(f.parts[f.data[0]]).decode(), t)
    else:
        w.add_key_value(name, f.parts[f.data[0]].tolist()[0], t)
short = drop[:-6] if drop.endswith(":short") else None
for ti in r.tensors:
    if ti.name == drop:
        continue
    if ti.name == short:
        w.add_tensor(ti.name, ti.data[:-1].copy(), raw_dtype=ti.tensor_type)
        continue
    w.add_tensor(ti.name, ti.data.reshape([int(x) for x in reversed(ti.shape)]) if ti.data.ndim == 1 and len(ti.shape) > 1 else ti.data, raw_dtype=ti.tensor_type)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
