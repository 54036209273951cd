"""mx.gluon against MXNet 1.9.1's Gluon, on the fixtures tests/nn/data/make_nn.py wrote with it: the losses, a
small CNN's outputs, gradients and parameters after two Trainer steps (imperative and hybridized), export and
SymbolBlock.imports both ways, single layers' outputs and gradients; and a LeNet that learns."""
import os

import numpy as np
import pytest

import troupe as mx
from troupe import autograd, gluon
from troupe.gluon import nn

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "nn", "data")
FX = mx.nd.load(os.path.join(DATA, "nn.params"))


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(got.asnumpy() if hasattr(got, "asnumpy") else got, want.asnumpy(), rtol=rtol, atol=atol)


def test_losses_match_gluon():
    pred, label = FX["loss:in:pred"], FX["loss:in:label"]
    pred01, label01, dist = FX["loss:in:pred01"], FX["loss:in:label01"], FX["loss:in:dist"]
    close(gluon.loss.SoftmaxCrossEntropyLoss()(pred, label), FX["loss:softmax_ce"])
    close(gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)(pred, dist), FX["loss:softmax_ce_dense"])
    close(gluon.loss.SoftmaxCrossEntropyLoss(weight=0.5)(pred, label), FX["loss:softmax_ce_weighted"])
    close(gluon.loss.L2Loss()(pred01, label01), FX["loss:l2"])
    close(gluon.loss.L1Loss()(pred01, label01), FX["loss:l1"])
    close(gluon.loss.HuberLoss(rho=0.5)(pred01, label01), FX["loss:huber"])
    close(gluon.loss.SigmoidBinaryCrossEntropyLoss()(pred01, label01), FX["loss:sigmoid_bce"])
    close(gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=True)(mx.nd.sigmoid(pred01), label01),
          FX["loss:sigmoid_bce_prob"])


def small_cnn():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D(), nn.Flatten(),
            nn.Dense(5))
    net.load_parameters(os.path.join(DATA, "nn_net_init.params"))
    return net


@pytest.mark.parametrize("hybridize", [False, True])
def test_network_step_matches_gluon(hybridize):
    net = small_cnn()
    if hybridize:
        net.hybridize()
    x, y = FX["net:in:x"], FX["net:in:y"]
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    with autograd.record():
        out = net(x)
        loss = loss_fn(out, y)
    loss.backward()
    close(out, FX["net:out"])
    close(loss, FX["net:loss"])
    params = net._collect_params_with_prefix()
    graded = [k for k in params if "net:grad:" + k in FX]
    assert len(graded) == 6  # conv weight/bias, gamma, beta, dense weight/bias
    for name in graded:
        close(params[name].grad(), FX["net:grad:" + name], rtol=1e-4, atol=1e-5)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3})
    trainer.step(2)
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(2)
    for name, p in params.items():
        close(p.data(), FX["net:after:" + name], rtol=1e-4, atol=1e-5)


def test_export_and_imports_both_ways(tmp_path):
    # MXNet's export, imported here.
    block = gluon.SymbolBlock.imports(os.path.join(DATA, "nn_export-symbol.json"), ["data"],
                                      os.path.join(DATA, "nn_export-0000.params"))
    close(block(FX["net:in:x"]), FX["net:export_out"], rtol=1e-4, atol=1e-5)
    # troupe's export of the same trained network, imported back.
    net = small_cnn()
    for name, p in net._collect_params_with_prefix().items():
        p.set_data(FX["net:after:" + name])
    net.hybridize()
    close(net(FX["net:in:x"]), FX["net:export_out"], rtol=1e-4, atol=1e-5)
    sym_file, params_file = net.export(str(tmp_path / "cnn"))
    back = gluon.SymbolBlock.imports(sym_file, ["data"], params_file)
    close(back(FX["net:in:x"]), FX["net:export_out"], rtol=1e-4, atol=1e-5)


