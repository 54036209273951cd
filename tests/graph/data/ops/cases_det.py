"""Detection, indexing and attention operators: box_nms (and its alias), box_decode, box_encode, ROIAlign,
take, gather_nd, one_hot and the four interleaved attention products.

Scores of box_nms are distinct within a batch (MXNet orders equal scores by its stable sort; troupe does too,
but the cases do not lean on it). Index arrays are integers or integer-valued floats; the float ones get a
(zero) gradient where MXNet gives one."""
import mxnet as mx
import numpy as np

from make_op_cases import case

CASES = []
R = np.random.RandomState(7)


# ---- box_nms: rows [id, score, x1, y1, x2, y2] (corner) or [id, score, cx, cy, w, h] (center).
def boxes(batch_shape, n, fmt='corner', ids=3, dtype='float32', width=6):
    shape = tuple(batch_shape) + (n,)
    out = np.zeros(shape + (width,), dtype='float64')
    out[..., 0] = R.randint(0, ids, size=shape)
    # Distinct scores per batch, some below 0 (invalid under the default valid_thresh).
    flat = out.reshape(-1, n, width)
    for b in range(flat.shape[0]):
        flat[b, :, 1] = R.permutation(n) / float(n) - 0.15 + 0.01 * R.uniform(size=n)
    x1 = R.uniform(0.0, 0.6, size=shape)
    y1 = R.uniform(0.0, 0.6, size=shape)
    w = R.uniform(0.15, 0.5, size=shape)
    h = R.uniform(0.15, 0.5, size=shape)
    if fmt == 'corner':
        out[..., 2:6] = np.stack([x1, y1, x1 + w, y1 + h], axis=-1)
    else:
        out[..., 2:6] = np.stack([x1 + w / 2, y1 + h / 2, w, h], axis=-1)
    if width > 6:
        out[..., 6:] = R.uniform(-1, 1, size=shape + (width - 6,))
    return out.astype(dtype)


def nms(**kw):
    return lambda x: mx.sym.contrib.box_nms(x, **kw)


B2 = boxes((), 10)
B3 = boxes((2,), 9)
B3C = boxes((2,), 9, fmt='center')
# The two best-scored boxes start left of 0.
NEG = boxes((), 8)
NEG[np.argsort(-NEG[:, 1])[:2], 2] -= 0.7
CASES += [
    case('box_nms_2d', nms(), [('x', B2)]),
    case('box_nms_thresh', nms(overlap_thresh=0.2), [('x', B2)]),
    case('box_nms_batch_class', nms(overlap_thresh=0.3, id_index=0), [('x', B3)]),
    case('box_nms_force', nms(overlap_thresh=0.3, id_index=0, force_suppress=True), [('x', B3)]),
    case('box_nms_background', nms(overlap_thresh=0.3, id_index=0, background_id=1), [('x', B3)]),
    case('box_nms_topk', nms(overlap_thresh=0.3, topk=4), [('x', B3)]),
    case('box_nms_topk_class', nms(overlap_thresh=0.25, topk=5, id_index=0), [('x', B3)]),
    case('box_nms_valid_thresh', nms(valid_thresh=0.35), [('x', B3)]),
    case('box_nms_topk0', nms(topk=0, out_format='center'), [('x', B2)]),
    case('box_nms_none_valid', nms(valid_thresh=5.0), [('x', B3)]),
    case('box_nms_center_in', nms(overlap_thresh=0.3, in_format='center'), [('x', B3C)]),
    case('box_nms_center_to_corner', nms(overlap_thresh=0.3, in_format='center', out_format='corner', id_index=0),
         [('x', B3C)]),
    case('box_nms_corner_to_center', nms(overlap_thresh=0.3, out_format='center'), [('x', B3)]),
    # A negative first coordinate: MXNet leaves such a row unconverted.
    case('box_nms_negative_coord_to_center', nms(overlap_thresh=0.4, out_format='center'), [('x', NEG)]),
    case('box_nms_4d_f64', nms(overlap_thresh=0.3, id_index=0), [('x', boxes((2, 2), 6, dtype='float64'))]),
    # Another layout: coordinates first, score at 4, class at 5, one extra value.
    case('box_nms_layout', nms(overlap_thresh=0.3, coord_start=0, score_index=4, id_index=5),
         [('x', boxes((2,), 7, width=7)[..., [2, 3, 4, 5, 1, 0, 6]].copy())]),
    case('box_nms_alias', lambda x: mx.sym.contrib.box_non_maximum_suppression(x, overlap_thresh=0.3),
         [('x', B2)]),
]

