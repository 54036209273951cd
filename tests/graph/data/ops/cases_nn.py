"""Neural-network operators: LayerNorm, L2Normalization, Pad, UpSampling (nearest), AdaptiveAvgPooling2D,
BilinearResize2D, SequenceMask/Last/Reverse, div_sqrt_dim, and softmax/log_softmax with use_length and dtype."""
import mxnet as mx
import numpy as np

from make_op_cases import case

CASES = []

# ---- LayerNorm: gamma and beta have the axis' size; mean and std keep the data's rank.
def layer_norm(**kw):
    return lambda x, g, b: mx.sym.LayerNorm(x, g, b, **kw)


for name, shape, kw, dtype in [
        ('layer_norm', (2, 3, 5), {}, 'float32'),
        ('layer_norm_f64', (2, 3, 5), {}, 'float64'),
        ('layer_norm_axis1', (2, 4, 3), {'axis': 1}, 'float32'),
        ('layer_norm_axis0', (3, 2, 2), {'axis': 0}, 'float64'),
        ('layer_norm_axis_neg2', (2, 4, 3), {'axis': -2}, 'float32'),
        ('layer_norm_eps', (4, 6), {'eps': 1e-2}, 'float32'),
        ('layer_norm_mean_var', (2, 3, 4), {'output_mean_var': True}, 'float32'),
        ('layer_norm_mean_var_axis1_f64', (2, 3, 4), {'output_mean_var': True, 'axis': 1}, 'float64'),
        ('layer_norm_hidden64', (3, 64), {}, 'float32'),
]:
    axis = kw.get('axis', -1)
    c = shape[axis]
    CASES.append(case(name, layer_norm(**kw), [('x', shape, dtype), ('g', (c,), dtype, (0.5, 1.5)),
                                               ('b', (c,), dtype)]))
# An offset mean: the centred values are small against the mean.
CASES.append(case('layer_norm_offset', layer_norm(), [('x', (2, 8), 'float32', (3.0, 4.0)), ('g', (8,), 'float32'),
                                                      ('b', (8,), 'float32')]))

# ---- L2Normalization
for name, shape, mode, dtype in [
        ('l2_instance', (3, 4, 5), 'instance', 'float32'),
        ('l2_instance_2d_f64', (3, 4), 'instance', 'float64'),
        ('l2_channel', (2, 3, 4), 'channel', 'float32'),
        ('l2_channel_4d_f64', (2, 3, 2, 2), 'channel', 'float64'),
        ('l2_spatial', (2, 3, 2, 2), 'spatial', 'float32'),
        ('l2_spatial_3d_f64', (2, 3, 4), 'spatial', 'float64'),
]:
    CASES.append(case(name, lambda x, m=mode: mx.sym.L2Normalization(x, mode=m), [('x', shape, dtype)]))
CASES.append(case('l2_eps', lambda x: mx.sym.L2Normalization(x, eps=0.5), [('x', (2, 3), 'float32')]))

# ---- Pad (4-D and 5-D; the first two axes unpadded)
for mode in ['constant', 'edge', 'reflect']:
    CASES.append(case('pad_%s' % mode, lambda x, m=mode: mx.sym.Pad(x, mode=m, pad_width=(0, 0, 0, 0, 1, 2, 2, 1)),
                      [('x', (2, 2, 3, 4), 'float32')]))
    CASES.append(case('pad_%s_5d_f64' % mode,
                      lambda x, m=mode: mx.sym.Pad(x, mode=m, pad_width=(0, 0, 0, 0, 1, 0, 0, 2, 2, 1)),
                      [('x', (1, 2, 2, 3, 3), 'float64')]))
CASES += [
    case('pad_constant_value', lambda x: mx.sym.Pad(x, mode='constant', constant_value=1.5,
                                                    pad_width=(0, 0, 0, 0, 2, 2, 0, 1)), [('x', (1, 3, 2, 2), 'float32')]),
    case('pad_alias', lambda x: mx.sym.pad(x, mode='edge', pad_width=(0, 0, 0, 0, 0, 3, 3, 0)),
         [('x', (1, 1, 2, 2), 'float32')]),
]

