"""Module: binds a symbol for data and label shapes, initialises its parameters, trains it (fit) and scores it,
in Python over troupe's executor (so callbacks and metric objects work as in MXNet)."""
import logging
import time

import numpy as np

from .. import initializer, metric as metric_mod, ndarray as nd, optimizer as opt
from ..context import Context, cpu
from ..io import DataDesc
from ..model import BatchEndParam, save_checkpoint, load_checkpoint


def _descs(shapes):
    if shapes is None:
        return []
    return [s if isinstance(s, DataDesc) else DataDesc(*s) for s in shapes]


class BaseModule:
    def forward_backward(self, data_batch):
        self.forward(data_batch, is_train=True)
        self.backward()

    def score(self, eval_data, eval_metric, num_batch=None, batch_end_callback=None, score_end_callback=None,
              reset=True, epoch=0, sparse_row_id_fn=None):
        """Runs prediction-mode forward passes over eval_data and returns the metric's (name, value) pairs."""
        if reset:
            eval_data.reset()
        eval_metric = metric_mod.create(eval_metric)
        eval_metric.reset()
        for nbatch, batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.forward(batch, is_train=False)
            self.update_metric(eval_metric, batch.label)
            for cb in _as_list(batch_end_callback):
                cb(BatchEndParam(epoch, nbatch, eval_metric, locals()))
        return eval_metric.get_name_value()

    def predict(self, eval_data, num_batch=None, merge_batches=True, reset=True, always_output_list=False,
                sparse_row_id_fn=None):
        """The outputs over eval_data (padding removed), concatenated over batches."""
        if reset:
            eval_data.reset()
        outputs = []
        for nbatch, batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.forward(batch, is_train=False)
            pad = batch.pad or 0
            outputs.append([o[:o.shape[0] - pad].copy() for o in self.get_outputs()])
        if not merge_batches:
            return outputs
        merged = [nd.concatenate([b[i] for b in outputs]) for i in range(len(outputs[0]))] if outputs else []
        return merged[0] if len(merged) == 1 and not always_output_list else merged

    def fit(self, train_data, eval_data=None, eval_metric="acc", epoch_end_callback=None, batch_end_callback=None,
            kvstore="local", optimizer="sgd", optimizer_params=(("learning_rate", 0.01),), eval_end_callback=None,
            eval_batch_end_callback=None, initializer=initializer.Uniform(0.01), arg_params=None, aux_params=None,
            allow_missing=False, force_rebind=False, force_init=False, begin_epoch=0, num_epoch=None,
            validation_metric=None, monitor=None, sparse_row_id_fn=None):
        """Trains for num_epoch epochs: forward, backward, update and the metric per batch, the callbacks, and a
        validation score per epoch when eval_data is given."""
        if num_epoch is None:
            raise ValueError("please specify number of epochs")
        self.bind(data_shapes=train_data.provide_data, label_shapes=train_data.provide_label, for_training=True,
                  force_rebind=force_rebind)
        self.init_params(initializer=initializer, arg_params=arg_params, aux_params=aux_params,
                         allow_missing=allow_missing, force_init=force_init)
        self.init_optimizer(kvstore=kvstore, optimizer=optimizer, optimizer_params=optimizer_params)
        validation_metric = validation_metric or eval_metric
        eval_metric = metric_mod.create(eval_metric)
        for epoch in range(begin_epoch, num_epoch):
            tic = time.time()
            eval_metric.reset()
            nbatch = 0
            for data_batch in train_data:
                self.forward_backward(data_batch)
                self.update()
                self.update_metric(eval_metric, data_batch.label)
                for cb in _as_list(batch_end_callback):
                    cb(BatchEndParam(epoch, nbatch, eval_metric, locals()))
                nbatch += 1
            for name, val in eval_metric.get_global_name_value():
                self.logger.info("Epoch[%d] Train-%s=%f", epoch, name, val)
            self.logger.info("Epoch[%d] Time cost=%.3f", epoch, time.time() - tic)
            arg, aux = self.get_params()
            for cb in _as_list(epoch_end_callback):
                cb(epoch, self.symbol, arg, aux)
            if eval_data is not None:
                res = self.score(eval_data, validation_metric, score_end_callback=eval_end_callback,
                                 batch_end_callback=eval_batch_end_callback, epoch=epoch)
                for name, val in res:
                    self.logger.info("Epoch[%d] Validation-%s=%f", epoch, name, val)
            train_data.reset()


