"""mx.io: data iterators yielding DataBatch (MXNet 1.x's mxnet.io; the Python iterators)."""
from collections import namedtuple, OrderedDict

import numpy as np

from . import ndarray as nd


class DataDesc(namedtuple("DataDesc", ["name", "shape"])):
    """A data or label name with its shape (and dtype, layout)."""

    def __new__(cls, name, shape, dtype=np.float32, layout="NCHW"):
        ret = super().__new__(cls, name, tuple(shape))
        ret.dtype, ret.layout = dtype, layout
        return ret

    def __repr__(self):
        return "DataDesc[%s,%s,%s,%s]" % (self.name, self.shape, np.dtype(self.dtype).name, self.layout)

    @staticmethod
    def get_list(shapes, types):
        types = dict(types) if types is not None else {}
        return [DataDesc(n, s, types.get(n, np.float32)) for n, s in shapes]


class DataBatch:
    """One batch: data and label lists of NDArrays; pad is how many samples at the end are padding."""

    def __init__(self, data, label=None, pad=None, index=None, bucket_key=None, provide_data=None,
                 provide_label=None):
        self.data, self.label, self.pad, self.index = data, label, pad, index
        self.bucket_key, self.provide_data, self.provide_label = bucket_key, provide_data, provide_label

    def __str__(self):
        return "DataBatch: data shapes: %s label shapes: %s" % ([d.shape for d in self.data],
                                                                 [l.shape for l in (self.label or [])])


class DataIter:
    def __init__(self, batch_size=0):
        self.batch_size = batch_size

    def __iter__(self):
        return self

    def reset(self):
        pass

    def __next__(self):
        if self.iter_next():
            return DataBatch(data=self.getdata(), label=self.getlabel(), pad=self.getpad(), index=self.getindex())
        raise StopIteration

    next = __next__

    def iter_next(self):
        raise NotImplementedError

    def getdata(self):
        raise NotImplementedError

    def getlabel(self):
        raise NotImplementedError

    def getindex(self):
        return None

    def getpad(self):
        return 0


def _init_data(data, default_name):
    if data is None:
        return []
    if isinstance(data, (np.ndarray, nd.NDArray, list)) and not (isinstance(data, list) and data and
                                                                  isinstance(data[0], (np.ndarray, nd.NDArray))):
        data = {default_name: data}
    elif isinstance(data, list):
        data = OrderedDict(("_%d_%s" % (i, default_name), d) for i, d in enumerate(data))
    out = []
    for k, v in data.items():
        out.append((k, v.asnumpy() if isinstance(v, nd.NDArray) else np.asarray(v)))
    return out


class NDArrayIter(DataIter):
    """Batches of in-memory arrays (MXNet's NDArrayIter). last_batch_handle: 'pad' (fill from the start and
    report the padding), 'discard' or 'roll_over'."""

    def __init__(self, data, label=None, batch_size=1, shuffle=False, last_batch_handle="pad", data_name="data",
                 label_name="softmax_label"):
        super().__init__(batch_size)
        self.data = _init_data(data, data_name)
        self.label = _init_data(label, label_name)
        self.num_data = self.data[0][1].shape[0]
        for _, a in self.data + self.label:
            if a.shape[0] != self.num_data:
                raise ValueError("data and label must have the same number of samples")
        if last_batch_handle not in ("pad", "discard", "roll_over"):
            raise ValueError("last_batch_handle must be 'pad', 'discard' or 'roll_over'")
        self.shuffle, self.last_batch_handle = shuffle, last_batch_handle
        self.idx = np.arange(self.num_data)
        self._cache = None
        self.reset()

    @property
    def provide_data(self):
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype) for k, v in self.data]

    @property
    def provide_label(self):
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype) for k, v in self.label]

    def hard_reset(self):
        self._cache = None
        self.cursor = -self.batch_size

    def reset(self):
        if self.shuffle:
            np.random.shuffle(self.idx)
        if self.last_batch_handle == "roll_over" and self._cache is not None:
            self.cursor = -self.batch_size - len(self._cache)
        else:
            self.cursor = -self.batch_size

    def iter_next(self):
        self.cursor += self.batch_size
        if self.last_batch_handle == "discard":
            return self.cursor + self.batch_size <= self.num_data
        return self.cursor < self.num_data

    def _take(self, arrays):
        out = []
        for _, a in arrays:
            end = self.cursor + self.batch_size
            if self.cursor < 0:  # rolled over from the previous epoch
                sel = np.concatenate([self._cache, self.idx[:end]])
            elif end <= self.num_data:
                sel = self.idx[self.cursor:end]
            else:
                sel = np.concatenate([self.idx[self.cursor:], self.idx[:end - self.num_data]])
            out.append(nd.array(a[sel], dtype=a.dtype if a.dtype != np.float64 else np.float32))
        return out

    def getdata(self):
        return self._take(self.data)

    def getlabel(self):
        return self._take(self.label)

    def getpad(self):
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            return self.cursor + self.batch_size - self.num_data
        return 0

    def __next__(self):
        if not self.iter_next():
            raise StopIteration
        if self.last_batch_handle == "roll_over" and self.cursor + self.batch_size > self.num_data:
            self._cache = self.idx[self.cursor:]
            raise StopIteration
        batch = DataBatch(self.getdata(), self.getlabel(), self.getpad(), None)
        if self.cursor < 0:
            self._cache = None
        return batch


