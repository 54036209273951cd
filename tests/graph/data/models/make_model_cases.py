#!/usr/bin/env python
"""Writes the whole-model reference cases of tests/graph/mxnet_model_cases_test.cc with real MXNet 1.9.1.

For every model: <name>-symbol.json (the network as MXNet exports it: hybridize(), a forward, export()) and
<name>-io.params (the inputs as "in:<name>", MXNet's outputs as "out:<k>"), and an entry in models.json
(name, outputs, optional rtol and sorted_rows: outputs compared as sets of rows), or in models_pending.json
for the models of PENDING (troupe cannot run them yet; the test does not read that index). Parameters and auxiliary
states are not stored: both sides fill them with param_value() (the test's ModelParamValue must stay the
same formula), so a large model costs only its symbol file.

With --param-shapes it writes instead, for the Gluon networks of PARAM_SHAPES (or the names given), the list of
their parameters' names and shapes in the ImageNet configuration (<name>_param_shapes.json; no forward outputs).

Run (MXNet 1.9.1, and GluonCV 0.10.5 / GluonNLP 0.10.0 for their families, in a virtual environment; the
files are committed, tests never need MXNet):
  /work/mxnet-venv/bin/python tests/graph/data/models/make_model_cases.py [name ...]
  /work/mxnet-venv/bin/python tests/graph/data/models/make_model_cases.py --param-shapes [name ...]
See README.md beside this file for the models and their status.
"""
import json
import math
import os
import sys
import tempfile

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _u(name, n):
    """n well-spread numbers in [-1, 1): SplitMix64 of the position and a hash of the name, exact uint64
    arithmetic (the test's SpreadValue)."""
    h = 0
    for k, b in enumerate(name.encode()):
        h = (h + (k + 1) * b) % 997
    with np.errstate(over='ignore'):
        z = np.arange(n, dtype=np.uint64) + np.uint64((h * 0x9E3779B97F4A7C15) % 2 ** 64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / 9007199254740992.0 * 2.0 - 1.0


def input_value(name, shape):
    """An image input both sides compute (the test's ModelInputValue): _u as float32, so large inputs need not
    be stored."""
    return _u(name, int(np.prod(shape))).astype('float32').reshape(shape)


def param_value(name, shape):
    """Element values of parameter `name` (float64), the formula of the test's ModelParamValue: _u scaled by
    the kind of array (He's variance 2 / fan_in for weights)."""
    n = int(np.prod(shape)) if len(shape) else 1
    u = _u(name, n)
    if name.endswith('var'):
        v = 0.75 + 0.25 * u
    elif name.endswith('gamma'):
        v = 1.0 + 0.1 * u
    elif name.endswith('beta') or name.endswith('bias') or name.endswith('mean'):
        v = 0.01 * u
    elif len(shape) >= 2 and shape[0] > 0:
        fan_in = n // shape[0]
        v = u * math.sqrt(6.0 / max(1.0, fan_in))
    else:
        v = 0.1 * u
    return v.reshape(shape)


def export_block(block, inputs):
    """Hybridizes and exports a Gluon block; returns the symbol (as MXNet reloads it)."""
    block.hybridize()
    block(*[mx.nd.array(v, dtype=v.dtype) for v in inputs.values()])
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, 'net')
        block.export(prefix)
        return mx.sym.load(prefix + '-symbol.json')


def run_symbol(sym, inputs):
    """Forward in inference mode with every parameter filled by param_value; returns the outputs."""
    arg_shapes, _, aux_shapes = sym.infer_shape(**{k: v.shape for k, v in inputs.items()})
    arg_types, _, aux_types = sym.infer_type(**{k: v.dtype for k, v in inputs.items()})
    args = {}
    for n, s, t in zip(sym.list_arguments(), arg_shapes, arg_types):
        args[n] = mx.nd.array(inputs[n], dtype=inputs[n].dtype) if n in inputs else \
            mx.nd.array(param_value(n, s), dtype=t)
    aux = {n: mx.nd.array(param_value(n, s), dtype=t) for n, s, t in zip(sym.list_auxiliary_states(), aux_shapes, aux_types)}
    exe = sym.bind(mx.cpu(), args=args, aux_states=aux, grad_req='null')
    return [o.copy() for o in exe.forward(is_train=False)]


