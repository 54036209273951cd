"""Deconvolution (and the convolutions it is built from)."""
import mxnet as mx

from make_op_cases import case

def deconv(**kw):
    return lambda x, w, *b: mx.sym.Deconvolution(x, w, *b, **kw)

CASES = [
    case('deconv_basic', deconv(kernel=(3, 3), num_filter=4), [('x', (2, 3, 5, 5), 'float32'), ('w', (3, 4, 3, 3), 'float32')]),
    case('deconv_stride2_pad', deconv(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=2),
         [('x', (1, 3, 4, 4), 'float32'), ('w', (3, 2, 4, 4), 'float32')]),
    case('deconv_adj', deconv(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1), num_filter=2),
         [('x', (1, 2, 4, 3), 'float32'), ('w', (2, 2, 3, 3), 'float32')]),
    case('deconv_bias', deconv(kernel=(2, 2), stride=(2, 2), num_filter=3, no_bias=False),
         [('x', (2, 4, 3, 3), 'float32'), ('w', (4, 3, 2, 2), 'float32'), ('b', (3,), 'float32')]),
    case('deconv_groups', deconv(kernel=(3, 3), num_filter=4, num_group=2, pad=(1, 1)),
         [('x', (1, 4, 5, 5), 'float32'), ('w', (4, 2, 3, 3), 'float32')]),
    case('deconv_dilate', deconv(kernel=(3, 3), dilate=(2, 2), num_filter=2),
         [('x', (1, 2, 4, 4), 'float32'), ('w', (2, 2, 3, 3), 'float32')]),
    case('deconv_target', deconv(kernel=(4, 4), stride=(2, 2), target_shape=(9, 9), num_filter=2),
         [('x', (1, 3, 4, 4), 'float32'), ('w', (3, 2, 4, 4), 'float32')]),
    case('deconv_f64', deconv(kernel=(3, 3), stride=(2, 2), num_filter=2, no_bias=False),
         [('x', (2, 3, 3, 4), 'float64'), ('w', (3, 2, 3, 3), 'float64'), ('b', (2,), 'float64')]),
]

# 1-D convolution and pooling (NCW), run as 2-D on (N, C, 1, W) views.
CASES += [
    case('conv1d', lambda x, w, b: mx.sym.Convolution(x, w, b, kernel=(3,), num_filter=4),
         [('x', (2, 3, 9), 'float32'), ('w', (4, 3, 3), 'float32'), ('b', (4,), 'float32')]),
    case('conv1d_stride_pad_dilate', lambda x, w: mx.sym.Convolution(x, w, kernel=(3,), stride=(2,), pad=(2,), dilate=(2,),
                                                                     num_filter=2, no_bias=True),
         [('x', (1, 2, 11), 'float64'), ('w', (2, 2, 3), 'float64')]),
    case('conv1d_groups', lambda x, w: mx.sym.Convolution(x, w, kernel=(5,), num_filter=4, num_group=2, no_bias=True, pad=(2,)),
         [('x', (2, 4, 8), 'float32'), ('w', (4, 2, 5), 'float32')]),
    case('pool1d_max', lambda x: mx.sym.Pooling(x, kernel=(3,), stride=(2,), pool_type='max'), [('x', (2, 3, 9), 'float32')]),
    case('pool1d_avg_pad', lambda x: mx.sym.Pooling(x, kernel=(2,), stride=(2,), pad=(1,), pool_type='avg'),
         [('x', (1, 2, 7), 'float64')]),
    case('pool1d_global', lambda x: mx.sym.Pooling(x, kernel=(1,), global_pool=True, pool_type='avg'), [('x', (2, 3, 6), 'float32')]),
    case('pool1d_global_max_nokernel', lambda x: mx.sym.Pooling(x, global_pool=True, pool_type='max'), [('x', (2, 3, 6), 'float32')]),
]