def _as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


class Module(BaseModule):
    """A symbol with data and label names, bound on one context (MXNet's mx.mod.Module)."""

    def __init__(self, symbol, data_names=("data",), label_names=("softmax_label",), logger=logging, context=None,
                 work_load_list=None, fixed_param_names=None, state_names=None, group2ctxs=None,
                 compression_params=None):
        if isinstance(context, (list, tuple)):
            if len(context) != 1:
                raise ValueError("Module: one context only for now, got %d" % len(context))
            context = context[0]
        self.symbol = symbol
        self.logger = logger
        self._context = context or cpu()
        self._data_names = list(data_names or [])
        self._label_names = [n for n in (label_names or []) if n in symbol.list_arguments()]
        self._fixed = set(fixed_param_names or [])
        inputs = set(self._data_names + self._label_names)
        self._param_names = [n for n in symbol.list_arguments() if n not in inputs]
        self._aux_names = symbol.list_auxiliary_states()
        self._output_names = symbol.list_outputs()
        self._exec = None
        self._arg_params = self._aux_params = None
        self.binded = self.params_initialized = self.optimizer_initialized = False
        self.for_training = False
        self._updater = None

    data_names = property(lambda self: self._data_names)
    label_names = property(lambda self: self._label_names)
    output_names = property(lambda self: self._output_names)

    @property
    def data_shapes(self):
        return self._data_shapes

    @property
    def label_shapes(self):
        return self._label_shapes

    @property
    def output_shapes(self):
        return [(n, o.shape) for n, o in zip(self._output_names, self._exec.outputs)]

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False, force_rebind=False,
             shared_module=None, grad_req="write"):
        if self.binded and not force_rebind:
            self.logger.warning("Already bound, ignoring bind()")
            return
        self._data_shapes, self._label_shapes = _descs(data_shapes), _descs(label_shapes)
        self.for_training = for_training
        shapes = {d.name: d.shape for d in self._data_shapes + self._label_shapes}
        types = {d.name: d.dtype for d in self._data_shapes + self._label_shapes}
        reqs = {}
        for n in self.symbol.list_arguments():
            if n in self._param_names:
                reqs[n] = grad_req if for_training and n not in self._fixed else "null"
            else:
                reqs[n] = "write" if inputs_need_grad and n in self._data_names else "null"
        self._exec = self.symbol.simple_bind(self._context, grad_req=reqs, type_dict=types, **shapes)
        self._grad_req = grad_req
        self.binded = True
        if self.params_initialized:
            self._exec.copy_params_from(self._arg_params, self._aux_params)
            self._arg_params = {n: self._exec.arg_dict[n] for n in self._param_names}
            self._aux_params = {n: self._exec.aux_dict[n] for n in self._aux_names}

    def init_params(self, initializer=initializer.Uniform(0.01), arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        if self.params_initialized and not force_init:
            return
        if not self.binded:
            raise RuntimeError("call bind before initializing the parameters")
        for names, given, arrays in ((self._param_names, arg_params, self._exec.arg_dict),
                                     (self._aux_names, aux_params, self._exec.aux_dict)):
            for name in names:
                if given is not None and name in given:
                    given[name].copyto(arrays[name])
                elif given is not None and not allow_missing:
                    raise RuntimeError("%s is not presented" % name)
                elif initializer is not None:
                    initializer(name, arrays[name])
        self._arg_params = {n: self._exec.arg_dict[n] for n in self._param_names}
        self._aux_params = {n: self._exec.aux_dict[n] for n in self._aux_names}
        self.params_initialized = True

    def get_params(self):
        return ({n: a.copyto(cpu()) for n, a in self._arg_params.items()},
                {n: a.copyto(cpu()) for n, a in self._aux_params.items()})

    def set_params(self, arg_params, aux_params, allow_missing=False, force_init=True, allow_extra=False):
        self.init_params(None, arg_params, aux_params, allow_missing, force_init, allow_extra)

    def init_optimizer(self, kvstore="local", optimizer="sgd", optimizer_params=(("learning_rate", 0.01),),
                       force_init=False):
        if self.optimizer_initialized and not force_init:
            return
        params = dict(optimizer_params)
        if "rescale_grad" not in params:
            params["rescale_grad"] = 1.0 / self._data_shapes[0].shape[0]
        idx2name = dict(enumerate(self._param_names))
        if isinstance(optimizer, str):
            optimizer = opt.create(optimizer, param_idx2name=idx2name, **params)
        else:
            optimizer.idx2name = idx2name
        attrs = self.symbol.attr_dict()
        optimizer.set_lr_mult({n: float(attrs.get(n, {}).get("__lr_mult__", 1.0)) for n in self._param_names})
        optimizer.set_wd_mult({n: float(attrs.get(n, {}).get("__wd_mult__", 0.0 if n.endswith(("bias", "gamma", "beta"))
                                                               else 1.0)) for n in self._param_names})
        self._optimizer = optimizer
        self._updater = opt.get_updater(optimizer)
        self.optimizer_initialized = True

    def forward(self, data_batch, is_train=None):
        is_train = self.for_training if is_train is None else is_train
        shapes = [a.shape for a in data_batch.data]
        if shapes != [d.shape for d in self._data_shapes]:
            # Another batch size (a last batch, predict on other data): bind again for it, parameters kept.
            labels = data_batch.label or []
            self.bind([DataDesc(d.name, s, d.dtype) for d, s in zip(self._data_shapes, shapes)],
                      [DataDesc(l.name, a.shape, l.dtype) for l, a in zip(self._label_shapes, labels)] or
                      [DataDesc(l.name, (shapes[0][0],) + tuple(l.shape[1:]), l.dtype) for l in self._label_shapes],
                      self.for_training, force_rebind=True, grad_req=self._grad_req)
        for name, arr in zip(self._data_names, data_batch.data):
            arr.copyto(self._exec.arg_dict[name])
        if data_batch.label is not None:
            for name, arr in zip(self._label_names, data_batch.label):
                arr.copyto(self._exec.arg_dict[name])
        self._exec.forward(is_train=is_train)

    def backward(self, out_grads=None):
        self._exec.backward(out_grads)

    def update(self):
        for i, name in enumerate(self._param_names):
            if name in self._exec.grad_dict:
                self._updater(i, self._exec.grad_dict[name], self._exec.arg_dict[name])

    def get_outputs(self, merge_multi_context=True):
        return self._exec.outputs

    def get_input_grads(self, merge_multi_context=True):
        return [self._exec.grad_dict[n] for n in self._data_names]

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        eval_metric.update(labels, self.get_outputs())

    def save_checkpoint(self, prefix, epoch, save_optimizer_states=False, remove_amp_cast=True):
        self.symbol.save("%s-symbol.json" % prefix)
        arg, aux = self.get_params()
        save_checkpoint(prefix, epoch, None, arg, aux)

    @staticmethod
    def load(prefix, epoch, load_optimizer_states=False, **kwargs):
        sym, arg, aux = load_checkpoint(prefix, epoch)
        mod = Module(symbol=sym, **kwargs)
        mod._arg_params, mod._aux_params = arg, aux
        mod._preload = (arg, aux)
        mod.params_initialized = False
        orig_bind = mod.bind

        def bind(*a, **k):
            orig_bind(*a, **k)
            mod.init_params(None, arg, aux, allow_missing=False, force_init=True)
        mod.bind = bind
        return mod