# ---- box_decode: offsets (B, N, 4) against anchors (1, N, 4).
ANC_CENTER = np.concatenate([R.uniform(0.2, 0.8, size=(1, 5, 2)), R.uniform(0.1, 0.4, size=(1, 5, 2))], axis=-1)
_x1y1 = R.uniform(0.0, 0.5, size=(1, 5, 2))
ANC_CORNER = np.concatenate([_x1y1, _x1y1 + R.uniform(0.1, 0.4, size=(1, 5, 2))], axis=-1)
CASES += [
    case('box_decode_center', lambda x, a: mx.sym.contrib.box_decode(x, a),
         [('x', (2, 5, 4), 'float32'), ('a', ANC_CENTER.astype('float32'))]),
    case('box_decode_corner_std', lambda x, a: mx.sym.contrib.box_decode(x, a, std0=0.1, std1=0.1, std2=0.2,
                                                                           std3=0.2, format='corner'),
         [('x', (2, 5, 4), 'float32'), ('a', ANC_CORNER.astype('float32'))]),
    case('box_decode_clip', lambda x, a: mx.sym.contrib.box_decode(x, a, clip=0.3, format='corner'),
         [('x', (2, 5, 4), 'float32'), ('a', ANC_CORNER.astype('float32'))]),
    case('box_decode_clip_center_f64', lambda x, a: mx.sym.contrib.box_decode(x, a, clip=0.2, std2=2.0),
         [('x', (3, 5, 4), 'float64'), ('a', ANC_CENTER.astype('float64'))]),
]


# ---- box_encode: samples and matches as float arrays (MXNet's single dtype for all six inputs).
def encode_inputs(dtype):
    x1y1 = R.uniform(0.0, 0.5, size=(2, 4, 2))
    anchors = np.concatenate([x1y1, x1y1 + R.uniform(0.1, 0.4, size=(2, 4, 2))], axis=-1)
    r1 = R.uniform(0.0, 0.5, size=(2, 3, 2))
    refs = np.concatenate([r1, r1 + R.uniform(0.1, 0.4, size=(2, 3, 2))], axis=-1)
    return [('samples', np.array([[1, -1, 0, 1], [1, 1, -1, 0]], dtype=dtype)),
            ('matches', np.array([[0, 2, 1, 2], [1, 0, 2, 2]], dtype=dtype)),
            ('anchors', anchors.astype(dtype)), ('refs', refs.astype(dtype)),
            ('means', np.array([0.0, 0.1, -0.1, 0.05], dtype=dtype)),
            ('stds', np.array([0.1, 0.1, 0.2, 0.2], dtype=dtype))]


CASES += [
    case('box_encode', lambda s, m, a, r, mu, sd: mx.sym.contrib.box_encode(s, m, a, r, mu, sd),
         encode_inputs('float32')),
    case('box_encode_f64', lambda s, m, a, r, mu, sd: mx.sym.contrib.box_encode(s, m, a, r, mu, sd),
         encode_inputs('float64')),
]


# ---- ROIAlign: data (B, C, H, W), rois [batch, x1, y1, x2, y2] in image coordinates.
def rois(n, batch, extent, dtype='float32'):
    x1 = R.uniform(-1.0, extent * 0.6, size=n)
    y1 = R.uniform(-1.0, extent * 0.6, size=n)
    w = R.uniform(1.0, extent * 0.6, size=n)
    h = R.uniform(1.0, extent * 0.6, size=n)
    b = R.randint(0, batch, size=n)
    return np.stack([b, x1, y1, x1 + w, y1 + h], axis=-1).astype(dtype)


def roi_align(**kw):
    return lambda d, r: mx.sym.contrib.ROIAlign(d, r, **kw)


