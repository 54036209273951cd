"""DataLoader: batches of a dataset as NDArrays, prepared ahead by worker threads."""
import threading

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
        prefetch = _Prefetch(self, list(self._batch_sampler))
        try:
            for i in range(prefetch.size):
                yield prefetch.get(i)
        finally:
            # Done, abandoned or interrupted (Ctrl-C): the workers stop after the batch they are on; nothing
            # waits for them (they are daemon threads).
            prefetch.stop()

    def __len__(self):
        return len(self._batch_sampler)


class _Prefetch:
    """num_workers daemon threads make the batches (in any order, at most `prefetch` ahead of the consumer); get(i)
    hands them out in order. Waits are short and timed, so Ctrl-C reaches the consumer at once, and a stop never
    waits for a worker."""

    def __init__(self, loader, batches):
        self._loader, self._batches = loader, batches
        self.size = len(batches)
        self._limit = max(1, loader._prefetch or loader._num_workers)
        self._cond = threading.Condition()
        self._next = 0        # the next batch a worker takes
        self._consumed = 0    # batches handed out so far
        self._done = {}       # batch -> (ok, value or exception)
        self._stopped = False
        for _ in range(loader._num_workers):
            threading.Thread(target=self._work, daemon=True, name="DataLoader worker").start()

    def _work(self):
        while True:
            with self._cond:
                while not self._stopped and (self._next >= self.size or self._next >= self._consumed + self._limit):
                    self._cond.wait(0.5)
                if self._stopped:
                    return
                i = self._next
                self._next += 1
            try:
                value = (True, self._loader._batch(self._batches[i]))
            except BaseException as e:  # handed to the consumer, raised there
                value = (False, e)
            with self._cond:
                self._done[i] = value
                self._cond.notify_all()

    def get(self, i):
        with self._cond:
            while i not in self._done:
                self._cond.wait(0.1)
            ok, value = self._done.pop(i)
            self._consumed = i + 1
            self._cond.notify_all()
        if not ok:
            raise value
        return value

    def stop(self):
        self._stopped = True  # workers see it within their timed wait even if the lock cannot be had
        if self._cond.acquire(timeout=1.0):
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()