LAYERS = {
    "conv1d": lambda: nn.Conv1D(3, 3, strides=2, padding=1),
    "conv2d_transpose": lambda: nn.Conv2DTranspose(3, 3, strides=2, padding=1, output_padding=1),
    "conv2d_groups": lambda: nn.Conv2D(4, 3, padding=1, groups=2, dilation=2),
    "avgpool2d": lambda: nn.AvgPool2D(3, strides=2, padding=1, count_include_pad=False),
    "maxpool1d_ceil": lambda: nn.MaxPool1D(2, ceil_mode=True),
    "global_avg2d": lambda: nn.GlobalAvgPool2D(),
    "global_max1d": lambda: nn.GlobalMaxPool1D(),
    "embedding": lambda: nn.Embedding(10, 4),
    "layernorm": lambda: nn.LayerNorm(),
    "leakyrelu": lambda: nn.LeakyReLU(0.1),
    "dense_noflatten": lambda: nn.Dense(5, flatten=False, activation="sigmoid"),
    "softrelu": lambda: nn.Activation("softrelu"),
    "batchnorm_last_axis": lambda: nn.BatchNorm(axis=-1, momentum=0.5),
    "conv3d": lambda: nn.Conv3D(2, (2, 2, 2), activation="relu"),
    "conv3d_strided": lambda: nn.Conv3D(4, (3, 2, 3), strides=(2, 1, 1), padding=(1, 1, 0), dilation=(1, 2, 1),
                                        groups=2),
    "conv3d_nobias": lambda: nn.Conv3D(3, (2, 2, 2), strides=2, use_bias=False, activation="tanh"),
    "maxpool3d": lambda: nn.MaxPool3D((2, 2, 2), strides=(2, 1, 2), padding=(1, 0, 1)),
    "maxpool3d_ceil": lambda: nn.MaxPool3D(2, ceil_mode=True),
    "avgpool3d": lambda: nn.AvgPool3D((3, 3, 3), strides=2, padding=1, count_include_pad=False),
    "avgpool3d_ceil": lambda: nn.AvgPool3D((2, 3, 2), strides=(1, 2, 2), padding=(1, 1, 0), ceil_mode=True),
    "global_avg3d": lambda: nn.GlobalAvgPool3D(),
    "global_max3d": lambda: nn.GlobalMaxPool3D(),
}


@pytest.mark.parametrize("case", sorted(LAYERS))
def test_layer_matches_gluon(case):
    layer = LAYERS[case]()
    layer.initialize()
    x = FX["layer:%s:in" % case].copy()
    integer = "layer:%s:grad:in" % case not in FX
    if not integer:
        x.attach_grad()
    layer(x)
    params = layer._collect_params_with_prefix()
    for name, p in params.items():
        p.set_data(FX["layer:%s:param:%s" % (case, name)])
    with autograd.record():
        y = layer(x)
    y.backward(FX["layer:%s:head" % case])
    close(y, FX["layer:%s:out" % case], rtol=1e-4, atol=1e-5)
    if not integer:
        close(x.grad, FX["layer:%s:grad:in" % case], rtol=1e-4, atol=1e-5)
    for name, p in params.items():
        key = "layer:%s:pgrad:%s" % (case, name)
        if key in FX:
            close(p.grad(), FX[key], rtol=1e-4, atol=1e-5)


def test_lenet_learns_a_separable_problem():
    np.random.seed(0)  # the DataLoader's shuffle
    mx.random.seed(0)  # Xavier's draws
    rng = np.random.RandomState(0)
    centers = rng.uniform(-1, 1, (4, 1, 12, 12)).astype(np.float32)
    labels = rng.randint(0, 4, 256)
    images = centers[labels] + 0.3 * rng.normal(size=(256, 1, 12, 12)).astype(np.float32)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(images, labels.astype(np.float32)), batch_size=32,
                                   shuffle=True, num_workers=2)
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, activation="relu"), nn.MaxPool2D(2), nn.Flatten(), nn.Dense(32, activation="relu"),
                nn.Dense(4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(3):
        for data, label in loader:
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(data.shape[0])
    pred = net(mx.nd.array(images)).argmax(axis=1).asnumpy()
    assert (pred == labels).mean() > 0.95


def test_naming_and_errors():
    net = nn.HybridSequential(prefix="model_")
    with net.name_scope():
        net.add(nn.Dense(3), nn.Dense(2))
    assert list(net.collect_params().keys()) == ["model_dense0_weight", "model_dense0_bias", "model_dense1_weight",
                                                 "model_dense1_bias"]
    with pytest.raises(RuntimeError, match="not been initialized"):
        net[0].weight.data()
    net.initialize()
    with pytest.raises(gluon.DeferredInitializationError):
        net[0].weight.data()
    net(mx.nd.ones((2, 7)))
    assert net[0].weight.shape == (3, 7)
    with pytest.raises(ValueError, match="HybridSequential"):
        nn.HybridSequential().add(nn.Sequential())


def test_dataloader_workers_keep_order_and_raise_errors():
    data = gluon.data.ArrayDataset(np.arange(20, dtype=np.float32))
    got = [b.asnumpy().tolist() for b in gluon.data.DataLoader(data, batch_size=3, num_workers=3)]
    assert got == [[float(v) for v in range(i, min(i + 3, 20))] for i in range(0, 20, 3)]

    class Broken(gluon.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i == 5:
                raise ValueError("sample 5 is unreadable")
            return np.float32(i)

    with pytest.raises(ValueError, match="sample 5"):
        for _ in gluon.data.DataLoader(Broken(), batch_size=2, num_workers=2):
            pass
