"""Writes the fixtures of train/data's test of CIFAR-10's Python version
(the batches torchvision.datasets.CIFAR10 downloads and reads, in
cifar-10-batches-py/): two training batches and a test batch of a few
images each, in three forms of pickle —

  py2/   protocol 2 as Python 2's cPickle wrote the real dataset's files
         (keys and the pixel array as byte strings: SHORT_BINSTRING,
         BINSTRING), assembled here opcode by opcode;
  py3p2/ pickle.dump(batch, f, protocol=2) from Python 3 (the pixel
         array's bytes through _codecs.encode);
  py3p4/ pickle.dump(batch, f, protocol=4) from Python 3 (BINBYTES,
         STACK_GLOBAL, MEMOIZE, FRAME).

Every file is read back as torchvision reads it (pickle.load(f,
encoding="latin1")) and compared with what was meant. Image i of batch b
has label (3*b + i) % 10 and pixel j (of 3072: the red plane, then
green, then blue) (b*31 + i*7 + j*13) % 256 — the Go test computes the
same.

    /usr/bin/python3 train/data/testdata/gen_cifar_python.py
"""
import os
import pickle
import struct

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cifar-python")
IMAGES = 3  # per batch
BATCHES = [("data_batch_1", 0), ("data_batch_2", 1), ("test_batch", 2)]


def batch(b):
    data = np.array([[(b * 31 + i * 7 + j * 13) % 256 for j in range(3072)] for i in range(IMAGES)], dtype=np.uint8)
    labels = [(3 * b + i) % 10 for i in range(IMAGES)]
    return data, labels


def short_binstring(s):
    return b"U" + bytes([len(s)]) + s


def binint(n):
    """The shortest of cPickle's non-negative integer opcodes for n."""
    if n < 256:
        return b"K" + bytes([n])
    if n < 65536:
        return b"M" + struct.pack("<H", n)
    return b"J" + struct.pack("<i", n)


def py2_pickle(name, data, labels):
    """The opcodes cPickle (protocol 2) wrote for the dataset's batches."""
    out = bytearray(b"\x80\x02}q\x01(")
    out += short_binstring(b"data") + b"q\x02"
    out += b"cnumpy.core.multiarray\n_reconstruct\nq\x03cnumpy\nndarray\nq\x04K\x00\x85" + short_binstring(b"b") + b"\x87Rq\x05("
    out += b"K\x01" + binint(len(data)) + binint(3072) + b"\x86"
    out += b"cnumpy\ndtype\nq\x06" + short_binstring(b"u1") + b"K\x00K\x01\x87Rq\x07("
    out += b"K\x03" + short_binstring(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
    raw = data.tobytes()
    out += b"\x89T" + struct.pack("<I", len(raw)) + raw + b"tb"
    out += short_binstring(b"labels") + b"q\x08]q\t(" + b"".join(b"K" + bytes([l]) for l in labels) + b"e"
    out += short_binstring(b"batch_label") + b"q\n" + short_binstring(name.encode())
    out += short_binstring(b"filenames") + b"q\x0b]q\x0c(" + b"".join(short_binstring(b"img_%d.png" % i) for i in range(len(data))) + b"e"
    out += b"u."
    return bytes(out)


def main():
    for form in ("py2", "py3p2", "py3p4"):
        os.makedirs(os.path.join(OUT, form), exist_ok=True)
        for name, b in BATCHES:
            data, labels = batch(b)
            if form == "py2":
                raw = py2_pickle(name, data, labels)
            else:
                d = {"batch_label": name, "labels": labels, "data": data,
                     "filenames": ["img_%d.png" % i for i in range(IMAGES)]}
                raw = pickle.dumps(d, protocol=2 if form == "py3p2" else 4)
            path = os.path.join(OUT, form, name)
            with open(path, "wb") as f:
                f.write(raw)
            with open(path, "rb") as f:  # as torchvision's CIFAR10 reads it
                entry = pickle.load(f, encoding="latin1")
            assert entry["labels"] == labels, (path, entry["labels"])
            assert np.array_equal(np.asarray(entry["data"]).reshape(IMAGES, 3072), data), path
            print(path, len(raw), "bytes")


if __name__ == "__main__":
    main()
