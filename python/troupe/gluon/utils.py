"""gluon.utils: splitting batches across devices, gradient clipping."""
import math

from .. import ndarray as nd


def split_data(data, num_slice, batch_axis=0, even_split=True):
    size = data.shape[batch_axis]
    if even_split and size % num_slice != 0:
        raise ValueError("data with shape %s cannot be evenly split into %d slices along axis %d. Use a batch size "
                         "that's multiple of %d or set even_split=False to allow uneven partitioning of data." %
                         (str(data.shape), num_slice, batch_axis, num_slice))
    step = size // num_slice
    if batch_axis != 0:
        raise NotImplementedError("split_data: batch_axis other than 0 is not available yet")
    return [data[i * step:(i + 1) * step if i < num_slice - 1 else size] for i in range(num_slice)]


def split_and_load(data, ctx_list, batch_axis=0, even_split=True):
    if not isinstance(data, nd.NDArray):
        data = nd.array(data, ctx=ctx_list[0])
    if len(ctx_list) == 1:
        return [data.as_in_context(ctx_list[0])]
    return [s.as_in_context(c) for s, c in zip(split_data(data, len(ctx_list), batch_axis, even_split), ctx_list)]


def clip_global_norm(arrays, max_norm, check_isfinite=True):
    total = math.sqrt(sum(float((a * a).sum().asscalar()) for a in arrays))
    if check_isfinite and not math.isfinite(total):
        import warnings
        warnings.warn("nan or inf is detected. Clipping results will be undefined.", stacklevel=2)
    scale = max_norm / (total + 1e-8)
    if scale < 1.0:
        for a in arrays:
            a *= scale
    return total
