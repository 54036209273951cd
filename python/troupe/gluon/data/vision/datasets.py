"""MNIST-format datasets from local files (nothing is downloaded)."""
import gzip
import os
import struct

import numpy as np

from ..dataset import Dataset


class _IdxDataset(Dataset):
    _default_roots = ()
    _name = ""

    def __init__(self, root=None, train=True, transform=None):
        roots = [os.path.expanduser(root)] if root else list(self._default_roots)
        prefix = "train" if train else "t10k"
        for r in roots:
            img = self._find(r, prefix + "-images-idx3-ubyte")
            lbl = self._find(r, prefix + "-labels-idx1-ubyte")
            if img and lbl:
                break
        else:
            raise FileNotFoundError(
                "%s: no %s-images-idx3-ubyte[.gz] and labels in %s (troupe downloads nothing: put the files there, "
                "or install Debian's dataset-fashion-mnist for FashionMNIST)" % (self._name, prefix, ", ".join(roots)))
        self._data = self._read(img, 16).reshape(-1, 28, 28, 1)
        self._label = self._read(lbl, 8).astype(np.int32)
        self._transform = transform

    @staticmethod
    def _find(root, base):
        for name in (base, base + ".gz"):
            path = os.path.join(root, name)
            if os.path.exists(path):
                return path
        return None

    @staticmethod
    def _read(path, header):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read()
        return np.frombuffer(raw, dtype=np.uint8, offset=header)

    def __len__(self):
        return len(self._label)

    def __getitem__(self, idx):
        from ....ndarray import array
        x = array(self._data[idx], dtype=np.uint8)
        y = self._label[idx]
        if self._transform is not None:
            return self._transform(x, y)
        return x, y


class MNIST(_IdxDataset):
    _default_roots = (os.path.expanduser("~/.mxnet/datasets/mnist"), "/usr/share/datasets/mnist")
    _name = "MNIST"


class FashionMNIST(_IdxDataset):
    _default_roots = ("/usr/share/datasets/fashion-mnist", os.path.expanduser("~/.mxnet/datasets/fashion-mnist"))
    _name = "FashionMNIST"
