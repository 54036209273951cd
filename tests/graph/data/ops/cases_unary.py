"""Element-wise unary operators, the scalar comparisons and powers, clip and Cast."""
import mxnet as mx
import numpy as np

from make_op_cases import case

S = (3, 5)
POS = (0.2, 3.0)      # domain of log, sqrt, ...
UNIT = (-0.9, 0.9)    # domain of arcsin, arctanh, ...

# (mx.sym function, input range); every one also in float64 on a second shape.
MATH = [
    ('relu', None), ('abs', None), ('negative', None), ('square', None), ('sigmoid', None), ('exp', None),
    ('expm1', None), ('log', POS), ('log2', POS), ('log10', POS), ('log1p', POS), ('sqrt', POS), ('rsqrt', POS),
    ('cbrt', POS), ('rcbrt', POS), ('reciprocal', POS), ('tanh', None), ('sin', None), ('cos', None),
    ('tan', None), ('arcsin', UNIT), ('arccos', UNIT), ('arctan', None), ('sinh', None), ('cosh', None),
    ('arcsinh', None), ('arccosh', (1.2, 3.0)), ('arctanh', UNIT), ('softsign', None), ('erf', None),
    ('degrees', None), ('radians', None), ('identity', None), ('BlockGrad', None), ('stop_gradient', None),
    ('zeros_like', None), ('ones_like', None),
]
# No gradient in MXNet either (zero), and values away from the rounding ties.
ROUNDING = ['sign', 'floor', 'ceil', 'round', 'rint', 'fix', 'trunc']


def unary(fn_name):
    fn = getattr(mx.sym, fn_name)
    return lambda x: fn(x)


CASES = []
for name, rng in MATH:
    r = rng or (-2.0, 2.0)
    CASES.append(case(name, unary(name), [('x', S, 'float32', r)]))
    CASES.append(case(name + '_f64', unary(name), [('x', (2, 3, 2), 'float64', r)]))
for name in ROUNDING:
    x = np.array([[-2.7, -1.2, -0.3, 0.0, 0.4], [1.6, 2.2, -3.9, 5.1, -0.6]], dtype='float32')
    CASES.append(case(name, unary(name), [('x', x)]))

# Integer inputs: forward only (no gradients for integers).
for name in ['relu', 'abs', 'negative', 'square', 'sign', 'identity', 'BlockGrad', 'zeros_like', 'ones_like',
             'floor', 'round']:
    CASES.append(case(name + '_int32', unary(name), [('x', S, 'int32', (-5, 6))], backward=False))
CASES.append(case('relu_int64', unary('relu'), [('x', S, 'int64', (-5, 6))], backward=False))
CASES.append(case('abs_int8', unary('abs'), [('x', S, 'int8', (-100, 100))], backward=False))

# Scalar forms, through Python operators as MXNet users write them (they save as _greater_scalar, ...).
SCALAR = [
    ('greater', lambda x: x > 0.25), ('greater_equal', lambda x: x >= 0.25), ('lesser', lambda x: x < 0.25),
    ('lesser_equal', lambda x: x <= 0.25), ('equal', lambda x: x == 0.5), ('not_equal', lambda x: x != 0.5),
    ('maximum', lambda x: mx.sym.maximum(x, 0.1)), ('minimum', lambda x: mx.sym.minimum(x, 0.1)),
    ('power', lambda x: x ** 3.0), ('power_frac', lambda x: x ** 0.5), ('rpower', lambda x: 2.0 ** x),
    ('relu6_like', lambda x: mx.sym.minimum(mx.sym.maximum(x, 0.0), 6.0)),
]
for name, fn in SCALAR:
    lo = 0.1 if name == 'power_frac' else -1.0
    # Ties with the scalar on purpose for the comparisons and maximum/minimum.
    x = np.random.RandomState(7).uniform(lo, 1.0, size=(4, 5)).astype('float32')
    x[0, :3] = [0.25, 0.5, 0.1] if name != 'power_frac' else [0.25, 0.5, 0.3]
    CASES.append(case('scalar_' + name, fn, [('x', x)]))
    CASES.append(case('scalar_' + name + '_f64', fn, [('x', x.astype('float64'))]))

CASES += [
    case('clip', lambda x: mx.sym.clip(x, a_min=-0.5, a_max=0.5), [('x', S, 'float32')]),
    case('clip_relu6', lambda x: mx.sym.clip(x, 0, 6), [('x', S, 'float64', (-3.0, 9.0))]),
    case('clip_ties', lambda x: mx.sym.clip(x, a_min=-0.5, a_max=0.5),
         [('x', np.array([[-0.5, 0.5, -0.7, 0.7, 0.0]], dtype='float32'))]),
    case('clip_int32', lambda x: mx.sym.clip(x, 1, 4), [('x', S, 'int32')], backward=False),
    case('cast_f32_f64', lambda x: mx.sym.Cast(x, dtype='float64'), [('x', S, 'float32')]),
    case('cast_f64_f32', lambda x: mx.sym.cast(x, dtype='float32'), [('x', S, 'float64')]),
    case('cast_f32_int32', lambda x: mx.sym.Cast(x, dtype='int32'), [('x', S, 'float32', (-9.0, 9.0))], backward=False),
    case('cast_int32_f32', lambda x: mx.sym.Cast(x, dtype='float32'), [('x', S, 'int32')], backward=False),
    case('cast_f32_uint8', lambda x: mx.sym.Cast(x, dtype='uint8'), [('x', S, 'float32', (0.0, 200.0))],
         backward=False),
    case('cast_int64_int32', lambda x: mx.sym.Cast(x, dtype='int32'), [('x', S, 'int64', (-1000, 1000))],
         backward=False),
]
