"""DataLoader: batches of a dataset as NDArrays, prepared ahead by worker threads."""
from concurrent.futures import ThreadPoolExecutor
import collections

import numpy as np

from .sampler import SequentialSampler, RandomSampler, BatchSampler


def default_batchify_fn(data):
    """Stacks samples: arrays into one NDArray with a batch axis, tuples field by field."""
    from ...ndarray import NDArray, array
    first = data[0]
    if isinstance(first, NDArray):
        return array(np.stack([d.asnumpy() for d in data]), dtype=first.dtype)
    if isinstance(first, tuple):
        return [default_batchify_fn(list(field)) for field in zip(*data)]
    arr = np.asarray(data)
    return array(arr, dtype=arr.dtype if arr.dtype != np.float64 else np.float32)


class DataLoader:
    """Loads a dataset in batches (MXNet's gluon.data.DataLoader). num_workers > 0: that many threads prepare the
    next batches (prefetch of 2 per worker) while the training loop runs."""

    def __init__(self, dataset, batch_size=None, shuffle=False, sampler=None, last_batch=None, batch_sampler=None,
                 batchify_fn=None, num_workers=0, pin_memory=False, pin_device_id=0, prefetch=None,
                 thread_pool=False, timeout=120):
        self._dataset = dataset
        if batch_sampler is None:
            if batch_size is None:
                raise ValueError("batch_size must be specified unless batch_sampler is specified")
            if sampler is None:
                sampler = RandomSampler(len(dataset)) if shuffle else SequentialSampler(len(dataset))
            elif shuffle:
                raise ValueError("shuffle must not be specified if sampler is specified")
            batch_sampler = BatchSampler(sampler, batch_size, last_batch or "keep")
        elif batch_size is not None or shuffle or sampler is not None or last_batch is not None:
            raise ValueError("batch_size, shuffle, sampler and last_batch must not be specified if batch_sampler is "
                             "specified.")
        self._batch_sampler = batch_sampler
        self._batchify = batchify_fn or default_batchify_fn
        self._num_workers = max(0, int(num_workers))
        self._prefetch = max(0, int(prefetch if prefetch is not None else 2 * self._num_workers))

    def _batch(self, indices):
        return self._batchify([self._dataset[i] for i in indices])

    def __iter__(self):
        if self._num_workers == 0:
            for indices in self._batch_sampler:
                yield self._batch(indices)
            return
        with ThreadPoolExecutor(self._num_workers) as pool:
            pending = collections.deque()
            try:
                for indices in self._batch_sampler:
                    pending.append(pool.submit(self._batch, indices))
                    if len(pending) > self._prefetch:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                # Interrupted (Ctrl-C) or abandoned: the batches not started are dropped, not waited for.
                for f in pending:
                    f.cancel()

    def __len__(self):
        return len(self._batch_sampler)
