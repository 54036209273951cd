"""Operators troupe had before the MXNet operator cases came: checked the same way."""
import mxnet as mx

from make_op_cases import case

CASES = [
    case('activation_sigmoid', lambda x: mx.sym.Activation(x, act_type='sigmoid'), [('x', (3, 4), 'float32')]),
    case('activation_softrelu_f64', lambda x: mx.sym.Activation(x, act_type='softrelu'), [('x', (3, 4), 'float64')]),
    case('elemwise_add', lambda a, b: mx.sym.elemwise_add(a, b), [('a', (2, 5), 'float32'), ('b', (2, 5), 'float32')]),
    case('broadcast_add', lambda a, b: mx.sym.broadcast_add(a, b), [('a', (2, 1, 3), 'float32'), ('b', (4, 1), 'float32')]),
    case('sum_axis_neg', lambda x: mx.sym.sum(x, axis=-1, keepdims=True), [('x', (2, 3, 4), 'float32')]),
    case('fully_connected', lambda x, w, b: mx.sym.FullyConnected(x, w, b, num_hidden=3),
         [('x', (2, 4), 'float32'), ('w', (3, 4), 'float32'), ('b', (3,), 'float32')]),
    case('softmax_axis0', lambda x: mx.sym.softmax(x, axis=0), [('x', (3, 4), 'float32')]),
    case('concat_dim1', lambda a, b: mx.sym.concat(a, b, dim=1), [('a', (2, 3), 'float32'), ('b', (2, 2), 'float32')]),
    case('reshape_special', lambda x: mx.sym.reshape(x, shape=(0, -1)), [('x', (2, 3, 4), 'float32')]),
]
