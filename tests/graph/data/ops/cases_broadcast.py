"""Binary element-wise operators (equal-shape and broadcasting forms), broadcast_to/axis/like, where, add_n,
the reductions, integer inputs to the arithmetic and Concat, and the array-making operators."""
import mxnet as mx
import numpy as np

from make_op_cases import case

A, B = (2, 3, 4), (3, 1)   # broadcasting pair
POS = (0.5, 2.0)

CASES = []
MATH = [('maximum', 'broadcast_maximum', None), ('minimum', 'broadcast_minimum', None),
        ('power', 'broadcast_power', POS), ('mod', 'broadcast_mod', None), ('hypot', 'broadcast_hypot', None),
        ('equal', 'broadcast_equal', None), ('not_equal', 'broadcast_not_equal', None),
        ('greater', 'broadcast_greater', None), ('greater_equal', 'broadcast_greater_equal', None),
        ('lesser', 'broadcast_lesser', None), ('lesser_equal', 'broadcast_lesser_equal', None),
        ('logical_and', 'broadcast_logical_and', None), ('logical_or', 'broadcast_logical_or', None),
        ('logical_xor', 'broadcast_logical_xor', None)]
for short, bname, rng in MATH:
    r = rng or (-2.0, 2.0)
    bfn = getattr(mx.sym, bname)
    CASES.append(case(bname, lambda a, b, f=bfn: f(a, b), [('a', A, 'float32', r), ('b', B, 'float32', r)]))
    CASES.append(case(bname + '_f64', lambda a, b, f=bfn: f(a, b), [('a', B, 'float64', r), ('b', A, 'float64', r)]))
    efn = getattr(mx.sym, '_internal')
    ename = '_' + short
    CASES.append(case(ename, lambda a, b, n=ename: getattr(mx.sym._internal, n)(a, b),
                      [('a', (3, 4), 'float32', r), ('b', (3, 4), 'float32', r)]))
# Ties and zeros where the rules differ.
ties_a = np.array([[1.0, 2.0, 0.0, -1.0], [3.0, -2.0, 0.5, 0.0]], dtype='float32')
ties_b = np.array([[1.0, 1.0, 0.0, 2.0], [3.0, -2.5, 0.5, 1.0]], dtype='float32')
for name in ['maximum', 'minimum', 'equal', 'logical_and', 'logical_xor']:
    CASES.append(case('ties_' + name, lambda a, b, n='_' + name: getattr(mx.sym._internal, n)(a, b),
                      [('a', ties_a), ('b', ties_b)]))
mod_a = np.array([[5.5, -5.5, 5.5, -5.5, 3.0, -3.0]], dtype='float32')
mod_b = np.array([[2.0, 2.0, -2.0, -2.0, 1.5, 1.5]], dtype='float32')
CASES.append(case('mod_signs', lambda a, b: mx.sym.broadcast_mod(a, b), [('a', mod_a), ('b', mod_b)]))
# Integer inputs (forward only).
for name in ['broadcast_add', 'broadcast_sub', 'broadcast_mul', 'broadcast_div', 'broadcast_maximum',
             'broadcast_equal', 'broadcast_mod', 'broadcast_greater']:
    fn = getattr(mx.sym, name)
    CASES.append(case(name + '_int32', lambda a, b, f=fn: f(a, b), [('a', A, 'int32', (-9, 10)), ('b', B, 'int32', (1, 5))],
                      backward=False))
CASES += [
    case('broadcast_div_int64', lambda a, b: mx.sym.broadcast_div(a, b), [('a', A, 'int64', (-50, 50)), ('b', B, 'int64', (1, 7))],
         backward=False),
    case('elemwise_mul_int32', lambda a, b: mx.sym.elemwise_mul(a, b), [('a', (3, 4), 'int32'), ('b', (3, 4), 'int32')],
         backward=False),
    case('elemwise_add_int64', lambda a, b: mx.sym.elemwise_add(a, b), [('a', (3, 4), 'int64'), ('b', (3, 4), 'int64')],
         backward=False),
    case('concat_int32', lambda a, b: mx.sym.concat(a, b, dim=0), [('a', (2, 3), 'int32'), ('b', (1, 3), 'int32')],
         backward=False),
    case('concat_int64_axis_neg', lambda a, b: mx.sym.concat(a, b, dim=-1), [('a', (2, 3), 'int64'), ('b', (2, 2), 'int64')],
         backward=False),
]

