"""Generates autograd.params: gradients MXNet 1.9.1's mx.autograd computes on fixed inputs.

First-order cases record a small computation of registered operators with mx.autograd.record() (train mode),
call backward with a head gradient (or none: ones) and save, under '<case>:<name>', the inputs (in:<name>), the
head gradient (head) and every variable's gradient (grad:<name>); one of them is a custom autograd.Function.

Second-order cases (the ones made by second()) save the inputs, the head gradients of the first pass (head:<name>
for each output) and of the second (head2:<name>, one per variable), the first-order gradients mx.autograd.grad
returns (first:<name>) and the variables' gradients after a backward pass through those (grad:<name>): the second
derivative contracted with both head gradients. MXNet 1.9.1 has second-order gradients for the elementwise
unary operators and elemwise_add, _plus_scalar, _copy, but none for dot, elemwise_mul or Activation (their
backward operators register no gradient), and its FullyConnected one leaves out the output gradient's own
dependence on the inputs. So the cases through dot and elemwise_mul write their first-order gradient out with
MXNet operators (checked against mx.autograd.grad) and differentiate that with mx.autograd. Every second-order
case is checked here, in float64, against central differences of MXNet's first-order gradient.
autograd_test.cc rebuilds each case with troupe's autograd (op/autograd.h) and compares.

Run with MXNet 1.9.1 (pip install mxnet==1.9.1 "numpy<1.24"):  python make_autograd.py
"""
import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.RandomState(11)
saved = {}


def var(case, name, shape, req='write', lo=-1.0, hi=1.0):
    a = mx.nd.array(rng.uniform(lo, hi, shape).astype(np.float32))
    saved['%s:in:%s' % (case, name)] = a.copy()
    a.attach_grad(grad_req=req)
    return a


def head(case, shape):
    h = mx.nd.array(rng.uniform(-1, 1, shape).astype(np.float32))
    saved[case + ':head'] = h
    return h


def grads(case, **arrays):
    for name, a in arrays.items():
        saved['%s:grad:%s' % (case, name)] = a.grad.copy()


# FullyConnected -> relu, every input a variable, a head gradient.
x, w, b = var('fc_relu', 'x', (4, 6)), var('fc_relu', 'w', (3, 6)), var('fc_relu', 'b', (3,))
with mx.autograd.record():
    y = mx.nd.Activation(mx.nd.FullyConnected(x, w, b, num_hidden=3), act_type='relu')
y.backward(head('fc_relu', (4, 3)))
grads('fc_relu', x=x, w=w, b=b)

# An array used twice: x * x + x (the gradients of both uses are summed); no head gradient (ones).
x = var('used_twice', 'x', (5,))
with mx.autograd.record():
    y = mx.nd.elemwise_add(mx.nd.elemwise_mul(x, x), x)
y.backward()
grads('used_twice', x=x)

# grad_req add: two backward passes of x * c accumulate; c is a constant (no gradient).
x = var('grad_add', 'x', (3, 4), req='add')
c = mx.nd.array(rng.uniform(-1, 1, (3, 4)).astype(np.float32))
saved['grad_add:in:c'] = c.copy()
hg = head('grad_add', (3, 4))
for _ in range(2):
    with mx.autograd.record():
        y = mx.nd.elemwise_mul(x, c)
    y.backward(hg)
grads('grad_add', x=x)

# BatchNorm in training mode (batch statistics; hidden mean and variance outputs), then tanh.
x = var('batch_norm', 'x', (4, 3, 2, 2))
gamma, beta = var('batch_norm', 'gamma', (3,), lo=0.5, hi=1.5), var('batch_norm', 'beta', (3,))
mm, mv = mx.nd.zeros(3), mx.nd.ones(3)
with mx.autograd.record():
    y = mx.nd.tanh(mx.nd.BatchNorm(x, gamma, beta, mm, mv, fix_gamma=False))
y.backward(head('batch_norm', (4, 3, 2, 2)))
grads('batch_norm', x=x, gamma=gamma, beta=beta)