def _uniform(shape, seed=1, lo=-1.0, hi=1.0):
    return np.random.RandomState(seed).uniform(lo, hi, size=shape).astype('float32')


def _tokens(shape, vocab, seed=2):
    """Token ids as MXNet symbols take them: float32 integers in [0, vocab)."""
    return np.random.RandomState(seed).randint(0, vocab, size=shape).astype('float32')


def model_zoo(name, size=32, classes=10, **kw):
    def build():
        net = mx.gluon.model_zoo.vision.get_model(name, classes=classes, **kw)
        net.initialize()
        return net, {'data': input_value('data', (1, 3, size, size))}
    return build


def amp_converted(build, target_dtype):
    """A model of another builder as MXNet's AMP converts its exported symbol: mx.contrib.amp.convert_symbol
    with the default operator lists and cast_optional_params=False, so the symbol holds amp_cast /
    amp_multicast nodes and every parameter stays float32. The builder returns the converted symbol instead of
    a block."""
    def build_converted():
        from mxnet.contrib import amp
        block, inputs = build()
        return amp.convert_symbol(export_block(block, inputs), target_dtype=target_dtype), inputs
    return build_converted


def amp_mlp():
    """FullyConnected(64) -> relu -> FullyConnected(10) on a 4x32 input: a small AMP case to debug with."""
    net = mx.gluon.nn.HybridSequential(prefix='mlp_')
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(64, activation='relu'), mx.gluon.nn.Dense(10))
    net.initialize()
    return net, {'data': input_value('data', (4, 32))}


