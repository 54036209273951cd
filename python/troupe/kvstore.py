"""mx.kv: key-value stores of arrays, MXNet's KVStore API: 'local' and 'device' in this process (pushed values of a
key are summed; with an optimizer set, or an updater, the sum updates the stored value), and the dist types, a
worker of a `troupe launch` cluster."""
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


def _optimizer_config(optimizer):
    """A Python optimizer as the C++ stores' configuration (type and MXNet parameter names): what a dist store's
    servers run."""
    common = {"learning_rate": optimizer.lr, "wd": optimizer.wd, "rescale_grad": optimizer.rescale_grad}
    if optimizer.clip_gradient is not None:
        common["clip_gradient"] = optimizer.clip_gradient
    name = type(optimizer).__name__.lower()
    if name in ("sgd", "nag"):
        common["momentum"] = optimizer.momentum
    elif name == "adam":
        common.update(beta1=optimizer.beta1, beta2=optimizer.beta2, epsilon=optimizer.epsilon)
    elif name == "rmsprop":
        common.update(gamma1=optimizer.gamma1, gamma2=optimizer.gamma2, epsilon=optimizer.epsilon,
                      centered=optimizer.centered)
    else:
        raise ValueError("optimizer %s cannot run on a dist store's servers" % type(optimizer).__name__)
    if optimizer.lr_scheduler is not None:
        raise ValueError("a learning-rate scheduler on a dist store's servers is not available from Python yet")
    return name, [(k, repr(v) if isinstance(v, float) else str(v)) for k, v in common.items()]


class DistKVStore:
    """A worker of a distributed store (dist_sync, dist_async, dist_device_sync): the cluster `troupe launch`
    describes in the environment. Pushed values of a key are summed over the workers; with an optimizer set the
    servers apply it. Keys are ints or strings (strings numbered in the order they are initialised, the same
    order on every worker). The store leaves the cluster cleanly at exit (or at close())."""

    def __init__(self, kv_type):
        import atexit
        from . import _core
        self.type = kv_type
        self._h = _core.KVStoreHandle.create(kv_type)
        self._names = {}
        self._closed = False
        atexit.register(self.close)

    @property
    def rank(self):
        return self._h.rank

    @property
    def num_workers(self):
        return self._h.num_workers

    def _ids(self, keys, create=False):
        out = []
        for k in keys:
            if isinstance(k, str):
                if k not in self._names:
                    if not create:
                        raise ValueError("key %s has not been initialized" % k)
                    self._names[k] = len(self._names) + (1 << 30)
                k = self._names[k]
            out.append(int(k))
        return out

    @staticmethod
    def _flat(key, value):
        keys, values = (list(key), list(value)) if isinstance(key, (list, tuple)) else ([key], [value])
        fk, fv = [], []
        for k, v in zip(keys, values):
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                fk.append(k)
                fv.append(x.handle)
        return fk, fv

    def init(self, key, value):
        keys, values = self._flat(key, value)
        self._h.init(self._ids(keys, create=True), values)

    def push(self, key, value, priority=0):
        keys, values = self._flat(key, value)
        self._h.push(self._ids(keys), values, priority)

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        keys, outs = self._flat(key, out)
        self._h.pull(self._ids(keys), outs, priority)

    def pushpull(self, key, value, out=None, priority=0):
        self.push(key, value, priority)
        self.pull(key, out if out is not None else value, priority)

    def set_optimizer(self, optimizer):
        name, params = _optimizer_config(optimizer)
        self._h.set_optimizer(name, params)

    def barrier(self):
        self._h.barrier()

    def close(self):
        if not self._closed:
            self._closed = True
            self._h.finalize()


def create(name="local"):
    """A KVStore by name: 'local' and 'device' in this process; 'dist_sync', 'dist_async', 'dist_device_sync' as a
    worker of the cluster `troupe launch` started."""
    if not isinstance(name, str):
        raise TypeError("name must be a string")
    if name in ("local", "device", "local_allreduce_cpu", "local_allreduce_device"):
        return KVStore(name)
    if name in ("dist_sync", "dist_async", "dist_device_sync", "dist"):
        return DistKVStore("dist_sync" if name == "dist" else name)
    raise ValueError("unknown KVStore type %r (local, device, dist_sync, dist_async, dist_device_sync)" % name)
