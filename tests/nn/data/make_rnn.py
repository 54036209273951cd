"""Generates the recurrent layers' fixtures with MXNet 1.9.1's Gluon (read by tests/nn/rnn_test.cc).

For each case below, rnn_<case>.params holds the layer's parameters as Gluon's save_parameters writes them
(its structural names: '_unfused.<layer>.<i2h|h2h>_<weight|bias>', with '.l_cell' / '.r_cell' before the
short name when bidirectional), set to random values so that every weight and bias matters. rnn.params holds,
under these names:
  <case>:in:x                  the input sequence
  <case>:in:state<i>           the begin states given (cases with states only; lstm: h then c)
  <case>:out                   the output sequence (training mode, recorded)
  <case>:state<i>              the final states (cases with states only)
  <case>:head:out, <case>:head:state<i>   the random head gradients of the backward pass
  <case>:grad:x, <case>:grad:state<i>     the gradients of the input and of the begin states
  <case>:grad:<structural name>           every parameter's gradient

Run with MXNet 1.9.1 (pip install mxnet==1.9.1 "numpy<1.24"):  python make_rnn.py
"""
import os

import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.gluon import rnn

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.RandomState(7)
mx.random.seed(7)
saved = {}


def arr(shape, lo=-1.0, hi=1.0):
    return mx.nd.array(rng.uniform(lo, hi, shape).astype(np.float32))


# name: (layer, input shape, begin states given). The input size is left deferred (completed by the first
# forward pass), as the C++ test does.
CASES = {
    'lstm': (lambda: rnn.LSTM(4), (3, 2, 3), False),
    'lstm_2bi': (lambda: rnn.LSTM(3, num_layers=2, bidirectional=True), (3, 2, 2), False),
    'lstm_states': (lambda: rnn.LSTM(3, bidirectional=True), (4, 2, 3), True),
    'gru_ntc': (lambda: rnn.GRU(4, layout='NTC'), (2, 3, 3), False),
    'gru_states': (lambda: rnn.GRU(3, num_layers=2), (3, 2, 2), True),
    'rnn_tanh': (lambda: rnn.RNN(4, activation='tanh'), (3, 2, 3), True),
    'rnn_relu': (lambda: rnn.RNN(3, num_layers=2, activation='relu', layout='NTC', bidirectional=True),
                 (2, 3, 2), False),
}

for case, (make, in_shape, with_states) in CASES.items():
    layer = make()
    layer.initialize()
    x = arr(in_shape)
    layer(x)  # finishes the deferred initialisation
    for name, p in layer.collect_params().items():
        # relu's biases positive, so that no direction's states stay 0 and every gradient is non-zero.
        lo = 0.0 if case == 'rnn_relu' and name.endswith('bias') else -0.6
        p.set_data(arr(p.shape, lo, 0.6))
    layer.save_parameters(os.path.join(HERE, 'rnn_%s.params' % case))
    saved[case + ':in:x'] = x
    x = x.copy()
    x.attach_grad()
    states = []
    if with_states:
        batch = in_shape[layer._layout.find('N')]
        states = [arr(s['shape']) for s in layer.state_info(batch)]
        for i, s in enumerate(states):
            saved['%s:in:state%d' % (case, i)] = s.copy()
            s.attach_grad()
    with autograd.record():
        if with_states:
            out, final = layer(x, states)
        else:
            out, final = layer(x), []
    heads = [out] + list(final)
    head_grads = [arr(h.shape) for h in heads]
    autograd.backward(heads, head_grads)
    saved[case + ':out'] = out
    saved[case + ':head:out'] = head_grads[0]
    for i, s in enumerate(final):
        saved['%s:state%d' % (case, i)] = s
        saved['%s:head:state%d' % (case, i)] = head_grads[1 + i]
    saved[case + ':grad:x'] = x.grad
    for i, s in enumerate(states):
        saved['%s:grad:state%d' % (case, i)] = s.grad
    for name, p in layer._collect_params_with_prefix().items():
        saved['%s:grad:%s' % (case, name)] = p.grad()

for name, a in saved.items():
    assert (a != 0).sum().asscalar() > 0, name + ' is all zero: the test could not tell it from a missing value'
mx.nd.save(os.path.join(HERE, 'rnn.params'), saved)
print('wrote rnn.params and %d parameter files' % len(CASES))