# ---- UpSampling, nearest
CASES += [
    case('upsampling', lambda x: mx.sym.UpSampling(x, scale=2, sample_type='nearest'), [('x', (2, 3, 2, 3), 'float32')]),
    case('upsampling_scale3_f64', lambda x: mx.sym.UpSampling(x, scale=3, sample_type='nearest'),
         [('x', (1, 2, 2, 2), 'float64')]),
    case('upsampling_concat', lambda a, b: mx.sym.UpSampling(a, b, scale=2, sample_type='nearest', num_args=2),
         [('a', (2, 2, 2, 3), 'float32'), ('b', (2, 3, 4, 6), 'float32')]),
    case('upsampling_concat3', lambda a, b, c: mx.sym.UpSampling(a, b, c, scale=4, sample_type='nearest', num_args=3),
         [('a', (1, 1, 2, 2), 'float32'), ('b', (1, 2, 4, 4), 'float32'), ('c', (1, 1, 8, 8), 'float32')]),
    case('upsampling_sum', lambda a, b: mx.sym.UpSampling(a, b, scale=2, sample_type='nearest', num_args=2,
                                                          multi_input_mode='sum'),
         [('a', (2, 2, 2, 2), 'float64'), ('b', (2, 2, 4, 4), 'float64')]),
]

# ---- AdaptiveAvgPooling2D: windows overlap when the sizes do not divide.
for name, size, shape, dtype in [
        ('adaptive_avg_pool', (3, 4), (2, 2, 5, 7), 'float32'),
        ('adaptive_avg_pool_square_f64', (2,), (1, 3, 5, 5), 'float64'),
        ('adaptive_avg_pool_default', None, (2, 2, 3, 4), 'float32'),
        ('adaptive_avg_pool_upsample', (5, 4), (1, 2, 3, 3), 'float32'),
        ('adaptive_avg_pool_divides', (2, 3), (1, 2, 4, 6), 'float32'),
]:
    kw = {} if size is None else {'output_size': size}
    CASES.append(case(name, lambda x, k=kw: mx.sym.contrib.AdaptiveAvgPooling2D(x, **k), [('x', shape, dtype)]))

# ---- BilinearResize2D
BR = mx.sym.contrib.BilinearResize2D
for name, kw, shape, dtype in [
        ('bilinear_up', {'height': 7, 'width': 9}, (2, 2, 4, 5), 'float32'),
        ('bilinear_down', {'height': 4, 'width': 3}, (1, 2, 6, 8), 'float32'),
        ('bilinear_up_f64', {'height': 5, 'width': 8}, (1, 2, 3, 3), 'float64'),
        ('bilinear_no_align', {'height': 7, 'width': 9, 'align_corners': False}, (1, 2, 4, 5), 'float32'),
        ('bilinear_no_align_down_f64', {'height': 3, 'width': 5, 'align_corners': False}, (1, 1, 7, 8), 'float64'),
        ('bilinear_same', {'height': 3, 'width': 4}, (1, 2, 3, 4), 'float32'),
        ('bilinear_to_one', {'height': 1, 'width': 3}, (1, 2, 4, 5), 'float32'),
        ('bilinear_scale', {'scale_height': 1.5, 'scale_width': 2.0}, (1, 2, 3, 5), 'float32'),
        ('bilinear_odd_scale', {'mode': 'odd_scale', 'scale_height': 2.0, 'scale_width': 0.5}, (1, 1, 5, 6), 'float32'),
        ('bilinear_to_even_up', {'mode': 'to_even_up'}, (1, 2, 3, 4), 'float32'),
        ('bilinear_to_even_down', {'mode': 'to_even_down'}, (1, 2, 5, 4), 'float32'),
        ('bilinear_to_odd_up', {'mode': 'to_odd_up'}, (1, 2, 4, 5), 'float32'),
        ('bilinear_to_odd_down', {'mode': 'to_odd_down'}, (1, 2, 4, 6), 'float64'),
]:
    CASES.append(case(name, lambda x, k=kw: BR(x, **k), [('x', shape, dtype)]))
CASES.append(case('bilinear_like', lambda x, l: BR(x, l, mode='like'),
                  [('x', (1, 2, 3, 4), 'float32'), ('l', (1, 2, 5, 7), 'float32')]))

