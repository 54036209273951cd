#!/usr/bin/env python3
"""MXNet 1.9.1 optimizer states (.states, Module.save_optimizer_states) for troupe's optimizer_test.

For each optimizer, a tiny MLP (data (4, 3) -> fc1 (5) -> relu -> fc2 (2) -> SoftmaxOutput) is trained three
steps with mx.mod.Module on the CPU (no kvstore, so the states are indexed by the parameter's position in the
module's parameter list, MXNet's index * num_device + k with one device), then checkpointed:

  mlp-symbol.json, init.params           the symbol and the initial weights, shared
  <opt>-0001.params                      the weights after the three steps
  <opt>-0001.states                      Module.save_optimizer_states: pickle.dumps(updater.states)
  <opt>-next.params                      the weights after one more update from a fresh optimizer that loaded
                                         the states (Module.load_optimizer_states + update), with the gradients
                                         in grads.params: what a resumed run computes
  batches.params                         the three training batches (data0..2, label0..2), shared
  adam-0001.p2.states, adam-0001.p3.states   adam's states pickled with protocols 2 and 3
  mp_sgd_mom-0001.states, mp_sgd_mom.params  multi_precision sgd with momentum on two float16 weights, through
                                         an Updater (MXNet cannot run float16 layers on the CPU): the states
                                         after three updates, each a pair (float32 weight, momentum); the
                                         .params holds w<i> (float16, after the three updates), g<i> (the next
                                         gradient) and next<i> (the weight after one more update from a fresh
                                         optimizer that loaded the states)
  sgd_mom-kv-0001.states                 sgd_mom trained on two CPUs with a local KVStore that updates: the
                                         states keyed by parameter name

  python make_states.py [OUT_DIR]            writes the files (default: this script's folder)
  python make_states.py --check-troupe DIR   loads every DIR/*.states that troupe wrote (optimizer_test with
                                             TROUPE_STATES_DUMP=DIR) in MXNet: pickle.loads must accept it,
                                             re-pickling it must give the same bytes, and when DIR/<name>.expect
                                             names an MXNet file, the arrays must equal that file's.
"""
import os
import pickle
import sys

import numpy as np

import mxnet as mx

# name -> (optimizer, params); the update step's params equal the training's.
OPTIMIZERS = {
    'sgd': ('sgd', {'learning_rate': 0.1, 'wd': 0.001}),
    'sgd_mom': ('sgd', {'learning_rate': 0.1, 'momentum': 0.9, 'wd': 0.001}),
    'nag': ('nag', {'learning_rate': 0.1, 'momentum': 0.9, 'wd': 0.001}),
    'adam': ('adam', {'learning_rate': 0.01, 'wd': 0.001}),
    'adagrad': ('adagrad', {'learning_rate': 0.1, 'wd': 0.001}),
    'rmsprop': ('rmsprop', {'learning_rate': 0.01, 'wd': 0.001}),
    'rmsprop_centered': ('rmsprop', {'learning_rate': 0.01, 'centered': True, 'wd': 0.001}),
}
BATCH = 4
RESCALE = 1.0 / BATCH


def symbol():
    data = mx.sym.Variable('data')
    fc1 = mx.sym.FullyConnected(data, num_hidden=5, name='fc1')
    act = mx.sym.Activation(fc1, act_type='relu', name='relu1')
    fc2 = mx.sym.FullyConnected(act, num_hidden=2, name='fc2')
    return mx.sym.SoftmaxOutput(fc2, name='softmax')


def batches(rng):
    return [(rng.uniform(-1, 1, (BATCH, 3)).astype(np.float32), rng.randint(0, 2, BATCH).astype(np.float32))
            for _ in range(3)]


