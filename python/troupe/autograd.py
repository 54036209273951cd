"""mx.autograd: recording scopes and backward passes over troupe's tape (MXNet 1.x's mxnet.autograd)."""
from contextlib import contextmanager

from . import _core


def set_recording(is_recording):
    """Sets whether the thread records; returns the previous state."""
    return _core.set_recording(bool(is_recording))


def set_training(train_mode):
    """Sets the thread's mode (training: Dropout drops, BatchNorm uses batch statistics); returns the previous."""
    return _core.set_training(bool(train_mode))


def is_recording():
    return _core.is_recording()


def is_training():
    return _core.is_training()


@contextmanager
def _scope(recording, train_mode):
    old_rec = _core.set_recording(recording) if recording is not None else None
    old_train = _core.set_training(train_mode) if train_mode is not None else None
    try:
        yield
    finally:
        if recording is not None:
            _core.set_recording(old_rec)
        if train_mode is not None:
            _core.set_training(old_train)


def record(train_mode=True):
    """Records the operations in the block for backward (training mode unless train_mode=False)."""
    return _scope(True, train_mode)


def pause(train_mode=False):
    """Stops recording in the block."""
    return _scope(False, train_mode)


def train_mode():
    return _scope(None, True)


def predict_mode():
    return _scope(None, False)


def _handles(arrays):
    from .ndarray import NDArray
    if isinstance(arrays, NDArray):
        arrays = [arrays]
    return [a.handle for a in arrays]


def backward(heads, head_grads=None, retain_graph=False, train_mode=True):
    """Computes the gradients of heads with respect to the arrays they were recorded from (attach_grad)."""
    _core.backward(_handles(heads), [] if head_grads is None else _handles(head_grads), bool(retain_graph),
                   bool(train_mode))


def grad(heads, variables, head_grads=None, retain_graph=None, create_graph=False, train_mode=True):
    """The gradients of heads with respect to variables, as new arrays (their grad buffers are not touched)."""
    from .ndarray import NDArray, _wrap
    single = isinstance(variables, NDArray)
    if retain_graph is None:
        retain_graph = create_graph
    res = _core.grad(_handles(heads), _handles(variables), [] if head_grads is None else _handles(head_grads),
                     bool(retain_graph), bool(create_graph), bool(train_mode))
    res = [_wrap(h) for h in res]
    return res[0] if single else res


def mark_variables(variables, gradients, grad_reqs="write"):
    """Makes variables[i] a variable whose gradient goes to gradients[i]."""
    from .ndarray import NDArray
    if isinstance(variables, NDArray):
        variables, gradients = [variables], [gradients]
    reqs = [grad_reqs] * len(variables) if isinstance(grad_reqs, str) else list(grad_reqs)
    handles = _core.mark_variables(_handles(variables), _handles(gradients), reqs)
    for v, h in zip(variables, handles):
        v.handle = h


class _FunctionImpl(_core.FunctionBase):
    """The native side of a Function call: converts handles to NDArrays and back."""

    def __init__(self, owner):
        super().__init__()
        self._owner = owner

    def forward(self, inputs):
        from .ndarray import NDArray, _wrap
        with pause():
            outs = self._owner.forward(*[_wrap(h) for h in inputs])
        outs = [outs] if isinstance(outs, NDArray) else list(outs)
        self._owner._num_outputs = len(outs)
        return [o.handle for o in outs]

    def backward(self, out_grads):
        from .ndarray import NDArray, _wrap
        with pause():
            grads = self._owner.backward(*[_wrap(h) for h in out_grads])
        grads = [grads] if isinstance(grads, NDArray) else list(grads)
        return [g.handle if g is not None else _core.none_array() for g in grads]


class Function:
    """A differentiable function written in Python (MXNet's autograd.Function): forward(*inputs) computes the
    outputs from NDArrays, backward(*output_grads) the gradients of the inputs. Called while recording, the call is
    one node of the graph. save_for_backward keeps arrays for backward (saved_tensors)."""

    def __init__(self):
        self.saved_tensors = ()
        self._num_outputs = 0

    def save_for_backward(self, *args):
        self.saved_tensors = args

    def forward(self, *inputs):
        raise NotImplementedError

    def backward(self, *output_grads):
        raise NotImplementedError

    def __call__(self, *inputs):
        from .ndarray import _wrap
        outs = [_wrap(h) for h in _core.apply_function(_FunctionImpl(self), [x.handle for x in inputs])]
        return outs[0] if len(outs) == 1 else tuple(outs)


__all__ = ["Function", "record", "pause", "train_mode", "predict_mode", "is_recording", "is_training", "set_recording",
           "set_training", "backward", "grad", "mark_variables"]
