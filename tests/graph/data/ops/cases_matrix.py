"""Shape and index operators (transpose, SwapAxis, expand_dims, squeeze, reshape_like, reverse, tile, repeat,
slice, slice_axis, slice_like, SliceChannel, stack): every parameter form, alias names, several dtypes.
Integer inputs get no gradient (forward only)."""
import mxnet as mx

from make_op_cases import case

F32 = 'float32'


def forward_only(name, build, inputs):
    return case(name, build, inputs, backward=False)


CASES = [
    # transpose
    case('transpose_default', lambda x: mx.sym.transpose(x), [('x', (2, 3, 4), F32)]),
    case('transpose_axes', lambda x: mx.sym.transpose(x, axes=(0, 2, 1)), [('x', (2, 3, 4), F32)]),
    case('transpose_4d', lambda x: mx.sym.transpose(x, axes=(2, 0, 3, 1)), [('x', (2, 3, 4, 5), 'float64')]),
    case('transpose_2d', lambda x: mx.sym.transpose(x), [('x', (5, 7), F32)]),
    case('transpose_identity', lambda x: mx.sym.transpose(x, axes=(0, 1, 2)), [('x', (2, 1, 3), F32)]),
    forward_only('transpose_int32', lambda x: mx.sym.transpose(x, axes=(1, 0, 2)), [('x', (2, 3, 4), 'int32')]),
    forward_only('transpose_uint8', lambda x: mx.sym.transpose(x), [('x', (3, 4), 'uint8')]),
    # SwapAxis / swapaxes
    case('swapaxis', lambda x: mx.sym.SwapAxis(x, dim1=0, dim2=2), [('x', (2, 3, 4), F32)]),
    case('swapaxes_alias_neg', lambda x: mx.sym.swapaxes(x, dim1=-1, dim2=1), [('x', (2, 3, 4, 2), F32)]),
    case('swapaxis_default', lambda x: mx.sym.SwapAxis(x), [('x', (3, 4), 'float64')]),
    forward_only('swapaxis_int64', lambda x: mx.sym.SwapAxis(x, dim1=1, dim2=0), [('x', (3, 5), 'int64')]),
    # expand_dims
    case('expand_dims_0', lambda x: mx.sym.expand_dims(x, axis=0), [('x', (2, 3), F32)]),
    case('expand_dims_end', lambda x: mx.sym.expand_dims(x, axis=2), [('x', (2, 3), F32)]),
    case('expand_dims_neg', lambda x: mx.sym.expand_dims(x, axis=-1), [('x', (2, 3), 'float64')]),
    case('expand_dims_neg_first', lambda x: mx.sym.expand_dims(x, axis=-3), [('x', (2, 3), F32)]),
    forward_only('expand_dims_int8', lambda x: mx.sym.expand_dims(x, axis=1), [('x', (2, 3), 'int8')]),
    # squeeze
    case('squeeze_all', lambda x: mx.sym.squeeze(x), [('x', (1, 3, 1, 2), F32)]),
    case('squeeze_axis', lambda x: mx.sym.squeeze(x, axis=2), [('x', (1, 3, 1, 2), F32)]),
    case('squeeze_axes_neg', lambda x: mx.sym.squeeze(x, axis=(0, -2)), [('x', (1, 3, 1, 2), 'float64')]),
    case('squeeze_to_one', lambda x: mx.sym.squeeze(x), [('x', (1, 1, 1), F32)]),
    forward_only('squeeze_int32', lambda x: mx.sym.squeeze(x, axis=(0,)), [('x', (1, 4), 'int32')]),
    # reshape_like
    case('reshape_like', lambda a, b: mx.sym.reshape_like(a, b), [('a', (6,), F32), ('b', (3, 2), F32)]),
    case('reshape_like_ranges', lambda a, b: mx.sym.reshape_like(a, b, lhs_begin=0, lhs_end=1, rhs_begin=0,
                                                                 rhs_end=2),
         [('a', (30, 7), F32), ('b', (15, 2, 4), F32)]),
    case('reshape_like_neg_none', lambda a, b: mx.sym.reshape_like(a, b, lhs_begin=-1, lhs_end=None,
                                                                   rhs_begin=1, rhs_end=None),
         [('a', (3, 12), 'float64'), ('b', (4, 2, 2, 3), 'float64')]),
    case('reshape_like_int_rhs', lambda a, b: mx.sym.reshape_like(a, b), [('a', (2, 6), F32), ('b', (4, 3), 'int32')]),
    # reverse / flip
    case('reverse_0', lambda x: mx.sym.reverse(x, axis=0), [('x', (3, 4), F32)]),
    case('reverse_two_axes', lambda x: mx.sym.reverse(x, axis=(0, 2)), [('x', (2, 3, 4), F32)]),
    case('flip_alias', lambda x: mx.sym.flip(x, axis=1), [('x', (2, 3, 4), 'float64')]),
    case('reverse_twice_same_axis', lambda x: mx.sym.reverse(x, axis=(1, 1)), [('x', (2, 3), F32)]),
    forward_only('reverse_int32', lambda x: mx.sym.reverse(x, axis=(1,)), [('x', (2, 5), 'int32')]),
    # tile
    case('tile_same_rank', lambda x: mx.sym.tile(x, reps=(2, 3)), [('x', (2, 3), F32)]),
    case('tile_longer_reps', lambda x: mx.sym.tile(x, reps=(2, 1, 2)), [('x', (3, 2), F32)]),
    case('tile_shorter_reps', lambda x: mx.sym.tile(x, reps=(3,)), [('x', (2, 2, 3), 'float64')]),
    case('tile_ones', lambda x: mx.sym.tile(x, reps=(1, 1)), [('x', (2, 3), F32)]),
    forward_only('tile_uint8', lambda x: mx.sym.tile(x, reps=(2, 2)), [('x', (2, 3), 'uint8')]),
    # repeat
    case('repeat_flat', lambda x: mx.sym.repeat(x, repeats=3), [('x', (2, 3), F32)]),
    case('repeat_axis0', lambda x: mx.sym.repeat(x, repeats=2, axis=0), [('x', (2, 3), F32)]),
    case('repeat_axis_neg', lambda x: mx.sym.repeat(x, repeats=3, axis=-1), [('x', (2, 3, 2), 'float64')]),
    case('repeat_mid', lambda x: mx.sym.repeat(x, repeats=2, axis=1), [('x', (2, 3, 4), F32)]),
    forward_only('repeat_int64', lambda x: mx.sym.repeat(x, repeats=2, axis=1), [('x', (2, 3), 'int64')]),
    # slice / crop
    case('slice_basic', lambda x: mx.sym.slice(x, begin=(0, 1), end=(2, 3)), [('x', (3, 4), F32)]),
    case('slice_partial_dims', lambda x: mx.sym.slice(x, begin=(1,), end=(3,)), [('x', (4, 3, 2), F32)]),
    case('slice_none', lambda x: mx.sym.slice(x, begin=(None, 1), end=(2, None)), [('x', (3, 4), F32)]),
    case('slice_negative', lambda x: mx.sym.slice(x, begin=(-2, -3), end=(None, -1)), [('x', (3, 5), 'float64')]),
    case('slice_step', lambda x: mx.sym.slice(x, begin=(0, 1), end=(5, 6), step=(2, 3)), [('x', (5, 7), F32)]),
    case('slice_neg_step', lambda x: mx.sym.slice(x, begin=(None, None), end=(None, None), step=(-1, -2)),
         [('x', (3, 5), F32)]),
    case('slice_neg_step_bounds', lambda x: mx.sym.slice(x, begin=(3, -1), end=(0, 1), step=(-2, -1)),
         [('x', (5, 4), F32)]),
    case('slice_step_none', lambda x: mx.sym.slice(x, begin=(1, 0), end=(None, 3), step=(None, 2)),
         [('x', (4, 3), F32)]),
    # float64: MXNet's oneDNN slice (float32, unit steps) fails on ends past the dimension ("could not
    # construct a sub-memory"); its own kernel clips them.
    case('slice_clip', lambda x: mx.sym.slice(x, begin=(-10, 1), end=(10, 100)), [('x', (3, 4), 'float64')]),
    case('crop_alias', lambda x: mx.sym.crop(x, begin=(0, None, 1), end=(1, None, 3)), [('x', (2, 3, 4), F32)]),
    forward_only('slice_int32', lambda x: mx.sym.slice(x, begin=(None, -1), end=(None, 0), step=(1, -1)),
                 [('x', (2, 4), 'int32')]),
    # slice_axis
    case('slice_axis', lambda x: mx.sym.slice_axis(x, axis=1, begin=1, end=3), [('x', (2, 4, 3), F32)]),
    case('slice_axis_neg', lambda x: mx.sym.slice_axis(x, axis=-1, begin=-2, end=None), [('x', (2, 4, 3), F32)]),
    case('slice_axis_end_neg', lambda x: mx.sym.slice_axis(x, axis=0, begin=0, end=-1), [('x', (4, 3), 'float64')]),
    forward_only('slice_axis_int8', lambda x: mx.sym.slice_axis(x, axis=0, begin=1, end=None), [('x', (3, 2), 'int8')]),
    # slice_like
    case('slice_like', lambda x, y: mx.sym.slice_like(x, y), [('x', (3, 4), F32), ('y', (2, 3), F32)]),
    case('slice_like_axes', lambda x, y: mx.sym.slice_like(x, y, axes=(0, -1)),
         [('x', (3, 4, 5), F32), ('y', (2, 2, 3), F32)]),
    case('slice_like_fewer_dims', lambda x, y: mx.sym.slice_like(x, y, axes=(1,)),
         [('x', (2, 4, 3), 'float64'), ('y', (5, 2), 'float64')]),
    case('slice_like_int_like', lambda x, y: mx.sym.slice_like(x, y, axes=(0,)),
         [('x', (4, 3), F32), ('y', (2, 7), 'int32')]),
    # SliceChannel / split
    case('slicechannel', lambda x: mx.sym.SliceChannel(x, num_outputs=2), [('x', (2, 4, 3), F32)]),
    case('split_alias_axis0', lambda x: mx.sym.split(x, num_outputs=3, axis=0), [('x', (3, 2), F32)]),
    case('split_squeeze', lambda x: mx.sym.split(x, num_outputs=3, axis=-1, squeeze_axis=True),
         [('x', (2, 4, 3), 'float64')]),
    case('split_one', lambda x: mx.sym.split(x, num_outputs=1, axis=1), [('x', (2, 3), F32)]),
    forward_only('split_int32', lambda x: mx.sym.split(x, num_outputs=2, axis=1, squeeze_axis=True),
                 [('x', (3, 2), 'int32')]),
    # stack
    case('stack_2', lambda a, b: mx.sym.stack(a, b), [('a', (2, 3), F32), ('b', (2, 3), F32)]),
    case('stack_axis1', lambda a, b, c: mx.sym.stack(a, b, c, axis=1),
         [('a', (2, 3), F32), ('b', (2, 3), F32), ('c', (2, 3), F32)]),
    case('stack_axis_neg', lambda a, b: mx.sym.stack(a, b, axis=-1), [('a', (2, 3), 'float64'), ('b', (2, 3), 'float64')]),
    case('stack_one', lambda a: mx.sym.stack(a, axis=0), [('a', (4,), F32)]),
    forward_only('stack_int64', lambda a, b: mx.sym.stack(a, b, axis=2), [('a', (2, 3), 'int64'), ('b', (2, 3), 'int64')]),
]