def generate(out):
    rng = np.random.RandomState(11)
    data = batches(rng)
    saved = {}
    for i, (d, l) in enumerate(data):
        saved['data%d' % i] = mx.nd.array(d)
        saved['label%d' % i] = mx.nd.array(l)
    mx.nd.save(os.path.join(out, 'batches.params'), saved)
    sym = symbol()
    sym.save(os.path.join(out, 'mlp-symbol.json'))
    init = {
        'fc1_weight': rng.uniform(-0.5, 0.5, (5, 3)), 'fc1_bias': rng.uniform(-0.1, 0.1, (5,)),
        'fc2_weight': rng.uniform(-0.5, 0.5, (2, 5)), 'fc2_bias': rng.uniform(-0.1, 0.1, (2,)),
    }
    mx.nd.save(os.path.join(out, 'init.params'), {'arg:' + k: mx.nd.array(v) for k, v in init.items()})
    grads = None
    for name, (opt, params) in OPTIMIZERS.items():
        prefix = os.path.join(out, name)
        mod = mx.mod.Module(sym, data_names=['data'], label_names=['softmax_label'], context=mx.cpu())
        mod.bind(data_shapes=[('data', (BATCH, 3))], label_shapes=[('softmax_label', (BATCH,))])
        mod.init_params(arg_params={k: mx.nd.array(v) for k, v in init.items()}, aux_params={})
        mod.init_optimizer(kvstore=None, optimizer=opt, optimizer_params=dict(params, rescale_grad=RESCALE))
        for d, l in data:
            mod.forward_backward(mx.io.DataBatch([mx.nd.array(d)], [mx.nd.array(l)]))
            mod.update()
        mod.save_checkpoint(prefix, 1, save_optimizer_states=True)
        os.remove(prefix + '-symbol.json')  # the same for every optimizer: kept once, as mlp-symbol.json
        names = mod._exec_group.param_names
        if grads is None:
            grads = {n: mx.nd.array(rng.uniform(-1, 1, mod.get_params()[0][n].shape)) for n in names}
            mx.nd.save(os.path.join(out, 'grads.params'), grads)
        # One more step as a resumed run makes it: a fresh optimizer (update counts from zero, as Module's
        # init_optimizer creates), the states loaded, weights from the checkpoint.
        args, _ = mod.get_params()
        optimizer = mx.optimizer.create(opt, param_idx2name=dict(enumerate(names)), rescale_grad=RESCALE, **params)
        updater = mx.optimizer.get_updater(optimizer)
        with open(prefix + '-0001.states', 'rb') as f:
            updater.set_states(f.read())
        for i, n in enumerate(names):
            updater(i, grads[n], args[n])
        mx.nd.save(prefix + '-next.params', {'arg:' + n: args[n] for n in names})
        if name == 'adam':
            # The same states at protocols 2 and 3 (what older Pythons and protocol=2 callers write).
            with open(prefix + '-0001.states', 'rb') as f:
                states = pickle.loads(f.read())
            for proto in (2, 3):
                with open('%s-0001.p%d.states' % (prefix, proto), 'wb') as f:
                    f.write(pickle.dumps(states, protocol=proto))
        if name == 'sgd_mom':
            # Two devices with a KVStore that updates (update_on_kvstore): MXNet keys the states by name.
            kv = mx.mod.Module(sym, data_names=['data'], label_names=['softmax_label'],
                               context=[mx.cpu(0), mx.cpu(1)])
            kv.bind(data_shapes=[('data', (BATCH, 3))], label_shapes=[('softmax_label', (BATCH,))])
            kv.init_params(arg_params={k: mx.nd.array(v) for k, v in init.items()}, aux_params={})
            kv.init_optimizer(kvstore='local', optimizer=opt, optimizer_params=dict(params, rescale_grad=RESCALE))
            assert kv._update_on_kvstore
            for d, l in data:
                kv.forward_backward(mx.io.DataBatch([mx.nd.array(d)], [mx.nd.array(l)]))
                kv.update()
            kv.save_optimizer_states(prefix + '-kv-0001.states')
        print(name, 'states', os.path.getsize(prefix + '-0001.states'), 'bytes')


def generate_multi_precision(out):
    rng = np.random.RandomState(12)
    params = dict(learning_rate=0.1, momentum=0.9, wd=0.001, multi_precision=True)
    shapes = [(5, 3), (2,)]
    weights = [mx.nd.array(rng.uniform(-0.5, 0.5, s), dtype='float16') for s in shapes]
    updater = mx.optimizer.get_updater(mx.optimizer.create('sgd', **params))
    for _ in range(3):
        for i, w in enumerate(weights):
            updater(i, mx.nd.array(rng.uniform(-1, 1, w.shape), dtype='float16'), w)
    prefix = os.path.join(out, 'mp_sgd_mom')
    with open(prefix + '-0001.states', 'wb') as f:
        f.write(updater.get_states(dump_optimizer=False))
    saved = {}
    fresh = mx.optimizer.get_updater(mx.optimizer.create('sgd', **params))
    with open(prefix + '-0001.states', 'rb') as f:
        fresh.set_states(f.read())
    for i, w in enumerate(weights):
        saved['w%d' % i] = w.copy()
        g = mx.nd.array(rng.uniform(-1, 1, w.shape), dtype='float16')
        saved['g%d' % i] = g
        fresh(i, g, w)
        saved['next%d' % i] = w
    mx.nd.save(prefix + '.params', saved)
    print('mp_sgd_mom states', os.path.getsize(prefix + '-0001.states'), 'bytes')


def arrays_of(state):
    if state is None:
        return []
    if isinstance(state, mx.nd.NDArray):
        return [state.asnumpy()]
    return [a for s in state for a in arrays_of(s)]


def check_troupe(folder):
    failures = 0
    files = sorted(f for f in os.listdir(folder) if f.endswith('.states'))
    for f in files:
        path = os.path.join(folder, f)
        with open(path, 'rb') as fh:
            raw = fh.read()
        try:
            states = pickle.loads(raw)
            # Module.load_optimizer_states: an Updater takes them and updates with them.
            updater = mx.optimizer.get_updater(mx.optimizer.create('sgd'))
            updater.set_states(raw)
            same = pickle.dumps(states) == raw
            msg = '%d indices, re-pickled bytes %s' % (len(states), 'identical' if same else 'DIFFER')
            if not same:
                failures += 1
            expect = path[:-len('.states')] + '.expect'
            if os.path.exists(expect):
                with open(expect) as fh:
                    ref_path = os.path.join(folder, fh.read().strip())
                with open(ref_path, 'rb') as fh:
                    ref = pickle.loads(fh.read())
                ok = sorted(ref) == sorted(states) and all(
                    len(arrays_of(ref[k])) == len(arrays_of(states[k])) and
                    all(np.array_equal(a, b) for a, b in zip(arrays_of(ref[k]), arrays_of(states[k])))
                    for k in ref)
                msg += ', arrays %s %s' % ('equal' if ok else 'DIFFER from', os.path.basename(ref_path))
                if not ok:
                    failures += 1
            print('ok  ' if 'DIFFER' not in msg else 'FAIL', f, msg)
        except Exception as e:  # pylint: disable=broad-except
            failures += 1
            print('FAIL', f, repr(e))
    print('%d files, %d failures' % (len(files), failures))
    return failures == 0


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--check-troupe':
        sys.exit(0 if check_troupe(sys.argv[2]) else 1)
    generate(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
    generate_multi_precision(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