# Convolution -> Pooling -> softmax, the data not a variable (no gradient asked for it).
d = mx.nd.array(rng.uniform(-1, 1, (2, 3, 6, 6)).astype(np.float32))
saved['conv_pool:in:data'] = d.copy()
w, b = var('conv_pool', 'w', (4, 3, 3, 3)), var('conv_pool', 'b', (4,))
with mx.autograd.record():
    c = mx.nd.Convolution(d, w, b, kernel=(3, 3), num_filter=4, pad=(1, 1))
    p = mx.nd.Pooling(c, kernel=(2, 2), stride=(2, 2), pool_type='max')
    y = mx.nd.softmax(mx.nd.reshape(p, shape=(2, -1)), axis=1)
y.backward(head('conv_pool', (2, 36)))
grads('conv_pool', w=w, b=b)

# A custom Function (the sigmoid of MXNet's autograd.Function documentation), its output times a variable.
class Sigmoid(mx.autograd.Function):
    def forward(self, x):
        y = 1 / (1 + mx.nd.exp(-x))
        self.save_for_backward(y)
        return y

    def backward(self, dy):
        y, = self.saved_tensors
        return dy * y * (1 - y)


x, w = var('function', 'x', (3, 4)), var('function', 'w', (3, 4))
with mx.autograd.record():
    y = mx.nd.elemwise_mul(Sigmoid()(x), w)
y.backward(head('function', (3, 4)))
grads('function', x=x, w=w)


# ---- Second order ----
nd = mx.nd


def second(case, f, shapes, written=None, dtype=np.float32, heads=True, lo=-1.0, hi=1.0):
    """f(*vars) -> one output. written(vars, h) -> the first-order gradients as MXNet operators, for operators
    whose backward MXNet cannot differentiate; None: mx.autograd.grad(create_graph=True) itself."""
    names = sorted(shapes)
    vals = {n: rng.uniform(lo, hi, shapes[n]).astype(dtype) for n in names}
    for n in names:
        saved['%s:in:%s' % (case, n)] = mx.nd.array(vals[n], dtype=dtype)
    xs = [mx.nd.array(vals[n], dtype=dtype) for n in names]
    for x in xs:
        x.attach_grad()
    with mx.autograd.record():
        y = f(*xs)
    h = mx.nd.array(rng.uniform(-1, 1, y.shape).astype(dtype), dtype=dtype) if heads else None
    h2 = [mx.nd.array(rng.uniform(-1, 1, x.shape).astype(dtype), dtype=dtype) if heads else None for x in xs]
    if heads:
        saved[case + ':head'] = h.copy()
        for n, g in zip(names, h2):
            saved['%s:head2:%s' % (case, n)] = g.copy()
    with mx.autograd.record():
        y = f(*xs)
        if written is None:
            first = mx.autograd.grad(y, xs, head_grads=h, create_graph=True, retain_graph=True)
        else:
            native = mx.autograd.grad(y, xs, head_grads=h, retain_graph=True)
            first = written(xs, h if heads else mx.nd.ones(y.shape, dtype=dtype))
            for a, b in zip(native, first):
                assert np.allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-6), case
    mx.autograd.backward(first, None if not heads else h2)
    for n, x, g in zip(names, xs, first):
        saved['%s:first:%s' % (case, n)] = g.copy()
        saved['%s:grad:%s' % (case, n)] = x.grad.copy()

    # Central differences, in float64, of sum_i <head2_i, d y / d var_i> (MXNet's first-order gradient).
    def contracted(v):
        ys = [mx.nd.array(v[n], dtype='float64') for n in names]
        for a in ys:
            a.attach_grad()
        with mx.autograd.record():
            out = f(*ys)
        hh = mx.nd.array(h.asnumpy(), dtype='float64') if heads else None
        gs = mx.autograd.grad(out, ys, head_grads=hh)
        return sum(float((g.asnumpy() * (h2[i].asnumpy() if heads else 1.0)).sum()) for i, g in enumerate(gs))
    eps = 1e-6
    for n, x in zip(names, xs):
        fd = np.zeros(shapes[n])
        for idx in np.ndindex(*shapes[n]):
            v = {k: vals[k].astype(np.float64) for k in names}
            v[n][idx] += eps
            up = contracted(v)
            v[n][idx] -= 2 * eps
            fd[idx] = (up - contracted(v)) / (2 * eps)
        got = x.grad.asnumpy().astype(np.float64)
        assert np.abs(got - fd).max() <= 1e-4 * max(1.0, np.abs(fd).max()), (case, n, np.abs(got - fd).max())


