"""Transforms of image samples (HWC uint8 NDArrays)."""
import numpy as np


class Compose:
    def __init__(self, transforms):
        self._transforms = list(transforms)

    def __call__(self, x):
        for t in self._transforms:
            x = t(x)
        return x


class ToTensor:
    """HWC uint8 in [0, 255] -> CHW float32 in [0, 1)."""

    def __call__(self, x):
        from ....ndarray import array
        a = x.asnumpy() if hasattr(x, "asnumpy") else np.asarray(x)
        a = a.astype(np.float32) / 255.0
        return array(np.moveaxis(a, -1, -3) if a.ndim >= 3 else a)


class Normalize:
    def __init__(self, mean=0.0, std=1.0):
        self._mean, self._std = np.asarray(mean, np.float32), np.asarray(std, np.float32)

    def __call__(self, x):
        from ....ndarray import array
        a = x.asnumpy()
        shape = (-1,) + (1,) * (a.ndim - 1)
        return array((a - self._mean.reshape(shape)) / self._std.reshape(shape))


class Cast:
    def __init__(self, dtype="float32"):
        self._dtype = dtype

    def __call__(self, x):
        return x.astype(self._dtype)