CASES += [
    case('roi_align', roi_align(pooled_size=(2, 3), spatial_scale=0.5),
         [('d', (2, 3, 6, 7), 'float32'), ('r', rois(4, 2, 14.0))]),
    case('roi_align_sample2', roi_align(pooled_size=(3, 2), spatial_scale=0.5, sample_ratio=2),
         [('d', (2, 2, 6, 7), 'float32'), ('r', rois(3, 2, 14.0))]),
    case('roi_align_aligned', roi_align(pooled_size=(2, 2), spatial_scale=1.0, aligned=True),
         [('d', (1, 2, 5, 6), 'float32'), ('r', rois(3, 1, 6.0))]),
    case('roi_align_aligned_sample3_f64', roi_align(pooled_size=(2, 3), spatial_scale=0.25, sample_ratio=3,
                                                    aligned=True),
         [('d', (2, 2, 5, 5), 'float64'), ('r', rois(3, 2, 20.0, 'float64'))]),
    case('roi_align_position_sensitive', roi_align(pooled_size=(2, 2), spatial_scale=0.5, position_sensitive=True),
         [('d', (2, 8, 6, 6), 'float32'), ('r', rois(3, 2, 12.0))]),
    case('roi_align_ps_f64', roi_align(pooled_size=(1, 2), spatial_scale=1.0, position_sensitive=True,
                                       sample_ratio=1),
         [('d', (1, 4, 4, 5), 'float64'), ('r', rois(2, 1, 5.0, 'float64'))]),
    # Small ROIs (made 1x1 without `aligned`) and a ROI beyond the map.
    case('roi_align_small_and_outside', roi_align(pooled_size=(2, 2), spatial_scale=1.0),
         [('d', (1, 2, 4, 4), 'float32'),
          ('r', np.array([[0, 1.2, 1.1, 1.5, 1.3], [0, 2.5, 2.0, 6.5, 7.0], [0, -2.0, -1.5, 0.5, 0.8]],
                         dtype='float32'))]),
]

# ---- take
I5 = np.array([2, 0, 3, 2, 1], dtype='int32')
OUT_OF_RANGE = np.array([[-5, 4], [7, -1], [2, 0]], dtype='int32')
CASES += [
    case('take', lambda a, i: mx.sym.take(a, i), [('a', (4, 3), 'float32'), ('i', I5)]),
    case('take_clip_out_of_range', lambda a, i: mx.sym.take(a, i, mode='clip'),
         [('a', (4, 3), 'float32'), ('i', OUT_OF_RANGE)]),
    case('take_wrap', lambda a, i: mx.sym.take(a, i, mode='wrap'), [('a', (4, 3), 'float32'), ('i', OUT_OF_RANGE)]),
    case('take_raise', lambda a, i: mx.sym.take(a, i, mode='raise'), [('a', (4, 2, 3), 'float32'), ('i', I5)]),
    case('take_axis1', lambda a, i: mx.sym.take(a, i, axis=1), [('a', (2, 4, 3), 'float32'), ('i', I5)]),
    case('take_axis1_wrap_2d', lambda a, i: mx.sym.take(a, i, axis=1, mode='wrap'),
         [('a', (2, 4, 3), 'float64'), ('i', OUT_OF_RANGE)]),
    case('take_axis_neg1_clip', lambda a, i: mx.sym.take(a, i, axis=-1),
         [('a', (2, 3, 4), 'float32'), ('i', OUT_OF_RANGE)]),
    case('take_axis_neg2_raise', lambda a, i: mx.sym.take(a, i, axis=-2, mode='raise'),
         [('a', (2, 5, 3), 'float32'), ('i', np.array([[4, 0], [1, 4]], dtype='int64'))]),
    # Float indices (MXNet's default index type) get a zero gradient.
    case('take_float_indices', lambda a, i: mx.sym.take(a, i), [('a', (5, 2), 'float32'),
                                                               ('i', np.array([3, 1, 3, 4], dtype='float32'))]),
    case('take_float_indices_no_grad_f64', lambda a, i: mx.sym.take(a, i, axis=1),
         [('a', (3, 4), 'float64'), ('i', np.array([[0, 3, 3], [1, 1, 2]], dtype='float64'))], no_grad=['i']),
    case('take_int_data', lambda a, i: mx.sym.take(a, i), [('a', (4, 3), 'int32'), ('i', I5)]),
    case('take_1d', lambda a, i: mx.sym.take(a, i, mode='wrap'), [('a', (6,), 'float32'), ('i', OUT_OF_RANGE)]),
]

