"""mx.autograd: record and backward, head gradients, grad_req add, grad, higher order, train mode, errors."""
import numpy as np
import pytest

import troupe as mx


def test_backward_of_a_small_network_matches_numpy():
    rng = np.random.RandomState(0)
    x, w = rng.uniform(-1, 1, (4, 3)).astype(np.float32), rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    a, b = mx.nd.array(x), mx.nd.array(w)
    a.attach_grad()
    b.attach_grad()
    with mx.autograd.record():
        y = mx.nd.FullyConnected(a, b, no_bias=True, num_hidden=2)
        z = (mx.nd.tanh(y) * 2).sum()
    z.backward()
    t = np.tanh(x @ w.T)
    gy = 2 * (1 - t ** 2)
    np.testing.assert_allclose(a.grad.asnumpy(), gy @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.asnumpy(), gy.T @ x, rtol=1e-5, atol=1e-6)


def test_head_gradients_and_grad_req_add():
    x = mx.nd.array([1.0, 2.0, 3.0])
    x.attach_grad(grad_req="add")
    for _ in range(2):
        with mx.autograd.record():
            y = x * x
        y.backward(mx.nd.array([1.0, 0.5, 0.0]))
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * np.array([2.0, 2.0, 0.0]))


def test_grad_and_second_order():
    x = mx.nd.array([0.5, -1.0])
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.sin(x)
        dy = mx.autograd.grad(y, [x], create_graph=True, retain_graph=True)[0]
    dy.backward()
    np.testing.assert_allclose(dy.asnumpy(), np.cos([0.5, -1.0]), rtol=1e-6)
    np.testing.assert_allclose(x.grad.asnumpy(), -np.sin([0.5, -1.0]), rtol=1e-6)


def test_modes():
    assert not mx.autograd.is_recording() and not mx.autograd.is_training()
    with mx.autograd.record():
        assert mx.autograd.is_recording() and mx.autograd.is_training()
        with mx.autograd.pause():
            assert not mx.autograd.is_recording() and not mx.autograd.is_training()
    with mx.autograd.record(train_mode=False):
        assert not mx.autograd.is_training()
    # Dropout drops only in training mode.
    a = mx.nd.ones((1000,))
    assert (mx.nd.Dropout(a, p=0.5).asnumpy() == 1).all()
    with mx.autograd.train_mode():
        dropped = mx.nd.Dropout(a, p=0.5).asnumpy()
    assert 300 < (dropped == 0).sum() < 700


def test_backward_errors():
    x = mx.nd.array([1.0])
    x.attach_grad()
    y = x * 2  # not recorded
    with pytest.raises(mx.MXNetError):
        y.backward()
    with mx.autograd.record():
        z = x * 3
    z.backward()
    with pytest.raises(mx.MXNetError):  # the graph was freed
        z.backward()


def test_custom_function():
    class Div(mx.autograd.Function):
        def forward(self, x, y):
            self.save_for_backward(x, y)
            return x / y, x * y

        def backward(self, dm, dn):
            x, y = self.saved_tensors
            return dm / y + dn * y, dn * x - dm * x / y / y

    xv, yv = np.array([0.5, 1.5, 2.0], np.float32), np.array([1.0, 2.0, 4.0], np.float32)
    x, y = mx.nd.array(xv), mx.nd.array(yv)
    x.attach_grad()
    y.attach_grad()
    with mx.autograd.record():
        m, n = Div()(x, y)
    mx.autograd.backward([m, n])
    np.testing.assert_allclose(m.asnumpy(), xv / yv, rtol=1e-6)
    np.testing.assert_allclose(x.grad.asnumpy(), 1 / yv + yv, rtol=1e-6)
    np.testing.assert_allclose(y.grad.asnumpy(), xv - xv / yv ** 2, rtol=1e-6)
