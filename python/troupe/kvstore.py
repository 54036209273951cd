"""mx.kv: a key-value store of arrays in this process ('local' and 'device'), MXNet's KVStore API. Pushed
values of a key are summed; with an optimizer set (or an updater) the sum updates the stored value."""
from . import ndarray as nd, optimizer as opt


class KVStore:
    def __init__(self, kv_type="local"):
        self.type = kv_type
        self._store = {}
        self._updater = None

    @property
    def rank(self):
        return 0

    @property
    def num_workers(self):
        return 1

    def _keys(self, key, value):
        if isinstance(key, (list, tuple)):
            return list(key), list(value)
        return [key], [value]

    def init(self, key, value):
        for k, v in zip(*self._keys(key, value)):
            if k in self._store:
                raise ValueError("duplicate init of key %s" % k)
            v = v[0] if isinstance(v, (list, tuple)) else v
            self._store[k] = v.copy()

    def push(self, key, value, priority=0):
        for k, v in zip(*self._keys(key, value)):
            if k not in self._store:
                raise ValueError("key %s has not been initialized" % k)
            vals = v if isinstance(v, (list, tuple)) else [v]
            total = vals[0].as_in_context(self._store[k].context).copy()
            for x in vals[1:]:
                total += x.as_in_context(total.context)
            if self._updater is not None:
                self._updater(k, total, self._store[k])
            else:
                total.copyto(self._store[k])

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        for k, o in zip(*self._keys(key, out)):
            if k not in self._store:
                raise ValueError("key %s has not been initialized" % k)
            for dst in (o if isinstance(o, (list, tuple)) else [o]):
                self._store[k].copyto(dst)

    def pushpull(self, key, value, out=None, priority=0):
        self.push(key, value, priority)
        self.pull(key, out if out is not None else value, priority)

    def set_optimizer(self, optimizer):
        self._updater = opt.get_updater(optimizer)

    def _set_updater(self, updater):
        self._updater = updater

    def barrier(self):
        pass

    def save_optimizer_states(self, fname, dump_optimizer=False):
        raise NotImplementedError("save_optimizer_states is not available yet")


def create(name="local"):
    """A KVStore by name: 'local' and 'device' (one process); the dist types are not available from Python yet."""
    if not isinstance(name, str):
        raise TypeError("name must be a string")
    if name in ("local", "device", "local_allreduce_cpu", "local_allreduce_device"):
        return KVStore(name)
    raise ValueError("KVStore type %r is not available from Python yet (local, device)" % name)
