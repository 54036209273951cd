"""Devices: mx.cpu(), mx.gpu(i) and the default context (MXNet's mx.context)."""
import threading


class Context:
    """A device: device_type 'cpu' or 'gpu' (or 'cpu_pinned') and its index. Usable as a `with` block that makes
    it the default context of the thread."""

    devtype2str = {1: "cpu", 2: "gpu", 3: "cpu_pinned"}
    devstr2type = {"cpu": 1, "gpu": 2, "cpu_pinned": 3}
    _default = threading.local()

    def __init__(self, device_type, device_id=0):
        if isinstance(device_type, Context):
            device_type, device_id = device_type.device_type, device_type.device_id
        if device_type not in self.devstr2type:
            raise ValueError("unknown device type %r (cpu, gpu, cpu_pinned)" % (device_type,))
        self.device_type = device_type
        self.device_id = int(device_id)
        self._old = None

    @property
    def device_typeid(self):
        return self.devstr2type[self.device_type]

    def __eq__(self, other):
        return isinstance(other, Context) and (self.device_type, self.device_id) == (other.device_type, other.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))

    def __str__(self):
        return "%s(%d)" % (self.device_type, self.device_id)

    __repr__ = __str__

    def __enter__(self):
        self._old = current_context()
        Context._default.value = self
        return self

    def __exit__(self, *exc):
        Context._default.value = self._old


def cpu(device_id=0):
    return Context("cpu", device_id)


def gpu(device_id=0):
    return Context("gpu", device_id)


def current_context():
    """The thread's default context (cpu(0) unless a `with ctx:` block says otherwise)."""
    return getattr(Context._default, "value", None) or Context("cpu", 0)


def _native(ctx):
    """The context as the native core names it ("cpu(0)", "gpu(1)")."""
    return str(ctx if ctx is not None else current_context())


def _from_native(text):
    kind, _, rest = text.partition("(")
    return Context(kind, int(rest.rstrip(")") or 0))


__all__ = ["Context", "cpu", "gpu", "current_context"]
