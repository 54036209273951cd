"""mx.test_utils: the helpers MXNet users' tests call."""
import contextlib
import os

import numpy as np

import troupe as mx  # noqa: F401 (MXNet's test_utils exports mx and np to `from mxnet.test_utils import *`)
from . import ndarray as nd
from .context import Context, current_context


def default_context():
    return current_context()


def set_default_context(ctx):
    Context._default.value = ctx


def _np(a):
    return a.asnumpy() if isinstance(a, nd.NDArray) else np.asarray(a)


def default_rtols():
    return {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-5}


def default_atols():
    return {np.dtype(np.float16): 1e-1, np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-20}


def assert_almost_equal(a, b, rtol=None, atol=None, names=("a", "b"), equal_nan=False, use_broadcast=True,
                        mismatches=(10, 10)):
    a, b = _np(a), _np(b)
    dtype = np.result_type(a.dtype, b.dtype)
    rtol = default_rtols().get(dtype, 1e-5) if rtol is None else rtol
    atol = default_atols().get(dtype, 1e-20) if atol is None else atol
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan,
                               err_msg="%s and %s differ" % names)


def almost_equal(a, b, rtol=None, atol=None, equal_nan=False, use_broadcast=True):
    a, b = _np(a), _np(b)
    return np.allclose(a, b, rtol=1e-5 if rtol is None else rtol, atol=1e-20 if atol is None else atol,
                       equal_nan=equal_nan)


def same(a, b):
    return np.array_equal(_np(a), _np(b))


def assert_exception(f, exception_type, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    raise AssertionError("%s was not raised" % exception_type.__name__)


def rand_shape_nd(num_dim, dim=10):
    return tuple(np.random.randint(1, dim + 1, size=num_dim))


def rand_shape_2d(dim0=10, dim1=10):
    return np.random.randint(1, dim0 + 1), np.random.randint(1, dim1 + 1)


def rand_ndarray(shape, stype="default", density=None, dtype=None, ctx=None, **kwargs):
    if stype != "default":
        raise NotImplementedError("sparse arrays are not available")
    return nd.array(np.random.uniform(-1, 1, shape), ctx=ctx, dtype=dtype or np.float32)


@contextlib.contextmanager
def environment(*args):
    """Sets environment variables for the block (a dict, or name and value), restoring them after."""
    env = args[0] if len(args) == 1 else {args[0]: args[1]}
    old = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _bind(sym, location, aux_states, ctx, grad_req):
    names = sym.list_arguments()
    if isinstance(location, dict):
        location = [location[n] for n in names]
    args = [nd.array(_np(v), ctx=ctx, dtype=_np(v).dtype) for v in location]
    aux = [nd.array(_np(v), ctx=ctx) for v in (aux_states or [])]
    grads = [nd.zeros(a.shape, ctx, a.dtype) for a in args]
    return sym.bind(ctx or current_context(), args, args_grad=grads, grad_req=grad_req, aux_states=aux)


def check_symbolic_forward(sym, location, expected, rtol=1e-4, atol=None, aux_states=None, ctx=None,
                           equal_nan=False, dtype=np.float32):
    exe = _bind(sym, location, aux_states, ctx, "null")
    outputs = exe.forward(is_train=False)
    expected = list(expected.values()) if isinstance(expected, dict) else expected
    for o, e in zip(outputs, expected):
        assert_almost_equal(o, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return outputs


def check_symbolic_backward(sym, location, out_grads, expected, rtol=1e-5, atol=None, aux_states=None,
                            grad_req="write", ctx=None, grad_stypes=None, equal_nan=False, dtype=np.float32):
    exe = _bind(sym, location, aux_states, ctx, grad_req)
    exe.forward(is_train=True)
    heads = [nd.array(_np(g)) for g in (out_grads.values() if isinstance(out_grads, dict) else out_grads)]
    exe.backward(heads)
    names = sym.list_arguments()
    expected = expected if isinstance(expected, dict) else dict(zip(names, expected))
    for name, e in expected.items():
        assert_almost_equal(exe.grad_dict[name], e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return {n: exe.grad_dict[n] for n in expected}


def check_numeric_gradient(sym, location, aux_states=None, numeric_eps=1e-3, rtol=1e-2, atol=None,
                           grad_nodes=None, use_forward_train=True, ctx=None, grad_stype_dict=None, dtype=np.float32):
    """Compares the symbol's gradients with central differences of sum(outputs * random projection)."""
    names = sym.list_arguments()
    loc = location if isinstance(location, dict) else dict(zip(names, location))
    loc = {k: _np(v).astype(np.float64) for k, v in loc.items()}
    grad_nodes = grad_nodes or names
    exe = _bind(sym, [loc[n].astype(dtype) for n in names], aux_states, ctx, "write")
    outs = exe.forward(is_train=use_forward_train)
    proj = [np.random.normal(0, 1, o.shape).astype(dtype) for o in outs]
    exe.backward([nd.array(p) for p in proj])
    symbolic = {n: exe.grad_dict[n].asnumpy() for n in grad_nodes}

    def f(values):
        e = _bind(sym, [values[n].astype(dtype) for n in names], aux_states, ctx, "null")
        return sum(float((o.asnumpy().astype(np.float64) * p).sum()) for o, p in zip(e.forward(is_train=use_forward_train),
                                                                                      proj))
    for n in grad_nodes:
        numeric = np.zeros_like(loc[n])
        flat = loc[n].reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + numeric_eps / 2
            fp = f(loc)
            flat[i] = old - numeric_eps / 2
            fm = f(loc)
            flat[i] = old
            numeric.reshape(-1)[i] = (fp - fm) / numeric_eps
        assert_almost_equal(symbolic[n], numeric, rtol=rtol, atol=1e-3 if atol is None else atol,
                            names=("symbolic %s" % n, "numeric %s" % n))


def np_reduce(dat, axis, keepdims, numpy_reduce_func):
    """Reduces over the axes one at a time with a NumPy reduction, keeping the dimensions when asked."""
    axes = [axis] if isinstance(axis, int) else (list(axis) if axis is not None else list(range(dat.ndim)))
    ret = dat
    for i in sorted(axes, reverse=True):
        ret = numpy_reduce_func(ret, axis=i)
    if keepdims:
        shape = list(dat.shape)
        for i in axes:
            shape[i] = 1
        ret = ret.reshape(tuple(shape))
    return ret


def assert_allclose(a, b, rtol=1e-07, atol=0, equal_nan=True):
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol, equal_nan=equal_nan)


def random_arrays(*shapes):
    arrays = [np.array(np.random.randn(), dtype=np.float32) if len(s) == 0 else
              np.random.randn(*s).astype(np.float32) for s in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def random_sample(population, k):
    import random
    return random.sample(population, k)


def list_gpus():
    return []


@contextlib.contextmanager
def discard_stderr():
    """Silences the process's stderr (file descriptor 2) in the block."""
    import sys
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def use_np(func):
    from .util import use_np as _use_np
    return _use_np(func)
