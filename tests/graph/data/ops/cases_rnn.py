"""The fused RNN operator (rnn_relu, rnn_tanh, lstm, gru; 1 and 2 layers, bidirectional, state_outputs, float32
and float64, one step), _rnn_param_concat, and hybridized Gluon rnn layers as they export (weights flattened by
Reshape, joined by _rnn_param_concat, zero initial states)."""
import mxnet as mx
import numpy as np

from make_op_cases import case

CASES = []

GATES = {'rnn_relu': 1, 'rnn_tanh': 1, 'lstm': 4, 'gru': 3}


def param_size(mode, layers, dirs, inputs, hidden):
    """MXNet's packed parameter vector: per layer and direction the i2h (G*H, I_l) and h2h (G*H, H) weights,
    then per layer and direction the i2h and h2h biases (G*H each)."""
    gh = GATES[mode] * hidden
    return sum(dirs * gh * ((inputs if l == 0 else dirs * hidden) + hidden + 2) for l in range(layers))


def rnn_case(name, mode, T, N, I, H, layers=1, bidirectional=False, state_outputs=False, dtype='float32', **extra):
    dirs = 2 if bidirectional else 1
    size = param_size(mode, layers, dirs, I, H)
    kw = dict(mode=mode, state_size=H, num_layers=layers, bidirectional=bidirectional, state_outputs=state_outputs)
    kw.update(extra)
    # The size MXNet infers must be the one computed here.
    probe = mx.sym.RNN(mx.sym.var('x'), mx.sym.var('w'), mx.sym.var('h'),
                       *([mx.sym.var('c')] if mode == 'lstm' else []), **kw)
    arg_shapes, _, _ = probe.infer_shape(x=(T, N, I))
    assert arg_shapes[1] == (size,), (name, arg_shapes[1], size)
    inputs = [('x', (T, N, I), dtype), ('w', (size,), dtype), ('h', (layers * dirs, N, H), dtype)]
    if mode == 'lstm':
        inputs.append(('c', (layers * dirs, N, H), dtype))
    return case(name, lambda *v: mx.sym.RNN(*v, **kw), inputs)


for mode in ['rnn_relu', 'rnn_tanh', 'lstm', 'gru']:
    CASES += [
        rnn_case('rnn_%s' % mode, mode, 4, 3, 5, 6),
        rnn_case('rnn_%s_states' % mode, mode, 3, 2, 4, 5, state_outputs=True),
        rnn_case('rnn_%s_2layers' % mode, mode, 4, 2, 3, 4, layers=2),
        rnn_case('rnn_%s_bidir' % mode, mode, 3, 2, 4, 3, bidirectional=True, state_outputs=True),
        rnn_case('rnn_%s_2layers_bidir_f64' % mode, mode, 5, 3, 4, 5, layers=2, bidirectional=True,
                 state_outputs=True, dtype='float64'),
        rnn_case('rnn_%s_f64' % mode, mode, 4, 2, 3, 4, dtype='float64'),
        rnn_case('rnn_%s_t1' % mode, mode, 1, 3, 2, 3, layers=2, state_outputs=True),
        rnn_case('rnn_%s_t1_bidir_f64' % mode, mode, 1, 2, 3, 2, bidirectional=True, state_outputs=True,
                 dtype='float64'),
    ]
CASES += [
    # One sample, one input feature, three layers.
    rnn_case('rnn_lstm_3layers_n1_f64', 'lstm', 5, 1, 1, 3, layers=3, state_outputs=True, dtype='float64'),
    rnn_case('rnn_gru_3layers_bidir', 'gru', 3, 2, 2, 3, layers=3, bidirectional=True),
    # Dropout acts between layers only: with one layer p changes nothing.
    rnn_case('rnn_lstm_dropout_1layer', 'lstm', 3, 2, 3, 4, p=0.5, state_outputs=True),
    rnn_case('rnn_gru_dropout_1layer_bidir', 'gru', 3, 2, 3, 4, p=0.3, bidirectional=True),
]

# ---- _rnn_param_concat: Concat under another shape rule (flattened weights, as the Gluon layers write).
CASES += [
    case('rnn_param_concat_1d', lambda a, b, c: mx.sym._internal._rnn_param_concat(a, b, c, dim=0, num_args=3),
         [('a', (6,), 'float32'), ('b', (4,), 'float32'), ('c', (5,), 'float32')]),
    case('rnn_param_concat_2d_dim1_f64',
         lambda a, b: mx.sym._internal._rnn_param_concat(a, b, dim=1, num_args=2),
         [('a', (2, 3), 'float64'), ('b', (2, 4), 'float64')]),
]


# ---- Hybridized Gluon layers: the symbol they export, with their parameters as the arguments.
def gluon_case(name, layer, T, N, I, dtype='float32'):
    layer.initialize()
    layer.cast(dtype)  # the zero initial states take the layer's type
    layer.hybridize()
    sym = layer(mx.sym.var('data'))
    arg_shapes, _, _ = sym.infer_shape(data=(T, N, I))
    inputs = [(n, s, dtype) for n, s in zip(sym.list_arguments(), arg_shapes)]
    return case(name, lambda *v: sym, inputs)


CASES += [
    gluon_case('rnn_gluon_lstm_2layers_bidir',
               mx.gluon.rnn.LSTM(4, num_layers=2, bidirectional=True, input_size=3, prefix='glstm_'), 3, 2, 3),
    gluon_case('rnn_gluon_gru_f64', mx.gluon.rnn.GRU(3, input_size=2, prefix='ggru_'), 4, 2, 2, dtype='float64'),
]