def amp_mix():
    """FullyConnected(32) of `data0` (bfloat16 under AMP) plus a second input `data1`: elemwise_add is a
    widest-type operator and the pass cannot know data1's type, so MXNet inserts amp_multicast."""
    class Mix(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__(prefix='mix_')
            with self.name_scope():
                self.fc = mx.gluon.nn.Dense(32)

        def hybrid_forward(self, F, x, y):
            return F.elemwise_add(self.fc(x), y)

    net = Mix()
    net.initialize()
    return net, {'data0': input_value('data0', (4, 32)), 'data1': input_value('data1', (4, 32))}


def gluoncv_model(name, height, width=None, setup=None, **kw):
    """A GluonCV model-zoo network, untrained (no weights can be downloaded) and without a pretrained base;
    setup(net), if given, adjusts it before the export."""
    def build():
        import gluoncv
        net = gluoncv.model_zoo.get_model(name, pretrained=False, **kw)
        if setup:
            setup(net)
        net.initialize()
        return net, {'data': input_value('data', (1, 3, height, width or height))}
    return build


def gluoncv_segmentation(getter, size, **kw):
    """get_fcn / get_psp / get_deeplab on a dilated resnet50 with crop_size = the input size (their
    BilinearResize2D and pyramid pooling are built for crop_size) and without the auxiliary head."""
    def build():
        import gluoncv.model_zoo as zoo
        net = getattr(zoo, getter)(dataset='pascal_voc', backbone='resnet50', pretrained=False,
                                   pretrained_base=False, aux=False, base_size=size, crop_size=size, **kw)
        net.initialize()
        return net, {'data': input_value('data', (1, 3, size, size))}
    return build


def bert_small():
    """GluonNLP's BERTModel with a tiny custom configuration: 2 layers, 32 units, 4 heads; pooler,
    masked-LM decoder and next-sentence classifier on. Inputs: token ids, token types, valid length."""
    import gluonnlp as nlp
    vocab, length = 50, 8
    encoder = nlp.model.BERTEncoder(num_layers=2, units=32, hidden_size=64, max_length=16, num_heads=4,
                                    dropout=0.0, output_attention=False, output_all_encodings=False)
    net = nlp.model.BERTModel(encoder, vocab_size=vocab, token_type_vocab_size=2, units=32, embed_size=32,
                              use_pooler=True, use_decoder=True, use_classifier=True)
    net.initialize()
    return net, {'data0': _tokens((2, length), vocab),
                 'data1': _tokens((2, length), 2, seed=3),
                 'data2': np.array([8, 5], dtype='float32'),
                 'data3': np.array([[1, 3], [0, 4]], dtype='float32')}


def transformer_small():
    """GluonNLP's Transformer encoder and decoder (get_transformer_encoder_decoder: 2 layers, 32 units,
    4 heads) with source/target embeddings and an output projection, as NMTModel uses them for teacher
    forcing. Inputs: source ids, target ids, source and target valid lengths."""
    import gluonnlp as nlp
    vocab = 40
    encoder, decoder, _ = nlp.model.transformer.get_transformer_encoder_decoder(
        num_layers=2, num_heads=4, units=32, hidden_size=64, dropout=0.0, max_src_length=16, max_tgt_length=16)

    class Seq2Seq(mx.gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.src_embed = mx.gluon.nn.Embedding(vocab, 32, prefix='src_embed_')
                self.tgt_embed = mx.gluon.nn.Embedding(vocab, 32, prefix='tgt_embed_')
                self.encoder = encoder
                self.decoder = decoder
                self.proj = mx.gluon.nn.Dense(vocab, flatten=False, prefix='proj_')

        def hybrid_forward(self, F, src, tgt, src_len, tgt_len):
            mem, _ = self.encoder(self.src_embed(src), None, src_len)
            steps = F.contrib.arange_like(src, axis=1)
            mem_mask = F.broadcast_lesser(F.reshape(steps, shape=(1, -1)), F.reshape(src_len, shape=(-1, 1)))
            out, _, _ = self.decoder(self.tgt_embed(tgt), [mem, mem_mask], tgt_len)
            return self.proj(out)

    net = Seq2Seq(prefix='nmt_')
    net.initialize()
    return net, {'data0': _tokens((2, 7), vocab), 'data1': _tokens((2, 6), vocab, seed=3),
                 'data2': np.array([7, 4], dtype='float32'), 'data3': np.array([6, 3], dtype='float32')}


def language_model(kind):
    """GluonNLP's StandardRNN / AWDRNN LSTM language models, tiny (vocab 30, embedding 16, hidden 16, 2
    layers), with the begin states as inputs. Inputs: token ids (time, batch) and the states."""
    def build():
        import gluonnlp as nlp
        vocab, emb, hid, layers, t, n = 30, 16, 16, 2, 5, 2
        if kind == 'standard':
            lm = nlp.model.StandardRNN('lstm', vocab, emb, hid, layers, dropout=0.0, tie_weights=True,
                                       prefix='lm_')
            states = {'data1': _uniform((layers, n, hid), seed=4, lo=-0.5, hi=0.5),
                      'data2': _uniform((layers, n, hid), seed=5, lo=-0.5, hi=0.5)}
        else:
            lm = nlp.model.AWDRNN('lstm', vocab, emb, hid, layers, tie_weights=True, dropout=0.0, weight_drop=0.0,
                                  drop_h=0.0, drop_i=0.0, drop_e=0.0, prefix='lm_')
            # one [h, c] per layer; the last layer's width is the embedding's (tied weights)
            states = {}
            for i in range(layers):
                w = emb if i == layers - 1 else hid
                states['data%d' % (1 + 2 * i)] = _uniform((1, n, w), seed=4 + 2 * i, lo=-0.5, hi=0.5)
                states['data%d' % (2 + 2 * i)] = _uniform((1, n, w), seed=5 + 2 * i, lo=-0.5, hi=0.5)

        class WithStates(mx.gluon.HybridBlock):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                with self.name_scope():
                    self.lm = lm

            def hybrid_forward(self, F, x, *s):
                if kind == 'standard':
                    return self.lm(x, list(s))
                return self.lm(x, [[s[2 * i], s[2 * i + 1]] for i in range(layers)])

        net = WithStates(prefix='')
        net.initialize()
        return net, dict({'data0': _tokens((t, n), vocab)}, **states)
    return build


def fewer_rois(net):
    """Faster R-CNN with 20 RPN proposals (of the 100 best anchors) instead of 300 (of 6000): its outputs
    have classes x proposals rows, 400 instead of 6000, which keeps the io file small; and a minimum
    proposal size of 1 pixel instead of 16: the untrained RPN proposes boxes of about a pixel, and with 16
    every proposal was dropped and every output box was -1. These are the constructor's rpn_test_pre_nms,
    rpn_test_post_nms and rpn_min_size, which get_model cannot pass (its keyword arguments also go to the
    backbone)."""
    net._rpn_test_post_nms = 20
    net.rpn._test_post_nms = 20
    net.rpn._test_pre_nms = 100
    net.rpn.region_proposer._min_size = 1


# The model zoo's 34 networks. All take 32x32 but alexnet, inceptionv3, densenet and squeezenet, whose final
# fixed-size poolings need the smallest input given with them (images are input_value(): not stored).
VISION = ['resnet18_v1', 'resnet34_v1', 'resnet50_v1', 'resnet101_v1', 'resnet152_v1',
          'resnet18_v2', 'resnet34_v2', 'resnet50_v2', 'resnet101_v2', 'resnet152_v2',
          'vgg11', 'vgg13', 'vgg16', 'vgg19', 'vgg11_bn', 'vgg13_bn', 'vgg16_bn', 'vgg19_bn',
          'mobilenet1.0', 'mobilenet0.75', 'mobilenet0.5', 'mobilenet0.25',
          'mobilenetv2_1.0', 'mobilenetv2_0.75', 'mobilenetv2_0.5', 'mobilenetv2_0.25']

# name -> (builder returning (block, inputs)), options for models.json
ALL = {name: (model_zoo(name), {}) for name in VISION}
ALL.update({
    # alexnet: 11x11 stride-4 convolution and three 3x3/2 poolings: 64 is about the smallest input
    'alexnet': (model_zoo('alexnet', size=64), {}),
    # inceptionv3 ends in an 8x8 average pooling: 299x299 is the smallest input
    'inceptionv3': (model_zoo('inceptionv3', size=299), {}),
    # densenet121 ends in a 7x7 average pooling: 221x221 is the smallest input
    'densenet121': (model_zoo('densenet121', size=221), {}),
    'densenet161': (model_zoo('densenet161', size=221), {}),
    'densenet169': (model_zoo('densenet169', size=221), {}),
    'densenet201': (model_zoo('densenet201', size=221), {}),
    # squeezenet ends in a 13x13 average pooling: 213 (1.0) and 209 (1.1) are the smallest inputs
    'squeezenet1.0': (model_zoo('squeezenet1.0', size=213), {}),
    'squeezenet1.1': (model_zoo('squeezenet1.1', size=209), {}),
    'mobilenetv3_small': (gluoncv_model('mobilenetv3_small', 32, classes=10), {}),
    # 15 blocks of depthwise and Winograd convolutions amplify float32 rounding: troupe's unfused graph is within
    # 7.6e-5 of MXNet, its inference fusion (each BatchNorm folded into its convolution's weights) within 2.5e-4.
    'mobilenetv3_large': (gluoncv_model('mobilenetv3_large', 32, classes=10), {'rtol': 3e-4}),
    # detection: outputs ids (1, N, 1), scores (1, N, 1), boxes (1, N, 4), padded with -1 rows
    'ssd_512_mobilenet1.0_voc': (gluoncv_model('ssd_512_mobilenet1.0_voc', 64, pretrained_base=False),
                                 {'sorted_rows': [0, 1, 2]}),
    # YOLOv3's box sizes are exp() of predicted offsets, here near 47 (boxes of 3e20): float32 rounding of
    # 1e-6 in an offset becomes 1e-4 in its box, so boxes are compared within 5e-4.
    'yolo3_mobilenet1.0_voc': (gluoncv_model('yolo3_mobilenet1.0_voc', 64, pretrained_base=False),
                               {'sorted_rows': [0, 1, 2], 'rtol': 5e-4}),
    'faster_rcnn_resnet50_v1b_voc': (gluoncv_model('faster_rcnn_resnet50_v1b_voc', 64, setup=fewer_rois,
                                                   pretrained_base=False), {'sorted_rows': [0, 1, 2]}),
    'center_net_resnet18_v1b_voc': (gluoncv_model('center_net_resnet18_v1b_voc', 64, pretrained_base=False),
                                    {'sorted_rows': [0, 1, 2]}),
    'simple_pose_resnet18_v1b': (gluoncv_model('simple_pose_resnet18_v1b', 64, 48, pretrained_base=False), {}),
    'fcn_resnet50_voc': (gluoncv_segmentation('get_fcn', 32), {}),
    # the pyramid pools the 1/8 feature map to 1, 2, 3 and 6: 48 gives a 6x6 map
    'psp_resnet50_voc': (gluoncv_segmentation('get_psp', 48), {}),
    'deeplab_resnet50_voc': (gluoncv_segmentation('get_deeplab', 32), {}),
    'bert_small': (bert_small, {}),
    'transformer_small': (transformer_small, {}),
    'standard_lstm_lm': (language_model('standard'), {}),
    'awd_lstm_lm': (language_model('awd'), {}),
    # MXNet's AMP (mx.contrib.amp.convert_symbol, default lists) of float32 networks to bfloat16: amp_cast to
    # bfloat16 of the data and of every Convolution / FullyConnected weight and bias, one amp_cast to float32
    # of the output; BatchNorm, Activation, Pooling and elemwise_add run on bfloat16 (no amp_multicast is
    # needed). MXNet runs them with its oneDNN bf16 kernels, as written (AS_WRITTEN). rtol: about 2.5x the
    # distance of MXNet's bf16 output from its float32 output of the same net and input (resnet18 0.0097,
    # mlp 0.0043). float16 is not here: MXNet 1.9.1 cannot run it on CPU ("FP16 gemm on cpu not implemented!").
    'resnet18_v1_amp_bf16': (amp_converted(model_zoo('resnet18_v1'), 'bfloat16'), {'rtol': 2.5e-2}),
    'amp_mlp_bf16': (amp_converted(amp_mlp, 'bfloat16'), {'rtol': 1e-2}),
    # amp_multicast: the sum of a bfloat16 FullyConnected and a second input of a type the pass cannot know.
    'amp_mix_bf16': (amp_converted(amp_mix, 'bfloat16'), {'rtol': 1e-2}),
})

# Models that troupe cannot run yet, with the first error of mxnet_model_cases_test (all of them: operators
# that troupe's symbol loader does not know). They go to models_pending.json, which the test does not read:
# their files are the fixtures for the next operators. Move a name out of here when its test passes.
PENDING = [
]
MODELS = {k: v for k, v in ALL.items() if k not in PENDING}
PENDING = {k: ALL[k] for k in PENDING}

# Models MXNet runs with its oneDNN graph fusion off (MXNET_SUBGRAPH_BACKEND=NONE), so its outputs are those of
# the symbol as written: fused, MXNet folds each BatchNorm into its convolution and rounds the folded weights
# and the fused outputs to bfloat16, which moves resnet18_v1_amp_bf16's output by 3.2% of its largest
# magnitude (3.0% from float32, against 0.97% unfused). The other models keep the default (fusion on).
AS_WRITTEN = ['resnet18_v1_amp_bf16', 'amp_mlp_bf16', 'amp_mix_bf16']


def input_influence(sym, inputs, outs):
    """For a model of one input 'data': how much output 0 changes when the input is zeroed, relative to its
    largest magnitude (printed only; a small number means the output is mostly made by the biases)."""
    if list(inputs) != ['data']:
        return None
    zero = run_symbol(sym, {'data': np.zeros_like(inputs['data'])})[0].asnumpy()
    out = outs[0].asnumpy()
    return float(np.abs(out - zero).max() / max(np.abs(out).max(), 1e-30))


def _restore_env(key, value):
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def write_index(path, entries):
    with open(path, 'w') as f:
        json.dump(dict(mxnet=mx.__version__, cases=[entries[k] for k in sorted(entries)]), f, indent=1, sort_keys=True)
        f.write('\n')


# Gluon networks whose every parameter shape is listed (<name>_param_shapes.json, --param-shapes): for models of
# graph/models.h that rebuild them (models::ResNet(50, 1000, false) is resnet50_v1), in the ImageNet
# configuration (1000 classes, 3x224x224), which the exported 10-class cases above do not cover.
PARAM_SHAPES = ['resnet50_v1']


def write_param_shapes(name):
    """<name>_param_shapes.json: every parameter and auxiliary state of the Gluon model with 1000 classes after a
    forward on (1, 3, 224, 224), in collect_params() order (names, shapes, and whether Gluon trains it), one
    per line; and the count of the trained ones."""
    with mx.name.NameManager():
        net = mx.gluon.model_zoo.vision.get_model(name, classes=1000)
    net.initialize()
    net(mx.nd.zeros((1, 3, 224, 224)))
    params = [(k, list(p.shape), p.grad_req != 'null') for k, p in net.collect_params().items()]
    trained = sum(int(np.prod(s)) for _, s, t in params if t)
    path = os.path.join(HERE, name + '_param_shapes.json')
    with open(path, 'w') as f:
        f.write('{"mxnet": %s, "model": %s, "classes": 1000, "data": [1, 3, 224, 224], "trained_count": %d,\n'
                ' "params": [\n' % (json.dumps(mx.__version__), json.dumps(name), trained))
        f.write(',\n'.join('  [%s, %s, %s]' % (json.dumps(k), json.dumps(s), json.dumps(t)) for k, s, t in params))
        f.write('\n ]}\n')
    print('%s: %d parameters and states, %d trained elements, %d bytes' % (name, len(params), trained,
                                                                          os.path.getsize(path)))


def main():
    if sys.argv[1:2] == ['--param-shapes']:
        for name in sys.argv[2:] or PARAM_SHAPES:
            write_param_shapes(name)
        return
    names = sys.argv[1:] or sorted(MODELS) + sorted(PENDING)
    indexes = {}
    for which in ('models', 'models_pending'):
        path = os.path.join(HERE, which + '.json')
        index = json.load(open(path)) if os.path.exists(path) else {'cases': []}
        indexes[which] = {c['name']: c for c in index['cases']}
    failed = []
    backend = os.environ.get('MXNET_SUBGRAPH_BACKEND')  # as given, for the models not in AS_WRITTEN
    for name in names:
        which = 'models' if name in MODELS else 'models_pending'
        build, options = (MODELS if name in MODELS else PENDING)[name]
        if name in AS_WRITTEN:
            os.environ['MXNET_SUBGRAPH_BACKEND'] = 'NONE'
        else:
            _restore_env('MXNET_SUBGRAPH_BACKEND', backend)
        try:
            with mx.name.NameManager():  # names (and so parameter values) independent of the other models
                block, inputs = build()
                sym = block if isinstance(block, mx.sym.Symbol) else export_block(block, inputs)
            outs = run_symbol(sym, inputs)
        except Exception as e:  # an MXNet-side failure: reported, the other models go on
            failed.append(name)
            print('%s: FAILED in MXNet: %s' % (name, str(e).strip().splitlines()[0] if str(e).strip() else repr(e)))
            continue
        # remove_amp_cast=False: MXNet's default drops the amp_cast / amp_multicast nodes of AMP symbols (the
        # same JSON for the others)
        sym.save(os.path.join(HERE, name + '-symbol.json'), remove_amp_cast=False)
        # Inputs that input_value() makes are not stored: the test computes them from their name and shape.
        formula = {k: list(v.shape) for k, v in inputs.items()
                   if v.dtype == np.float32 and np.array_equal(v, input_value(k, v.shape))}
        arrays = {'in:' + k: mx.nd.array(v, dtype=v.dtype) for k, v in inputs.items() if k not in formula}
        arrays.update({'out:%d' % k: o for k, o in enumerate(outs)})
        mx.nd.save(os.path.join(HERE, name + '-io.params'), arrays)
        for index in indexes.values():
            index.pop(name, None)
        entry = dict(name=name, outputs=len(outs), **options)
        if formula:
            entry['formula_inputs'] = formula
        indexes[which][name] = entry
        influence = input_influence(sym, inputs, outs)
        print('%s: %s, %d outputs %s, symbol %d bytes, io %d bytes%s' % (
            name, which, len(outs), [o.shape for o in outs],
            os.path.getsize(os.path.join(HERE, name + '-symbol.json')),
            os.path.getsize(os.path.join(HERE, name + '-io.params')),
            '' if influence is None else ', input influence %.2g' % influence))
    _restore_env('MXNET_SUBGRAPH_BACKEND', backend)
    for which, entries in indexes.items():
        write_index(os.path.join(HERE, which + '.json'), entries)
    if failed:
        sys.exit('failed in MXNet: ' + ' '.join(failed))


if __name__ == '__main__':
    main()