# broadcast_to / broadcast_axis / broadcast_like
CASES += [
    case('broadcast_to', lambda x: mx.sym.broadcast_to(x, shape=(2, 3, 4)), [('x', (2, 1, 4), 'float32')]),
    case('broadcast_to_zero_keeps', lambda x: mx.sym.broadcast_to(x, shape=(0, 5, 0)), [('x', (2, 1, 3), 'float64')]),
    case('broadcast_axis', lambda x: mx.sym.broadcast_axis(x, axis=(0, 2), size=(3, 4)), [('x', (1, 2, 1), 'float32')]),
    case('broadcast_axes', lambda x: mx.sym.broadcast_axes(x, axis=1, size=5), [('x', (2, 1), 'float32')]),
    case('broadcast_like', lambda a, b: mx.sym.broadcast_like(a, b), [('a', (1, 3), 'float32'), ('b', (4, 3), 'float32')]),
    case('broadcast_like_axes', lambda a, b: mx.sym.broadcast_like(a, b, lhs_axes=(0,), rhs_axes=(2,)),
         [('a', (1, 3), 'float32'), ('b', (2, 5, 4), 'float32')]),
    case('broadcast_to_int32', lambda x: mx.sym.broadcast_to(x, shape=(3, 2)), [('x', (1, 2), 'int32')], backward=False),
]

# where and add_n
cond = np.array([[1, 0, 1], [0, 0, 1]], dtype='float32')
CASES += [
    case('where', lambda c, x, y: mx.sym.where(c, x, y), [('c', cond), ('x', (2, 3), 'float32'), ('y', (2, 3), 'float32')],
         no_grad=['c']),
    case('where_rows', lambda c, x, y: mx.sym.where(c, x, y),
         [('c', np.array([0, 1, 1], dtype='float32')), ('x', (3, 2, 2), 'float64'), ('y', (3, 2, 2), 'float64')],
         no_grad=['c']),
    case('where_int_cond', lambda c, x, y: mx.sym.where(c, x, y),
         [('c', np.array([[1, 0], [0, 3]], dtype='int32')), ('x', (2, 2), 'float32'), ('y', (2, 2), 'float32')]),
    case('add_n', lambda a, b, c: mx.sym.add_n(a, b, c), [('a', (2, 3), 'float32'), ('b', (2, 3), 'float32'), ('c', (2, 3), 'float32')]),
    case('elementwisesum', lambda a, b: mx.sym.ElementWiseSum(a, b), [('a', (4,), 'float64'), ('b', (4,), 'float64')]),
]

# reductions
for name in ['max', 'min', 'prod', 'nansum', 'nanprod', 'sum', 'mean']:
    fn = getattr(mx.sym, name)
    rng = (0.5, 1.5) if 'prod' in name else (-1.0, 1.0)
    CASES.append(case(name + '_axis1', lambda x, f=fn: f(x, axis=1), [('x', (2, 3, 4), 'float32', rng)]))
    CASES.append(case(name + '_all_keep', lambda x, f=fn: f(x, keepdims=True), [('x', (2, 3), 'float64', rng)]))
    CASES.append(case(name + '_exclude', lambda x, f=fn: f(x, axis=(0, -1), exclude=True), [('x', (2, 3, 4), 'float32', rng)]))
CASES += [
    case('max_ties', lambda x: mx.sym.max(x, axis=1), [('x', np.array([[1.0, 3.0, 3.0], [2.0, 2.0, -1.0]], dtype='float32'))]),
    case('nansum_nan', lambda x: mx.sym.nansum(x, axis=0), [('x', np.array([[1.0, np.nan], [2.0, 3.0]], dtype='float32'))]),
    case('max_int32', lambda x: mx.sym.max(x, axis=0), [('x', (3, 4), 'int32', (-20, 20))], backward=False),
    case('sum_int32', lambda x: mx.sym.sum(x, axis=1), [('x', (3, 4), 'int32', (-20, 20))], backward=False),
]

# array makers
CASES += [
    case('zeros_plus', lambda x: x + mx.sym.zeros(shape=(2, 3)), [('x', (2, 3), 'float32')]),
    case('ones_int', lambda x: mx.sym.broadcast_add(x, mx.sym.ones(shape=(1, 3), dtype='int32')), [('x', (2, 3), 'int32')],
         backward=False),
    case('full', lambda x: x * mx.sym.full(shape=(2, 3), val=2.5), [('x', (2, 3), 'float32')]),
    case('zeros_inferred', lambda x: mx.sym.elemwise_add(x, mx.sym.zeros(shape=(0, 3))), [('x', (4, 3), 'float32')]),
    case('arange', lambda x: x + mx.sym.arange(2, 8, 0.5), [('x', (12,), 'float32')]),
    case('arange_repeat', lambda x: x * mx.sym.arange(0, 3, repeat=2), [('x', (6,), 'float32')]),
    case('arange_stop_none', lambda x: mx.sym.broadcast_add(x, mx.sym.arange(5, dtype='int64')), [('x', (2, 5), 'int64')],
         backward=False),
    case('arange_like', lambda x: x + mx.sym.contrib.arange_like(x), [('x', (2, 3), 'float32')]),
    case('arange_like_axis', lambda x: mx.sym.contrib.arange_like(x, start=1, step=2, axis=-1), [('x', (2, 4), 'float32')]),
    case('shape_array', lambda x: mx.sym.shape_array(x), [('x', (2, 3, 4), 'float32')], backward=False),
    case('size_array', lambda x: mx.sym.size_array(x), [('x', (2, 3, 4), 'float32')], backward=False),
]
