#!/usr/bin/env python3
"""Writes reference.rec / reference.idx with real Apache MXNet 1.9.1 (dmlc-core's RecordIO writer).

recordio_test.cc rebuilds the same payloads (see ReferencePayloads() there) and checks that troupe's reader
reads this file record by record and through the .idx offsets, and that troupe's writer produces identical
bytes. Regenerate with:

    python3 -m venv /tmp/mxvenv && /tmp/mxvenv/bin/pip install mxnet==1.9.1 "numpy<1.24"
    /tmp/mxvenv/bin/python tests/io/data/make_reference.py

Keep the two payload lists in sync.
"""
import os
import struct

import mxnet as mx

M = struct.pack('<I', 0xced7230a)  # the RecordIO magic as it lies on disk


def payloads():
    big = bytearray((i * 7 + 3) % 251 for i in range(20000))
    big[10000:10004] = M          # aligned magic inside a large payload
    big[15001:15005] = M          # unaligned: kept verbatim
    return [
        b'hello',                             # 0: plain, 3 bytes of padding
        b'',                                  # 1: empty payload
        b'abcd',                              # 2: exactly one word, no padding
        M + b'XYZW12',                        # 3: magic at offset 0
        b'1234' + M + b'5678',                # 4: magic at offset 4
        b'12345678' + M + b'tail5',           # 5: magic at offset 8
        b'x' + M + b'yyy',                    # 6: unaligned magic (offset 1), not split
        b'1234' + M + M + b'end',             # 7: consecutive magics
        b'abcd' + M,                          # 8: magic at the very end
        bytes(big),                           # 9: ~20 KB
        mx.recordio.pack(mx.recordio.IRHeader(0, 3.5, 42, 0), b'\xff\xd8jpeg-ish'),            # 10: flag 0
        mx.recordio.pack(mx.recordio.IRHeader(0, [1.5, -2.0], 7, 0), b'two-label payload'),   # 11: flag 2
    ]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    rec = mx.recordio.MXIndexedRecordIO(os.path.join(here, 'reference.idx'),
                                        os.path.join(here, 'reference.rec'), 'w')
    for i, p in enumerate(payloads()):
        rec.write_idx(100 + i, p)  # keys 100.. so key and position differ
    rec.close()
    # Read back with MXNet itself as a sanity check of the generator.
    rec = mx.recordio.MXIndexedRecordIO(os.path.join(here, 'reference.idx'),
                                        os.path.join(here, 'reference.rec'), 'r')
    for i, p in enumerate(payloads()):
        assert rec.read_idx(100 + i) == p, i
    rec.close()
    print('mxnet', mx.__version__, 'wrote', os.path.getsize(os.path.join(here, 'reference.rec')), 'bytes')


if __name__ == '__main__':
    main()
