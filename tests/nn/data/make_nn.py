"""Generates the module API's fixtures with MXNet 1.9.1's Gluon (read by tests/nn/nn_test.cc).

nn.params holds, under these names:
  loss:in:pred, loss:in:label, loss:in:pred01, loss:in:label01, loss:in:dist   the losses' inputs
  loss:<name>                          the per-sample losses Gluon computes on them
  net:in:x, net:in:y                   a batch for the network below
  net:out, net:loss                    its training-mode outputs and per-sample softmax cross-entropy
  net:grad:<structural name>           every parameter's gradient from that loss's backward pass
  net:after:<structural name>          every parameter after two Trainer steps (sgd, momentum, wd)
  net:export_out                       the trained network's prediction-mode output on net:in:x
  layer:<case>:{in, out, head, grad:in, param:<name>, pgrad:<name>}
                                       single layers (Conv1D, Conv3D, Conv2DTranspose, grouped and dilated
                                       Conv2D, pooling, Embedding, LayerNorm, LeakyReLU, Dense without flatten,
                                       softrelu, BatchNorm on the last axis; strided, dilated, grouped and
                                       bias-free Conv3D, MaxPool3D, AvgPool3D and the global 3-D pools): input,
                                       output, head gradient, the input's and the parameters' gradients
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

# Single layers: each initialised (Xavier), given parameter values drawn from rng, run on an input under record with a random
# head gradient: layer:<case>:{in, out, head, grad:in (not for integer inputs), param:<short>, pgrad:<short>}.
def layer_case(case, layer, shape, integer=False, lo=-1.0, hi=1.0):
    layer.initialize(mx.init.Xavier())
    if integer:
        x = mx.nd.array(rng.randint(0, 10, shape).astype(np.float32))
    else:
        x = arr(shape, lo, hi)
        x.attach_grad()
    layer(x)  # deferred shapes
    for name, p in layer._collect_params_with_prefix().items():
        p.set_data(mx.nd.array(rng.uniform(-0.5, 0.5, p.shape).astype(np.float32)))
    with autograd.record():
        y = layer(x)
    head = arr(y.shape)
    y.backward(head)
    saved['layer:%s:in' % case] = x.copy()
    saved['layer:%s:out' % case] = y
    saved['layer:%s:head' % case] = head
    if not integer:
        saved['layer:%s:grad:in' % case] = x.grad.copy()
    for name, p in layer._collect_params_with_prefix().items():
        saved['layer:%s:param:%s' % (case, name)] = p.data().copy()
        if p.grad_req != 'null':
            saved['layer:%s:pgrad:%s' % (case, name)] = p.grad().copy()


layer_case('conv1d', nn.Conv1D(3, 3, strides=2, padding=1), (2, 4, 9))
layer_case('conv3d', nn.Conv3D(2, (2, 2, 2), activation='relu'), (1, 2, 4, 4, 4))
layer_case('conv2d_transpose', nn.Conv2DTranspose(3, 3, strides=2, padding=1, output_padding=1), (2, 2, 5, 5))
layer_case('conv2d_groups', nn.Conv2D(4, 3, padding=1, groups=2, dilation=2), (2, 4, 6, 6))
layer_case('avgpool2d', nn.AvgPool2D(3, strides=2, padding=1, count_include_pad=False), (2, 3, 7, 7))
layer_case('maxpool1d_ceil', nn.MaxPool1D(2, ceil_mode=True), (2, 3, 9))
layer_case('global_avg2d', nn.GlobalAvgPool2D(), (2, 3, 5, 5))
layer_case('global_max1d', nn.GlobalMaxPool1D(), (2, 3, 6))
layer_case('embedding', nn.Embedding(10, 4), (3, 5), integer=True)
layer_case('layernorm', nn.LayerNorm(), (3, 6))
layer_case('leakyrelu', nn.LeakyReLU(0.1), (3, 6))
layer_case('dense_noflatten', nn.Dense(5, flatten=False, activation='sigmoid'), (2, 3, 4))
layer_case('softrelu', nn.Activation('softrelu'), (3, 6))
layer_case('batchnorm_last_axis', nn.BatchNorm(axis=-1, momentum=0.5), (4, 3, 5))
# 3-D layers (NCDHW), after the others so that their draws leave the earlier cases' values as they were.
layer_case('conv3d_strided', nn.Conv3D(4, (3, 2, 3), strides=(2, 1, 1), padding=(1, 1, 0), dilation=(1, 2, 1),
                                       groups=2), (2, 4, 5, 6, 5))
layer_case('conv3d_nobias', nn.Conv3D(3, (2, 2, 2), strides=2, use_bias=False, activation='tanh'), (1, 3, 4, 5, 4))
layer_case('maxpool3d', nn.MaxPool3D((2, 2, 2), strides=(2, 1, 2), padding=(1, 0, 1)), (2, 3, 5, 6, 5))
layer_case('maxpool3d_ceil', nn.MaxPool3D(2, ceil_mode=True), (1, 2, 5, 5, 5))
layer_case('avgpool3d', nn.AvgPool3D((3, 3, 3), strides=2, padding=1, count_include_pad=False), (2, 3, 6, 5, 7))
layer_case('avgpool3d_ceil', nn.AvgPool3D((2, 3, 2), strides=(1, 2, 2), padding=(1, 1, 0), ceil_mode=True),
           (1, 2, 4, 6, 5))
layer_case('global_avg3d', nn.GlobalAvgPool3D(), (2, 3, 3, 4, 5))
layer_case('global_max3d', nn.GlobalMaxPool3D(), (2, 3, 3, 4, 5))

mx.nd.save(os.path.join(HERE, 'nn.params'), saved)
print('wrote', len(saved), 'arrays')
