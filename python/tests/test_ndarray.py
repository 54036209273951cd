"""mx.nd against NumPy: creation, dtypes, arithmetic, indexing, operators from the registry, save/load, errors."""
import numpy as np
import pytest

import troupe as mx


def rand(*shape):
    return np.random.RandomState(sum(shape) + len(shape)).uniform(-1, 1, size=shape).astype(np.float32)


def test_array_roundtrip_keeps_values_shape_dtype_and_context():
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8):
        src = (rand(3, 4) * 100).astype(dtype)
        a = mx.nd.array(src, dtype=dtype)
        assert a.shape == (3, 4) and a.dtype == np.dtype(dtype) and a.context == mx.cpu()
        np.testing.assert_array_equal(a.asnumpy(), src)
    # Lists and NumPy arrays become float32 unless dtype says otherwise, as in MXNet.
    assert mx.nd.array([[1, 2], [3, 4]]).dtype == np.float32
    assert mx.nd.array(np.arange(3)).dtype == np.float32
    assert mx.nd.array(mx.nd.array(np.arange(3), dtype="int64")).dtype == np.int64


def test_creation_functions():
    np.testing.assert_array_equal(mx.nd.zeros((2, 3)).asnumpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(mx.nd.ones(4, dtype="float64").asnumpy(), np.ones(4))
    np.testing.assert_array_equal(mx.nd.full((2, 2), 7).asnumpy(), np.full((2, 2), 7, np.float32))
    np.testing.assert_array_equal(mx.nd.arange(0, 6, 2).asnumpy(), np.array([0, 2, 4], np.float32))
    u = mx.nd.random.uniform(-2, 3, shape=(1000,)).asnumpy()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.2


def test_arithmetic_broadcasts_and_takes_scalars():
    x, y = rand(3, 4), rand(1, 4)
    a, b = mx.nd.array(x), mx.nd.array(y)
    for got, want in [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a / (b + 3), x / (y + 3)), (a + 2, x + 2),
                      (2 - a, 2 - x), (a * 3, x * 3), (1 / (a + 3), 1 / (x + 3)), (a ** 2, x ** 2), (-a, -x),
                      (abs(a), abs(x)), (a > b, (x > y).astype(np.float32)), (a <= 0, (x <= 0).astype(np.float32))]:
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6, atol=1e-7)
    c = a.copy()
    c += 1
    c *= 2
    np.testing.assert_allclose(c.asnumpy(), (x + 1) * 2, rtol=1e-6)
    np.testing.assert_allclose(a.asnumpy(), x)  # the copy was independent


def test_indexing_views_and_copies():
    x = rand(4, 5)
    a = mx.nd.array(x)
    np.testing.assert_array_equal(a[1].asnumpy(), x[1])
    np.testing.assert_array_equal(a[-1].asnumpy(), x[-1])
    np.testing.assert_array_equal(a[1:3].asnumpy(), x[1:3])
    np.testing.assert_array_equal(a[1:3, 2].asnumpy(), x[1:3, 2])
    np.testing.assert_array_equal(a[:, ::2].asnumpy(), x[:, ::2])
    np.testing.assert_array_equal(a[[0, 2]].asnumpy(), x[[0, 2]])
    # A row is a view: writing it writes the array.
    a[2] = 9
    a[0:1] = mx.nd.ones((1, 5))
    x[2] = 9
    x[0] = 1
    np.testing.assert_array_equal(a.asnumpy(), x)
    a[:] = 0.5
    assert float(a.sum().asscalar()) == pytest.approx(0.5 * 20)
    with pytest.raises(IndexError):
        a[4]


def test_registered_operators_and_fluent_methods():
    x = rand(2, 6)
    a = mx.nd.array(x)
    np.testing.assert_allclose(mx.nd.relu(a).asnumpy(), np.maximum(x, 0))
    np.testing.assert_allclose(a.exp().asnumpy(), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(a.sum(axis=1).asnumpy(), x.sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(mx.nd.softmax(a, axis=-1).asnumpy(),
                               np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True), rtol=1e-5)
    w, bias = rand(3, 6), rand(3)
    fc = mx.nd.FullyConnected(a, mx.nd.array(w), mx.nd.array(bias), num_hidden=3)
    np.testing.assert_allclose(fc.asnumpy(), x @ w.T + bias, rtol=1e-5, atol=1e-6)
    # Inputs by name, and a tuple parameter.
    fc2 = mx.nd.FullyConnected(data=a, weight=mx.nd.array(w), no_bias=True, num_hidden=3)
    np.testing.assert_allclose(fc2.asnumpy(), x @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(a.reshape((3, 4)).asnumpy(), x.reshape(3, 4))
    np.testing.assert_array_equal(mx.nd.transpose(a, axes=(1, 0)).asnumpy(), x.T)
    parts = mx.nd.split(a, num_outputs=2, axis=1)
    assert len(parts) == 2
    np.testing.assert_array_equal(parts[1].asnumpy(), x[:, 3:])
    np.testing.assert_array_equal(mx.nd.concat(a, a, dim=0).asnumpy(), np.concatenate([x, x]))
    out = mx.nd.zeros((2, 6))
    mx.nd.relu(a, out=out)
    np.testing.assert_allclose(out.asnumpy(), np.maximum(x, 0))
    assert "num_hidden" in mx.nd.FullyConnected.__doc__


def test_save_and_load(tmp_path):
    d = {"w": mx.nd.array(rand(2, 3)), "b": mx.nd.array(np.arange(4, dtype=np.int64))}
    mx.nd.save(tmp_path / "d.params", d)
    back = mx.nd.load(tmp_path / "d.params")
    assert sorted(back) == ["b", "w"]
    for k in d:
        np.testing.assert_array_equal(back[k].asnumpy(), d[k].asnumpy())
    mx.nd.save(tmp_path / "l.params", [d["w"]])
    assert isinstance(mx.nd.load(tmp_path / "l.params"), list)


def test_errors_are_mxnet_errors():
    a = mx.nd.ones((2, 3))
    with pytest.raises(mx.MXNetError, match="num_hidden"):
        mx.nd.FullyConnected(a, num_hidden=0)
    with pytest.raises(mx.MXNetError, match="no_such_input"):
        mx.nd.FullyConnected(a, no_such_input=a, num_hidden=2)
    with pytest.raises(RuntimeError):  # MXNetError is a RuntimeError
        mx.nd.dot(a, a)
    with pytest.raises(mx.MXNetError, match="missing.params"):
        mx.nd.load("/nonexistent/missing.params")


def test_context_blocks_and_waitall():
    with mx.cpu(0):
        assert mx.current_context() == mx.cpu(0)
        a = mx.nd.ones((2,))
    assert a.context == mx.cpu(0)
    b = a
    for _ in range(50):
        b = b * 1.01
    mx.nd.waitall()
    assert b.asnumpy()[0] == pytest.approx(1.01 ** 50, rel=1e-5)