# ---- Sequence operators. sequence_length is float32 as MXNet's users give it; it gets no gradient.
S0 = (4, 3, 2)       # (steps, batch, feature), axis 0
S1 = (3, 4, 2)       # (batch, steps, feature), axis 1
LEN3 = np.array([2, 4, 1], dtype='float32')
CASES += [
    case('seq_mask_identity', lambda x: mx.sym.SequenceMask(x), [('x', S0, 'float32')]),
    case('seq_mask', lambda x, l: mx.sym.SequenceMask(x, l, use_sequence_length=True), [('x', S0, 'float32'), ('l', LEN3)],
         no_grad=['l']),
    case('seq_mask_value_axis1', lambda x, l: mx.sym.SequenceMask(x, l, use_sequence_length=True, value=-2.5, axis=1),
         [('x', S1, 'float32'), ('l', LEN3)], no_grad=['l']),
    case('seq_mask_f64_int32_len', lambda x, l: mx.sym.SequenceMask(x, l, use_sequence_length=True, value=1.0),
         [('x', (3, 2, 2, 2), 'float64'), ('l', np.array([0, 3], dtype='int32'))]),
    case('seq_mask_long_len', lambda x, l: mx.sym.SequenceMask(x, l, use_sequence_length=True),
         [('x', S0, 'float32'), ('l', np.array([3, 1, 5], dtype='float32'))], no_grad=['l']),
    case('seq_last_full', lambda x: mx.sym.SequenceLast(x), [('x', S0, 'float32')]),
    case('seq_last', lambda x, l: mx.sym.SequenceLast(x, l, use_sequence_length=True), [('x', S0, 'float32'), ('l', LEN3)],
         no_grad=['l']),
    case('seq_last_axis1_4d', lambda x, l: mx.sym.SequenceLast(x, l, use_sequence_length=True, axis=1),
         [('x', (3, 4, 2, 2), 'float32'), ('l', LEN3)], no_grad=['l']),
    case('seq_last_f64', lambda x, l: mx.sym.SequenceLast(x, l, use_sequence_length=True),
         [('x', (2, 3), 'float64'), ('l', np.array([1, 2, 2], dtype='float64'))], no_grad=['l']),
    case('seq_reverse_full', lambda x: mx.sym.SequenceReverse(x), [('x', S0, 'float32')]),
    case('seq_reverse', lambda x, l: mx.sym.SequenceReverse(x, l, use_sequence_length=True),
         [('x', S0, 'float32'), ('l', LEN3)], no_grad=['l']),
    case('seq_reverse_f64_zero_len', lambda x, l: mx.sym.SequenceReverse(x, l, use_sequence_length=True),
         [('x', (3, 3, 2, 2), 'float64'), ('l', np.array([0, 3, 2], dtype='float64'))], no_grad=['l']),
]

# ---- div_sqrt_dim
CASES += [
    case('div_sqrt_dim', lambda x: mx.sym.contrib.div_sqrt_dim(x), [('x', (2, 3, 8), 'float32')]),
    case('div_sqrt_dim_f64', lambda x: mx.sym.contrib.div_sqrt_dim(x), [('x', (3, 5), 'float64')]),
]

# ---- softmax with a length per row (int32 or int64; no gradient). MXNet 1.9's log_softmax takes no length
# input (use_length=True fails there), so the length cases are softmax's only.
LEN23 = np.array([[5, 1, 3], [0, 2, 4]], dtype='int32')
SM = mx.sym.softmax
CASES += [
    case('softmax_length', lambda x, l: SM(x, l, use_length=True), [('x', (2, 3, 5), 'float32'), ('l', LEN23)]),
    case('softmax_length_f64_int64', lambda x, l: SM(x, l, use_length=True, axis=-1),
         [('x', (2, 3, 5), 'float64'), ('l', LEN23.astype('int64'))]),
    case('softmax_length_axis1_temperature', lambda x, l: SM(x, l, use_length=True, axis=1, temperature=2.0),
         [('x', (2, 4, 3), 'float32', (-3.0, 3.0)), ('l', np.array([[4, 1, 2], [3, 0, 4]], dtype='int32'))]),
    case('softmax_length_1d', lambda x, l: SM(x, l, use_length=True),
         [('x', (6,), 'float32'), ('l', np.array([4], dtype='int32'))]),
    case('softmax_length_dtype', lambda x, l: SM(x, l, use_length=True, dtype='float64'),
         [('x', (2, 4), 'float32'), ('l', np.array([3, 1], dtype='int32'))]),
]
# temperature and dtype (the output's type; the gradient has the data's) on both.
for fn in ['softmax', 'log_softmax']:
    f = getattr(mx.sym, fn)
    CASES += [
        case(fn + '_temperature', lambda x, f=f: f(x, temperature=0.5), [('x', (3, 4), 'float32')]),
        case(fn + '_dtype_f64', lambda x, f=f: f(x, dtype='float64'), [('x', (3, 4), 'float32')]),
        case(fn + '_dtype_f32_axis0', lambda x, f=f: f(x, axis=0, dtype='float32'), [('x', (3, 4), 'float64')]),
    ]