class ResizeIter(DataIter):
    """An iterator cut or repeated to `size` batches per epoch."""

    def __init__(self, data_iter, size, reset_internal=True):
        super().__init__(data_iter.batch_size)
        self.data_iter, self.size, self.reset_internal = data_iter, size, reset_internal
        self.cur = 0
        self.provide_data, self.provide_label = data_iter.provide_data, data_iter.provide_label

    def reset(self):
        self.cur = 0
        if self.reset_internal:
            self.data_iter.reset()

    def __next__(self):
        if self.cur == self.size:
            raise StopIteration
        try:
            batch = next(self.data_iter)
        except StopIteration:
            self.data_iter.reset()
            batch = next(self.data_iter)
        self.cur += 1
        return batch


class MXDataIter(DataIter):
    """A registered C++ iterator (MNISTIter, CSVIter, ImageRecordIter, ...): batches prepared on a background
    thread. Its data is named 'data' and its label 'softmax_label', as MXNet's."""

    def __init__(self, name, data_name="data", label_name="softmax_label", **kwargs):
        from . import _core
        from .ndarray.register import _param_text
        self._it = _core.DataIterHandle.create(name, [(k, _param_text(v)) for k, v in kwargs.items() if v is not None])
        shapes = self._it.data_shapes()
        super().__init__(shapes[0][0] if shapes and shapes[0] else 0)
        self._names = (data_name, label_name)
        self._batch = None

    @property
    def provide_data(self):
        return [DataDesc(self._names[0] if i == 0 else "%s%d" % (self._names[0], i), tuple(s))
                for i, s in enumerate(self._it.data_shapes())]

    @property
    def provide_label(self):
        return [DataDesc(self._names[1] if i == 0 else "%s%d" % (self._names[1], i), tuple(s))
                for i, s in enumerate(self._it.label_shapes())]

    def reset(self):
        self._it.before_first()

    def iter_next(self):
        if not self._it.next():
            return False
        data, label, pad, index = self._it.value()
        self._batch = DataBatch([nd._wrap(h) for h in data], [nd._wrap(h) for h in label], pad, index)
        return True

    def __next__(self):
        if not self.iter_next():
            raise StopIteration
        return self._batch

    def getdata(self):
        return self._batch.data

    def getlabel(self):
        return self._batch.label

    def getpad(self):
        return self._batch.pad

    def getindex(self):
        return self._batch.index


def _make_iterators(namespace):
    from . import _core
    for name, description, params in _core.data_iters():
        def make(_name=name):
            def create(**kwargs):
                return MXDataIter(_name, **kwargs)
            create.__name__ = _name
            return create
        fn = make()
        fn.__doc__ = description + "\n\n" + "\n".join("%s : %s%s\n    %s" % (p[0], p[1], "" if p[3] else
                                                                            ", default=%s" % p[2], p[4]) for p in params)
        namespace.setdefault(name, fn)


_make_iterators(globals())
