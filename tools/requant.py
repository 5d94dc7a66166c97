#!/usr/bin/env python3
"""requant.py SRC.gguf DST.gguf TYPE [--force] - rewrite a llama GGUF with every 2-D
weight in TYPE (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4; gguf.quants
cannot quantize k-quants: use llama-quantize, as tools/bench-compare.sh
does), keeping metadata and 1-D tensors. For benchmarks of other weight types on the same architecture
(e.g. the SmolLM2-135M F32 and Q8_0 figures in the README). Needs the
`gguf` and `numpy` PyPI packages."""
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize, quantize

TYPES = {"f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16,
         "bf16": GGMLQuantizationType.BF16,
         "q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0,
         "q4_1": GGMLQuantizationType.Q4_1, "q5_0": GGMLQuantizationType.Q5_0,
         "q5_1": GGMLQuantizationType.Q5_1, "mxfp4": GGMLQuantizationType.MXFP4}


def main():
    args = [a for a in sys.argv[1:] if a != "--force"]
    force = len(args) != len(sys.argv) - 1
    if len(args) != 3 or args[2] not in TYPES:
        sys.exit(__doc__)
    src, dst, tname = args[0], args[1], TYPES[args[2]]
    if os.path.lexists(dst) and (not force or not os.path.isfile(dst) or os.path.samefile(src, dst)):
        sys.exit("requant.py: %s exists: not replaced (--force replaces a regular file other than the source)" % dst)
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    tmp = dst + ".part"
    w = GGUFWriter(tmp, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = f.types[0]
        if vt == GGUFValueType.ARRAY:
            w.add_array(name, f.contents())
        elif vt == GGUFValueType.STRING:
            w.add_string(name, f.contents())
        else:
            w.add_key_value(name, f.contents(), vt)
    for t in r.tensors:
        data = dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
        if data.ndim >= 2:
            if tname == GGMLQuantizationType.F32:
                w.add_tensor(t.name, data.astype(np.float32))
            elif tname == GGMLQuantizationType.F16:
                w.add_tensor(t.name, data.astype(np.float16))
            else:
                q = quantize(data.astype(np.float32), tname)
                w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=tname)
        else:
            w.add_tensor(t.name, data.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, dst)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:      # one line, and no partial output left behind
        if len(sys.argv) > 2 and os.path.isfile(sys.argv[2] + ".part"):
            os.remove(sys.argv[2] + ".part")
        sys.exit("requant.py: %s" % e)
