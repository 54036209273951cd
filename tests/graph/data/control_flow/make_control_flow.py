"""Generates the control-flow fixtures: symbols with MXNet 1.9.1's _foreach, _while_loop and _cond nodes (built
with mx.sym.contrib.foreach / while_loop / cond and saved as MXNet saves them), and what MXNet computes with them:
the outputs of a training-mode forward pass and the gradients of every argument for a random head gradient per
output.

Each case is a function of F (mx.sym or mx.nd) and its inputs. The reference is MXNet's executor bound to the
symbol where MXNet can bind it (the foreach cases); MXNet's executor cannot infer the output shapes of a
while_loop or a cond before it runs, and its CachedOp refuses them under autograd, so for those the reference is
the same function run imperatively under mx.autograd (mx.nd.contrib.while_loop / cond / foreach: the same loop).
A while_loop's per-step outputs have max_iterations rows; MXNet leaves the rows after the steps taken undefined
(the imperative loop returns no step outputs at all when it takes no step), so cases.json says how many rows of
each are defined.

<case>-symbol.json is the symbol; control_flow.params holds '<case>:in:<argument>', '<case>:head:<k>',
'<case>:out:<k>' and '<case>:grad:<argument>'. control_flow_test.cc binds each symbol in troupe (Executor and
CachedOp) and compares.

Run with MXNet 1.9.1 (pip install mxnet==1.9.1 "numpy<1.24"):  python make_control_flow.py
"""
import json
import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.RandomState(7)


def foreach_rnn(F, data, h0, w, u, b):
    """An RNN cell over time: h = tanh(x W + h U + b), the step output 2h, the state h."""
    def step(x, states):
        h = F.tanh(F.broadcast_add(F.dot(x, w) + F.dot(states[0], u), b))
        return h * 2, [h]
    outs, states = F.contrib.foreach(step, data, [h0])
    return [outs, states[0]]


def foreach_two(F, a, c, s0, p0, k):
    """Two sequences (one of them 1-D), two states: a running sum and a gated running product."""
    def step(xs, states):
        x, y = xs
        s = states[0] + x * k
        p = states[1] * F.sigmoid(x) + F.broadcast_mul(x, F.reshape(y, shape=(1, 1)))
        return [s + p], [s, p]
    outs, states = F.contrib.foreach(step, [a, c], [s0, p0])
    return [outs[0], states[0], states[1]]


def while_counter(F, i, s, x, w):
    """While i < 5 (at most 8 steps): s = s * w + x, i = i + 1; the step output is sin(s)."""
    def cond(i, s):
        return i < 5

    def func(i, s):
        s2 = s * w + x
        return [F.sin(s2)], [i + 1, s2]
    outs, states = F.contrib.while_loop(cond, func, [i, s], max_iterations=8)
    return outs + states


def while_never(F, s, x):
    """A loop whose condition is false at once: the variables pass through."""
    def cond(s):
        return F.sum(s) > 1e6

    def func(s):
        return [s * 2], [s * x]
    outs, states = F.contrib.while_loop(cond, func, [s], max_iterations=3)
    return outs + states


def cond_branches(F, a, b):
    """if sum(a) > 0: a * b + 1 else exp(a) - b."""
    return [F.contrib.cond(F.sum(a) > 0, lambda: a * b + 1, lambda: F.exp(a) - b)]


def nested(F, data, s0, w):
    """A foreach whose body holds a cond: the state gains x * w when x sums to more than 0, loses x otherwise."""
    def step(x, states):
        s = states[0]
        t = F.contrib.cond(F.sum(x) > 0, lambda: s + x * w, lambda: s - x)
        return [F.tanh(t)], [t]
    outs, states = F.contrib.foreach(step, data, [s0])
    return [outs[0], states[0]]


# name, function, input shapes (in the function's order), dtype, {output: defined rows}, input overrides
CASES = [
    ('foreach_rnn', foreach_rnn, [(4, 3, 5), (3, 6), (5, 6), (6, 6), (1, 6)], 'float32', {}, {}),
    ('foreach_rnn_f64', foreach_rnn, [(4, 3, 5), (3, 6), (5, 6), (6, 6), (1, 6)], 'float64', {}, {}),
    ('foreach_two', foreach_two, [(5, 2, 3), (5,), (2, 3), (2, 3), (2, 3)], 'float32', {}, {}),
    ('while_counter', while_counter, [(1,), (2, 3), (2, 3), (2, 3)], 'float32', {0: 5}, {'i': 'zero'}),
    ('while_never', while_never, [(2, 2), (2, 2)], 'float32', {0: 0}, {}),
    ('cond_then', cond_branches, [(3, 4), (3, 4)], 'float32', {}, {'a': 'positive'}),
    ('cond_else', cond_branches, [(3, 4), (3, 4)], 'float32', {}, {'a': 'negative'}),
    ('nested', nested, [(6, 2, 2), (2, 2), (2, 2)], 'float32', {}, {}),
]


def run(name, fn, shapes, dtype, defined, overrides, params):
    names = fn.__code__.co_varnames[1:1 + len(shapes)]
    sym = mx.sym.Group(fn(mx.sym, *[mx.sym.var(n) for n in names]))
    args = sym.list_arguments()
    shape_of = dict(zip(names, shapes))
    values = {}
    for n in names:
        v = rng.uniform(-1, 1, size=shape_of[n])
        kind = overrides.get(n)
        if kind == 'zero':
            v = np.zeros(shape_of[n])
        elif kind == 'positive':
            v = np.abs(v)
        elif kind == 'negative':
            v = -np.abs(v)
        values[n] = mx.nd.array(v, dtype=dtype)
        params['%s:in:%s' % (name, n)] = values[n]
    try:
        exe = sym.simple_bind(mx.cpu(), grad_req='write', type_dict={a: dtype for a in args},
                              **{a: shape_of[a] for a in args})
    except (RuntimeError, mx.base.MXNetError):
        exe = None
    if exe is not None:
        for a in args:
            exe.arg_dict[a][:] = values[a]
        outs = exe.forward(is_train=True)
        heads = [mx.nd.array(rng.uniform(-1, 1, size=o.shape), dtype=dtype) for o in outs]
        exe.backward(heads)
        grads = exe.grad_dict
    else:
        ins = [values[n].copy() for n in names]
        for x in ins:
            x.attach_grad()
        with mx.autograd.record(train_mode=True):
            outs = fn(mx.nd, *ins)
        heads = [mx.nd.array(rng.uniform(-1, 1, size=o.shape), dtype=dtype) for o in outs]
        mx.autograd.backward(outs, heads)
        grads = {n: x.grad for n, x in zip(names, ins)}
    # The imperative while_loop leaves out step outputs it has no step for: they are the symbol's first outputs.
    first = len(sym.list_outputs()) - len(outs)
    for k, o in enumerate(outs):
        params['%s:out:%d' % (name, first + k)] = o.copy()
        params['%s:head:%d' % (name, first + k)] = heads[k]
    for a in args:
        params['%s:grad:%s' % (name, a)] = grads[a].copy()
    sym.save(os.path.join(HERE, name + '-symbol.json'))
    return {'name': name, 'dtype': dtype, 'reference': 'executor' if exe is not None else 'imperative',
            'defined_rows': {str(k): v for k, v in defined.items()}}


def main():
    params = {}
    cases = [run(*case, params) for case in CASES]
    mx.nd.save(os.path.join(HERE, 'control_flow.params'), params)
    with open(os.path.join(HERE, 'cases.json'), 'w') as f:
        json.dump(cases, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