# ---- gather_nd: indices (M, ...) address data's first M axes.
CASES += [
    case('gather_nd', lambda d, i: mx.sym.gather_nd(d, i),
         [('d', (3, 4, 2), 'float32'), ('i', np.array([[0, 2, 1, 2, 0], [3, 1, 0, 1, 3]], dtype='int32'))]),
    case('gather_nd_one_axis', lambda d, i: mx.sym.gather_nd(d, i),
         [('d', (3, 4, 2), 'float32'), ('i', np.array([[[2, 0, 2], [1, 1, 0]]], dtype='int32'))]),
    case('gather_nd_full_f64', lambda d, i: mx.sym.gather_nd(d, i),
         [('d', (3, 4), 'float64'), ('i', np.array([[0, 2, 2, 1], [3, 0, 0, 2]], dtype='int64'))]),
    case('gather_nd_float_indices', lambda d, i: mx.sym.gather_nd(d, i),
         [('d', (2, 3, 2), 'float32'), ('i', np.array([[1, 0, 1], [2, 2, 0]], dtype='float32'))]),
    # Negative indices count from the end (forward only: MXNet's backward does not wrap them).
    case('gather_nd_negative', lambda d, i: mx.sym.gather_nd(d, i),
         [('d', (3, 4, 2), 'float32'), ('i', np.array([[-1, 0, -3], [-4, 3, -2]], dtype='int32'))], backward=False),
    case('gather_nd_int_data', lambda d, i: mx.sym.gather_nd(d, i),
         [('d', (3, 4), 'int32'), ('i', np.array([[2, 0], [1, 3]], dtype='int32'))]),
]

# ---- one_hot
OH = np.array([[1, 0, 3], [4, -1, 2]], dtype='int32')
CASES += [
    case('one_hot', lambda i: mx.sym.one_hot(i, depth=4), [('i', OH)]),
    case('one_hot_values_int32', lambda i: mx.sym.one_hot(i, depth=5, on_value=8, off_value=1, dtype='int32'),
         [('i', OH)]),
    case('one_hot_f64', lambda i: mx.sym.one_hot(i, depth=3, on_value=-0.5, off_value=0.25, dtype='float64'),
         [('i', np.array([2, 0, 1, 1], dtype='int64'))]),
    case('one_hot_uint8', lambda i: mx.sym.one_hot(i, depth=3, dtype='uint8'), [('i', OH)]),
    case('one_hot_int64', lambda i: mx.sym.one_hot(i, depth=2, on_value=7, dtype='int64'),
         [('i', np.array([[0], [1], [2]], dtype='int32'))]),
    # Float indices get a zero gradient.
    case('one_hot_float_indices', lambda i: mx.sym.one_hot(i, depth=4, on_value=2.5),
         [('i', np.array([[3, 0], [1, 5]], dtype='float32'))]),
]

# ---- interleaved attention products. head_dim is a perfect square so that 1 / sqrt(head_dim) is exact.
QK = mx.sym.contrib.interleaved_matmul_selfatt_qk
VA = mx.sym.contrib.interleaved_matmul_selfatt_valatt
EQK = mx.sym.contrib.interleaved_matmul_encdec_qk
EVA = mx.sym.contrib.interleaved_matmul_encdec_valatt
CASES += [
    # seq 3, batch 2, heads 2, head_dim 4
    case('selfatt_qk', lambda x: QK(x, heads=2), [('x', (3, 2, 24), 'float32')]),
    # seq 4, batch 1, heads 4, head_dim 4
    case('selfatt_qk_heads4', lambda x: QK(x, heads=4), [('x', (4, 1, 48), 'float32')]),
    case('selfatt_valatt', lambda x, a: VA(x, a, heads=2), [('x', (3, 2, 24), 'float32'), ('a', (4, 3, 3), 'float32')]),
    case('selfatt_valatt_heads1', lambda x, a: VA(x, a, heads=1),
         [('x', (5, 2, 12), 'float32'), ('a', (2, 5, 5), 'float32')]),
    # query seq 3, key seq 4, batch 2, heads 2, head_dim 4
    case('encdec_qk', lambda q, kv: EQK(q, kv, heads=2), [('q', (3, 2, 8), 'float32'), ('kv', (4, 2, 16), 'float32')]),
    case('encdec_qk_heads1', lambda q, kv: EQK(q, kv, heads=1),
         [('q', (2, 3, 9), 'float32'), ('kv', (5, 3, 18), 'float32')]),
    case('encdec_valatt', lambda kv, a: EVA(kv, a, heads=2),
         [('kv', (4, 2, 16), 'float32'), ('a', (4, 3, 4), 'float32')]),
    case('encdec_valatt_heads4', lambda kv, a: EVA(kv, a, heads=4),
         [('kv', (2, 1, 32), 'float32'), ('a', (4, 3, 2), 'float32')]),
    # The attention block: scores, then the values weighted by them.
    case('selfatt_chain', lambda x: VA(x, mx.sym.softmax(QK(x, heads=2), axis=-1), heads=2),
         [('x', (3, 2, 24), 'float32')]),
]
