"""mx.mod.Module (fit, score, predict, checkpoints), mx.io.NDArrayIter, mx.metric, mx.kv, mx.lr_scheduler,
mx.test_utils and the mxnet alias."""
import os
import subprocess
import sys

import numpy as np
import pytest

import troupe as mx


def separable(n=512, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, (n, 10)).astype(np.float32)
    y = (x @ rng.uniform(-1, 1, (10, 3))).argmax(1).astype(np.float32)
    return x, y


def mlp():
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=32, name="fc1")
    net = mx.sym.Activation(net, act_type="relu")
    net = mx.sym.FullyConnected(net, num_hidden=3, name="fc2")
    return mx.sym.SoftmaxOutput(net, name="softmax")


def test_module_fit_score_predict_and_checkpoint(tmp_path):
    np.random.seed(0)  # the iterator's shuffle
    mx.random.seed(0)  # Xavier's draws
    x, y = separable()
    mod = mx.mod.Module(mlp())
    seen = []
    mod.fit(mx.io.NDArrayIter(x, y, batch_size=64, shuffle=True), num_epoch=6, optimizer="sgd",
            optimizer_params={"learning_rate": 0.5, "momentum": 0.9}, initializer=mx.init.Xavier(),
            batch_end_callback=lambda p: seen.append((p.epoch, p.nbatch)),
            epoch_end_callback=mx.callback.do_checkpoint(str(tmp_path / "mlp")))
    assert seen[0] == (0, 0) and seen[-1] == (5, 7) and len(seen) == 48
    acc = dict(mod.score(mx.io.NDArrayIter(x, y, batch_size=64), "acc"))["accuracy"]
    assert acc > 0.85  # a linear 3-class rule in 10 dimensions, 6 epochs; chance is 1/3
    pred = mod.predict(mx.io.NDArrayIter(x, y, batch_size=100))  # another batch size: bound again
    assert pred.shape == (512, 3)
    assert (pred.asnumpy().argmax(1) == y).mean() == pytest.approx(acc)
    sym, arg, aux = mx.model.load_checkpoint(str(tmp_path / "mlp"), 6)
    assert sym.list_arguments() == mlp().list_arguments() and sorted(arg) == ["fc1_bias", "fc1_weight", "fc2_bias",
                                                                                "fc2_weight"]
    back = mx.mod.Module.load(str(tmp_path / "mlp"), 6)
    back.bind([("data", (64, 10))], [("softmax_label", (64,))], for_training=False)
    assert dict(back.score(mx.io.NDArrayIter(x, y, batch_size=64), "acc"))["accuracy"] == pytest.approx(acc)


def test_ndarrayiter_pads_discards_and_rolls_over():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    pad = list(mx.io.NDArrayIter(x, batch_size=4))
    assert [b.pad for b in pad] == [0, 0, 2]
    np.testing.assert_array_equal(pad[-1].data[0].asnumpy().ravel(), [8, 9, 0, 1])
    assert len(list(mx.io.NDArrayIter(x, batch_size=4, last_batch_handle="discard"))) == 2
    it = mx.io.NDArrayIter(x, batch_size=4, last_batch_handle="roll_over")
    assert len(list(it)) == 2
    it.reset()
    first = next(it)
    np.testing.assert_array_equal(first.data[0].asnumpy().ravel(), [8, 9, 0, 1])
    assert it.provide_data[0].shape == (4, 1)


def test_metrics():
    acc = mx.metric.create("acc")
    acc.update([mx.nd.array([0, 1, 2])], [mx.nd.array([[0.9, 0.1, 0], [0.2, 0.7, 0.1], [0.5, 0.4, 0.1]])])
    assert acc.get() == ("accuracy", pytest.approx(2 / 3))
    ce = mx.metric.create("ce")
    ce.update([mx.nd.array([0, 1])], [mx.nd.array([[0.5, 0.5], [0.25, 0.75]])])
    assert ce.get()[1] == pytest.approx(-(np.log(0.5) + np.log(0.75)) / 2)
    mse = mx.metric.MSE()
    mse.update([mx.nd.array([1.0, 2.0])], [mx.nd.array([1.5, 2.0])])
    assert mse.get()[1] == pytest.approx(0.125)
    comp = mx.metric.create(["acc", "mse"])
    assert len(comp.get()[0]) == 2
    with pytest.raises(ValueError):
        mx.metric.create("no_such_metric")


def test_kvstore_sums_pushes_and_applies_an_optimizer():
    kv = mx.kv.create("local")
    assert kv.rank == 0 and kv.num_workers == 1
    kv.init("w", mx.nd.ones((3,)))
    kv.push("w", [mx.nd.ones((3,)) * 2, mx.nd.ones((3,)) * 3])
    out = mx.nd.zeros((3,))
    kv.pull("w", out=out)
    np.testing.assert_array_equal(out.asnumpy(), [5, 5, 5])
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1))
    kv.push("w", mx.nd.ones((3,)))
    kv.pull("w", out=out)
    np.testing.assert_allclose(out.asnumpy(), [4.9, 4.9, 4.9], rtol=1e-6)
    with pytest.raises(ValueError, match="unknown KVStore type"):
        mx.kv.create("no_such_store")
    # A dist store outside a cluster: troupe's error says what is missing (launch the script with troupe launch).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "TROUPE_CLUSTER"))}
    code = "import troupe as mx\ntry:\n    mx.kv.create('dist_sync')\nexcept mx.MXNetError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "cluster token" in out.stdout, out.stdout + out.stderr


def test_lr_schedulers():
    f = mx.lr_scheduler.FactorScheduler(step=10, factor=0.5, base_lr=1.0)
    assert [f(0), f(10), f(25)] == [1.0, 0.5, 0.25]
    m = mx.lr_scheduler.MultiFactorScheduler(step=[5, 8], factor=0.1, base_lr=1.0)
    assert [m(5), m(6), m(9)] == pytest.approx([1.0, 0.1, 0.01])


def test_test_utils():
    data = mx.sym.var("data")
    sym = mx.sym.tanh(data)
    x = np.random.uniform(-1, 1, (3, 4)).astype(np.float32)
    mx.test_utils.check_symbolic_forward(sym, [x], [np.tanh(x)])
    mx.test_utils.check_symbolic_backward(sym, [x], [np.ones_like(x)], [1 - np.tanh(x) ** 2])
    mx.test_utils.check_numeric_gradient(sym, [x])
    with pytest.raises(AssertionError):
        mx.test_utils.assert_almost_equal(np.ones(3), np.zeros(3))
    with mx.test_utils.environment("TROUPE_TEST_ENV_VAR", "1"):
        assert os.environ["TROUPE_TEST_ENV_VAR"] == "1"
    assert "TROUPE_TEST_ENV_VAR" not in os.environ


def test_mxnet_alias_gives_troupes_modules():
    alias = os.path.join(os.path.dirname(__file__), "..", "mxnet_alias")
    code = ("import mxnet as mx, troupe\nfrom mxnet.gluon import nn\nimport mxnet.ndarray as F\n"
            "assert mx is troupe and nn is troupe.gluon.nn and F is troupe.ndarray\n"
            "assert isinstance(mx.nd.ones(2), troupe.nd.NDArray)\nprint('ok')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([alias, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
