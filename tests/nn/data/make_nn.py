"""Generates the module API's fixtures with MXNet 1.9.1's Gluon (read by tests/nn/nn_test.cc).

nn.params holds, under these names:
  loss:in:pred, loss:in:label, loss:in:pred01, loss:in:label01, loss:in:dist   the losses' inputs
  loss:<name>                          the per-sample losses Gluon computes on them
  net:in:x, net:in:y                   a batch for the network below
  net:out, net:loss                    its training-mode outputs and per-sample softmax cross-entropy
  net:grad:<structural name>           every parameter's gradient from that loss's backward pass
  net:after:<structural name>          every parameter after two Trainer steps (sgd, momentum, wd)
  net:export_out                       the trained network's prediction-mode output on net:in:x
nn_net_init.params is the network's initial parameters as Gluon's save_parameters writes them (structural
names); nn_export-symbol.json / nn_export-0000.params what Gluon's export writes after the two steps.

The network: HybridSequential(Conv2D(4, 3, padding=1), BatchNorm(), Activation('relu'), MaxPool2D(),
Flatten(), Dense(5)) on (2, 3, 6, 6) inputs.

Run with MXNet 1.9.1 (pip install mxnet==1.9.1 "numpy<1.24"):  python make_nn.py
"""
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.RandomState(5)
mx.random.seed(5)
saved = {}


def arr(shape, lo=-1.0, hi=1.0):
    return mx.nd.array(rng.uniform(lo, hi, shape).astype(np.float32))


# Losses.
pred, label = arr((4, 5), -2, 2), mx.nd.array([0, 3, 1, 4], dtype='float32')
pred01, label01 = arr((4, 3), -2, 2), mx.nd.array(rng.randint(0, 2, (4, 3)).astype(np.float32))
dist = mx.nd.softmax(arr((4, 5)))
saved.update({'loss:in:pred': pred, 'loss:in:label': label, 'loss:in:pred01': pred01,
              'loss:in:label01': label01, 'loss:in:dist': dist})
saved['loss:softmax_ce'] = gluon.loss.SoftmaxCrossEntropyLoss()(pred, label)
saved['loss:softmax_ce_dense'] = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)(pred, dist)
saved['loss:softmax_ce_weighted'] = gluon.loss.SoftmaxCrossEntropyLoss(weight=0.5)(pred, label)
saved['loss:l2'] = gluon.loss.L2Loss()(pred01, label01)
saved['loss:l1'] = gluon.loss.L1Loss()(pred01, label01)
saved['loss:huber'] = gluon.loss.HuberLoss(rho=0.5)(pred01, label01)
saved['loss:sigmoid_bce'] = gluon.loss.SigmoidBinaryCrossEntropyLoss()(pred01, label01)
saved['loss:sigmoid_bce_prob'] = gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=True)(
    mx.nd.sigmoid(pred01), label01)

# The network.
net = nn.HybridSequential()
net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation('relu'), nn.MaxPool2D(), nn.Flatten(),
        nn.Dense(5))
net.initialize(mx.init.Xavier())
x, y = arr((2, 3, 6, 6)), mx.nd.array([1, 4], dtype='float32')
saved['net:in:x'], saved['net:in:y'] = x, y
net(x)  # finishes the deferred initialisation
for p in net.collect_params().values():  # non-trivial BatchNorm parameters and statistics
    if p.name.endswith(('gamma', 'beta', 'running_mean', 'running_var', 'bias')):
        p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape).astype(np.float32)))
net.save_parameters(os.path.join(HERE, 'nn_net_init.params'))
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
with autograd.record():
    out = net(x)
    loss = loss_fn(out, y)
loss.backward()
saved['net:out'], saved['net:loss'] = out, loss
params = net._collect_params_with_prefix()
for name, p in params.items():
    if p.grad_req != 'null':
        saved['net:grad:' + name] = p.grad().copy()
trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1, 'momentum': 0.9, 'wd': 1e-3})
trainer.step(2)
with autograd.record():
    loss = loss_fn(net(x), y)
loss.backward()
trainer.step(2)
for name, p in params.items():
    saved['net:after:' + name] = p.data().copy()
net.hybridize()
saved['net:export_out'] = net(x)
net.export(os.path.join(HERE, 'nn_export'))
mx.nd.save(os.path.join(HERE, 'nn.params'), saved)
print('wrote', len(saved), 'arrays')
