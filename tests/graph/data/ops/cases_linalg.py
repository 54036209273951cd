"""dot and batch_dot; topk, sort, argsort, argmax, argmin and pick."""
import mxnet as mx
import numpy as np

from make_op_cases import case

CASES = []
for ta in (False, True):
    for tb in (False, True):
        a = (4, 3) if ta else (3, 4)
        b = (5, 4) if tb else (4, 5)
        tag = '%s%s' % ('T' if ta else 'N', 'T' if tb else 'N')
        CASES.append(case('dot_' + tag, lambda x, y, ta=ta, tb=tb: mx.sym.dot(x, y, transpose_a=ta, transpose_b=tb),
                          [('x', a, 'float32'), ('y', b, 'float32')]))
        ba = (2, 4, 3) if ta else (2, 3, 4)
        bb = (2, 5, 4) if tb else (2, 4, 5)
        CASES.append(case('batch_dot_' + tag, lambda x, y, ta=ta, tb=tb: mx.sym.batch_dot(x, y, transpose_a=ta, transpose_b=tb),
                          [('x', ba, 'float32'), ('y', bb, 'float32')]))
CASES += [
    case('dot_nd', lambda x, y: mx.sym.dot(x, y), [('x', (2, 3, 4), 'float64'), ('y', (4, 2, 3), 'float64')]),
    case('dot_nd_ta', lambda x, y: mx.sym.dot(x, y, transpose_a=True), [('x', (4, 2, 3), 'float32'), ('y', (4, 5), 'float32')]),
    case('dot_vec', lambda x, y: mx.sym.dot(x, y), [('x', (6,), 'float32'), ('y', (6,), 'float32')]),
    case('batch_dot_f64', lambda x, y: mx.sym.batch_dot(x, y), [('x', (3, 2, 4), 'float64'), ('y', (3, 4, 2), 'float64')]),
]

CASES += [
    case('topk_indices', lambda x: mx.sym.topk(x, k=2), [('x', (3, 5), 'float32')]),
    case('topk_value_axis0', lambda x: mx.sym.topk(x, axis=0, k=2, ret_typ='value'), [('x', (4, 3), 'float32')]),
    case('topk_both_ascend', lambda x: mx.sym.topk(x, k=3, ret_typ='both', is_ascend=True, dtype='int32'),
         [('x', (2, 3, 6), 'float64')]),
    case('topk_mask', lambda x: mx.sym.topk(x, axis=1, k=2, ret_typ='mask'), [('x', (2, 4, 3), 'float32')]),
    case('topk_flat', lambda x: mx.sym.topk(x, axis=None, k=4, ret_typ='value'), [('x', (3, 4), 'float32')]),
    case('topk_int64_idx', lambda x: mx.sym.topk(x, k=2, dtype='int64'), [('x', (3, 5), 'float32')]),
    case('sort', lambda x: mx.sym.sort(x, axis=-1), [('x', (3, 5), 'float32')]),
    case('sort_desc_axis0', lambda x: mx.sym.sort(x, axis=0, is_ascend=False), [('x', (4, 3), 'float64')]),
    case('argsort', lambda x: mx.sym.argsort(x), [('x', (3, 5), 'float32')]),
    case('argsort_desc_int32', lambda x: mx.sym.argsort(x, axis=0, is_ascend=False, dtype='int32'), [('x', (4, 3), 'float32')]),
    case('argmax', lambda x: mx.sym.argmax(x, axis=1), [('x', (3, 5), 'float32')]),
    case('argmax_keep', lambda x: mx.sym.argmax(x, axis=-1, keepdims=True), [('x', (2, 3, 4), 'float64')]),
    case('argmin_axis0', lambda x: mx.sym.argmin(x, axis=0), [('x', (4, 3), 'float32')]),
    case('argmax_ties', lambda x: mx.sym.argmax(x, axis=1),
         [('x', np.array([[1, 3, 3, 0], [2, 2, 2, 2]], dtype='float32'))]),
    case('argmax_int32', lambda x: mx.sym.argmax(x, axis=1), [('x', (3, 5), 'int32', (-50, 50))], backward=False),
    case('pick', lambda x, i: mx.sym.pick(x, i), [('x', (3, 4), 'float32'), ('i', np.array([0, 3, 1], dtype='float32'))],
         no_grad=['i']),
    case('pick_axis0_keep', lambda x, i: mx.sym.pick(x, i, axis=0, keepdims=True),
         [('x', (3, 4), 'float64'), ('i', np.array([2, 0, 1, 1], dtype='float64'))], no_grad=['i']),
    case('pick_clip_wrap', lambda x, i: mx.sym.pick(x, i, mode='wrap'),
         [('x', (3, 4), 'float32'), ('i', np.array([5, -1, 2], dtype='float32'))], no_grad=['i']),
    case('pick_clip', lambda x, i: mx.sym.pick(x, i),
         [('x', (3, 4), 'float32'), ('i', np.array([7, -3, 2], dtype='float32'))], no_grad=['i']),
]

# CenterNet's decoder: class ids and positions from topk indices over a flattened heat map, in int64.
def _centernet_ids(x):
    flat = mx.sym.reshape(x, shape=(0, -1))
    scores, idx = mx.sym.topk(flat, k=5, ret_typ='both')
    idx = mx.sym.Cast(idx, dtype='int64')
    shape = mx.sym.split(mx.sym.shape_array(x), axis=0, num_outputs=4)
    hw = shape[2] * shape[3]
    ids = mx.sym.Cast(mx.sym.broadcast_div(idx, hw), dtype='float32')
    pos = mx.sym.Cast(mx.sym.broadcast_mod(mx.sym.broadcast_mod(idx, hw), shape[3]), dtype='float32')
    return mx.sym.Group([ids, scores, pos])


CASES.append(case('centernet_ids', _centernet_ids, [('x', (1, 3, 2, 4), 'float32')], backward=False))

# Ties: MXNet orders equal values as its CPU sort leaves them (std::sort, or std::partial_sort for k * 8 <= n).
_ties = np.array([[0.5, 1.0, 1.0, 0.0, 1.0, 0.5, 0.0, 1.0] * 5], dtype='float32')
CASES += [
    case('topk_ties_partial', lambda x: mx.sym.topk(x, k=3, ret_typ='both'), [('x', _ties)], backward=False),
    case('topk_ties_full', lambda x: mx.sym.topk(x, k=20, ret_typ='indices'), [('x', _ties)], backward=False),
    case('argsort_ties', lambda x: mx.sym.argsort(x), [('x', _ties)], backward=False),
]
