#!/usr/bin/env python3
"""png_pixels.py - read back a PNG bangtrace wrote, with zlib and struct only
(no PIL): tests/report_png.sh checks sizes and pixels with it.

  png_pixels.py FILE info            width height, then every tEXt key=value
  png_pixels.py FILE px X Y ...      the RGB of each pixel as rrggbb
  png_pixels.py FILE count RRGGBB X0 Y0 X1 Y1
                                     pixels of that colour in [X0,X1) x [Y0,Y1)

Only what libpng writes for an 8-bit RGB image (colour type 2, no
interlace) is decoded; anything else is an error (exit 2)."""
import struct
import sys
import zlib


def read(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG signature")
    pos, idat, text, ihdr = 8, b"", {}, None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if zlib.crc32(kind + body) & 0xffffffff != crc:
            raise ValueError("bad CRC in chunk %r" % kind)
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"tEXt":
            k, _, v = body.partition(b"\0")
            text[k.decode("latin-1")] = v.decode("latin-1")
        elif kind == b"IEND":
            break
        pos += 12 + n
    if not ihdr:
        raise ValueError("no IHDR")
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype != 2 or interlace != 0:
        raise ValueError("not 8-bit RGB without interlace (depth %d, colour type %d)" % (depth, ctype))
    raw = zlib.decompress(idat)
    stride, bpp = w * 3, 3
    rows, prev, off = [], bytearray(stride), 0
    for _ in range(h):
        f = raw[off]
        line = bytearray(raw[off + 1:off + 1 + stride])
        off += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xff
            elif f == 2:
                line[i] = (line[i] + b) & 0xff
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xff
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pr) & 0xff
            elif f != 0:
                raise ValueError("unknown filter %d" % f)
        rows.append(line)
        prev = line
    return w, h, rows, text


def px(rows, x, y):
    r = rows[y]
    return "%02x%02x%02x" % (r[3 * x], r[3 * x + 1], r[3 * x + 2])


def main(argv):
    try:
        w, h, rows, text = read(argv[1])
    except (OSError, ValueError, zlib.error, struct.error, IndexError) as e:
        sys.stderr.write("png_pixels.py: %s: %s\n" % (argv[1], e))
        return 2
    if argv[2] == "info":
        print(w, h)
        for k, v in text.items():
            print("%s=%s" % (k, v))
    elif argv[2] == "px":
        a = [int(v) for v in argv[3:]]
        for i in range(0, len(a), 2):
            if not (0 <= a[i] < w and 0 <= a[i + 1] < h):
                sys.stderr.write("png_pixels.py: (%d, %d) is outside %dx%d\n" % (a[i], a[i + 1], w, h))
                return 2
            print(px(rows, a[i], a[i + 1]))
    elif argv[2] == "count":
        want = argv[3].lower()
        x0, y0, x1, y1 = (int(v) for v in argv[4:8])
        print(sum(1 for y in range(max(0, y0), min(h, y1)) for x in range(max(0, x0), min(w, x1)) if px(rows, x, y) == want))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