X = {'x': (3, 4)}
second('sin', nd.sin, X, heads=False)
second('cos', nd.cos, X)
second('exp', nd.exp, X)
second('log', nd.log, X, lo=0.5, hi=2.0)
second('tanh', nd.tanh, X)
second('sigmoid', nd.sigmoid, X)
second('relu', nd.relu, X)  # zero: relu is piecewise linear
second('sin_relu', lambda x: nd.sin(nd.relu(x)), X)
second('sin_exp', lambda x: nd.sin(nd.exp(x)), X)
second('tanh_sin_add', lambda a, b: nd.tanh(nd.sin(nd.elemwise_add(a, b) + 0.5)), {'a': (3, 4), 'b': (3, 4)})
second('tanh64', nd.tanh, X, dtype=np.float64)


def dot_written(xs, h):  # dot(a, b): da = h b^T, db = a^T h
    a, b = xs
    return [nd.dot(h, b, transpose_b=True), nd.dot(a, h, transpose_a=True)]


def tanh_dot_written(xs, h):  # tanh(dot(a, b^T)): g = h (1 - t^2), da = g b, db = g^T a
    a, b = xs
    t = nd.tanh(nd.dot(a, b, transpose_b=True))
    g = nd.elemwise_mul(h, 1 - nd.elemwise_mul(t, t))
    return [nd.dot(g, b), nd.dot(g, a, transpose_a=True)]


def sin_exp_mul_written(xs, h):  # sin(x) exp(x): (cos(x) + sin(x)) exp(x)
    x, = xs
    return [nd.elemwise_mul(h, nd.elemwise_mul(nd.elemwise_add(nd.cos(x), nd.sin(x)), nd.exp(x)))]


AB = {'a': (3, 4), 'b': (4, 2)}
second('dot', lambda a, b: nd.dot(a, b), AB, written=dot_written)
ABt = {'a': (3, 4), 'b': (2, 4)}
second('tanh_dot', lambda a, b: nd.tanh(nd.dot(a, b, transpose_b=True)), ABt, written=tanh_dot_written)
second('tanh_dot64', lambda a, b: nd.tanh(nd.dot(a, b, transpose_b=True)), ABt, written=tanh_dot_written,
       dtype=np.float64)
second('sin_exp_mul', lambda x: nd.elemwise_mul(nd.sin(x), nd.exp(x)), X, written=sin_exp_mul_written)

# retain_graph: a second-order pass through the retained gradient graph, a first-order pass through the
# retained forward graph, the second-order pass again without retain_graph: it frees the gradient graph and,
# through sigmoid's output, the forward graph, so a last first-order pass fails.
x = var('retain', 'x', (3, 4))
with mx.autograd.record():
    y = nd.sigmoid(x)
    dx = mx.autograd.grad(y, [x], head_grads=head('retain', (3, 4)), create_graph=True, retain_graph=True)[0]
h2 = mx.nd.array(rng.uniform(-1, 1, (3, 4)).astype(np.float32))
saved['retain:head2:x'] = h2.copy()
dx.backward(h2, retain_graph=True)
saved['retain:grad:x'] = x.grad.copy()
y.backward(saved['retain:head'], retain_graph=True)
saved['retain:grad2:x'] = x.grad.copy()
dx.backward(h2)
assert np.array_equal(x.grad.asnumpy(), saved['retain:grad:x'].asnumpy())
try:
    y.backward(saved['retain:head'])
    raise AssertionError('MXNet differentiated a freed graph')
except mx.base.MXNetError:
    pass

mx.nd.save(os.path.join(HERE, 'autograd.params'), saved)
print(len(saved), 'arrays')
