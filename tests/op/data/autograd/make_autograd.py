"""Generates autograd.params: gradients MXNet 1.9.1's mx.autograd computes on fixed inputs.

Each case records a small computation of registered operators with mx.autograd.record() (train mode), calls
backward with a head gradient (or none: ones) and saves, under '<case>:<name>', the inputs (in:<name>), the
head gradient (head) and every variable's gradient (grad:<name>); the last case is a custom autograd.Function.
autograd_test.cc rebuilds each case with
troupe's autograd (op/autograd.h) and compares.

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

mx.nd.save(os.path.join(HERE, 'autograd.params'), saved)
print(len(saved), 'arrays')
