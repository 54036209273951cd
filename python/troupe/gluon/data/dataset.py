"""Datasets: indexable collections of samples."""


class Dataset:
    def __getitem__(self, idx):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError

    def transform(self, fn, lazy=True):
        return _LazyTransformDataset(self, fn)

    def transform_first(self, fn, lazy=True):
        return self.transform(lambda x, *rest: (fn(x),) + rest if rest else fn(x), lazy)


class _LazyTransformDataset(Dataset):
    def __init__(self, data, fn):
        self._data, self._fn = data, fn

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        item = self._data[idx]
        return self._fn(*item) if isinstance(item, tuple) else self._fn(item)


class SimpleDataset(Dataset):
    def __init__(self, data):
        self._data = data

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        return self._data[idx]


class ArrayDataset(Dataset):
    """Samples zipped from arrays of the same length (NDArrays, NumPy arrays or lists)."""

    def __init__(self, *args):
        if not args:
            raise ValueError("Needs at least 1 arrays")
        self._length = len(args[0])
        for a in args:
            if len(a) != self._length:
                raise ValueError("All arrays must have the same length; array[0] has length %d while array[%d] has %d."
                                 % (self._length, args.index(a), len(a)))
        from ...ndarray import NDArray
        self._data = [a.asnumpy() if isinstance(a, NDArray) else a for a in args]

    def __getitem__(self, idx):
        if len(self._data) == 1:
            return self._data[0][idx]
        return tuple(d[idx] for d in self._data)

    def __len__(self):
        return self._length
