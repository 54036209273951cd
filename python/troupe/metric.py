"""mx.metric: evaluation metrics updated batch by batch (MXNet 1.x's mxnet.metric)."""
import math

import numpy as np

_registry = {}


def register(klass):
    _registry[klass.__name__.lower()] = klass
    return klass


def _np(a):
    return a.asnumpy() if hasattr(a, "asnumpy") else np.asarray(a)


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


class EvalMetric:
    """Accumulates a metric: update(labels, preds), get() -> (name, value), reset()."""

    def __init__(self, name, output_names=None, label_names=None, **kwargs):
        self.name = str(name)
        self.output_names, self.label_names = output_names, label_names
        self._kwargs = kwargs
        self.reset()

    def get_config(self):
        """The metric's configuration: create(**config) makes it again."""
        config = dict(self._kwargs)
        config.update({"metric": self.__class__.__name__, "name": self.name, "output_names": self.output_names,
                       "label_names": self.label_names})
        return config

    def reset(self):
        self.num_inst = 0
        self.sum_metric = 0.0
        self.global_num_inst = 0
        self.global_sum_metric = 0.0

    def reset_local(self):
        self.num_inst = 0
        self.sum_metric = 0.0

    def update(self, labels, preds):
        raise NotImplementedError

    def update_dict(self, label, pred):
        preds = [pred[n] for n in self.output_names] if self.output_names is not None else list(pred.values())
        labels = [label[n] for n in self.label_names] if self.label_names is not None else list(label.values())
        self.update(labels, preds)

    def _add(self, total, count):
        self.sum_metric += total
        self.num_inst += count
        self.global_sum_metric += total
        self.global_num_inst += count

    def get(self):
        return (self.name, float("nan") if self.num_inst == 0 else self.sum_metric / self.num_inst)

    def get_global(self):
        return (self.name, float("nan") if self.global_num_inst == 0 else self.global_sum_metric / self.global_num_inst)

    def get_name_value(self):
        name, value = self.get()
        return list(zip(_as_list(name), _as_list(value)))

    def get_global_name_value(self):
        name, value = self.get_global()
        return list(zip(_as_list(name), _as_list(value)))

    def __str__(self):
        return "EvalMetric: {}".format(dict(self.get_name_value()))


@register
class Accuracy(EvalMetric):
    def __init__(self, axis=1, name="accuracy", **kwargs):
        self.axis = axis
        super().__init__(name, **kwargs)

    def update(self, labels, preds):
        for label, pred in zip(_as_list(labels), _as_list(preds)):
            p, l = _np(pred), _np(label)
            if p.shape != l.shape:
                p = p.argmax(axis=self.axis)
            p, l = p.astype(np.int64).ravel(), l.astype(np.int64).ravel()
            if p.shape != l.shape:
                raise ValueError("Shape of labels {} does not match shape of predictions {}".format(l.shape, p.shape))
            self._add(float((p == l).sum()), len(l))


@register
class TopKAccuracy(EvalMetric):
    def __init__(self, top_k=1, name="top_k_accuracy", **kwargs):
        self.top_k = top_k
        super().__init__("%s_%d" % (name, top_k), **kwargs)

    def update(self, labels, preds):
        for label, pred in zip(_as_list(labels), _as_list(preds)):
            p, l = _np(pred), _np(label).astype(np.int64).ravel()
            top = np.argsort(p, axis=1)[:, -self.top_k:]
            self._add(float((top == l[:, None]).any(axis=1).sum()), len(l))


@register
class CrossEntropy(EvalMetric):
    def __init__(self, eps=1e-12, name="cross-entropy", **kwargs):
        self.eps = eps
        super().__init__(name, **kwargs)

    def update(self, labels, preds):
        for label, pred in zip(_as_list(labels), _as_list(preds)):
            l, p = _np(label).ravel().astype(np.int64), _np(pred)
            prob = p[np.arange(l.shape[0]), l]
            self._add(float((-np.log(prob + self.eps)).sum()), l.shape[0])


@register
class NegativeLogLikelihood(CrossEntropy):
    def __init__(self, eps=1e-12, name="nll-loss", **kwargs):
        super().__init__(eps, name, **kwargs)


class _Regression(EvalMetric):
    def _err(self, l, p):
        raise NotImplementedError

    def update(self, labels, preds):
        for label, pred in zip(_as_list(labels), _as_list(preds)):
            l, p = _np(label), _np(pred)
            if l.ndim == 1:
                l = l.reshape(l.shape[0], 1)
            if p.ndim == 1:
                p = p.reshape(p.shape[0], 1)
            self._add(self._err(l, p), 1)


@register
class MAE(_Regression):
    def __init__(self, name="mae", **kwargs):
        super().__init__(name, **kwargs)

    def _err(self, l, p):
        return float(np.abs(l - p).mean())


@register
class MSE(_Regression):
    def __init__(self, name="mse", **kwargs):
        super().__init__(name, **kwargs)

    def _err(self, l, p):
        return float(((l - p) ** 2.0).mean())


@register
class RMSE(_Regression):
    def __init__(self, name="rmse", **kwargs):
        super().__init__(name, **kwargs)

    def _err(self, l, p):
        return float(np.sqrt(((l - p) ** 2.0).mean()))


@register
class F1(EvalMetric):
    def __init__(self, name="f1", average="macro", **kwargs):
        self.average = average
        super().__init__(name, **kwargs)

    def reset(self):
        super().reset()
        self._tp = self._fp = self._fn = 0

    def update(self, labels, preds):
        for label, pred in zip(_as_list(labels), _as_list(preds)):
            p = _np(pred)
            p = p.argmax(axis=1) if p.ndim > 1 else (p > 0.5)
            l = _np(label).astype(np.int64).ravel()
            p = p.astype(np.int64).ravel()
            tp, fp, fn = int(((p == 1) & (l == 1)).sum()), int(((p == 1) & (l == 0)).sum()), int(((p == 0) & (l == 1)).sum())
            if self.average == "macro":
                prec = tp / (tp + fp) if tp + fp else 0.0
                rec = tp / (tp + fn) if tp + fn else 0.0
                self._add(2 * prec * rec / (prec + rec) if prec + rec else 0.0, 1)
            else:
                self._tp, self._fp, self._fn = self._tp + tp, self._fp + fp, self._fn + fn
                prec = self._tp / (self._tp + self._fp) if self._tp + self._fp else 0.0
                rec = self._tp / (self._tp + self._fn) if self._tp + self._fn else 0.0
                f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
                self.sum_metric, self.num_inst = f1, 1
                self.global_sum_metric, self.global_num_inst = f1, 1


@register
class Loss(EvalMetric):
    """The mean of the outputs (a loss the network computes)."""

    def __init__(self, name="loss", **kwargs):
        super().__init__(name, **kwargs)

    def update(self, _, preds):
        for p in _as_list(preds):
            a = _np(p)
            self._add(float(a.sum()), a.size)


class CustomMetric(EvalMetric):
    def __init__(self, feval, name=None, allow_extra_outputs=False, **kwargs):
        self._feval = feval
        super().__init__(name or getattr(feval, "__name__", "custom"), **kwargs)

    def update(self, labels, preds):
        for label, pred in zip(_as_list(labels), _as_list(preds)):
            r = self._feval(_np(label), _np(pred))
            if isinstance(r, tuple):
                self._add(r[0], r[1])
            else:
                self._add(r, 1)


def np_metric(name=None, allow_extra_outputs=False):
    def wrap(fn):
        return CustomMetric(fn, name, allow_extra_outputs)
    return wrap


class CompositeEvalMetric(EvalMetric):
    def __init__(self, metrics=None, name="composite", **kwargs):
        self.metrics = [create(m) for m in (metrics or [])]
        super().__init__(name, **kwargs)

    def add(self, metric):
        self.metrics.append(create(metric))

    def reset(self):
        for m in getattr(self, "metrics", []):
            m.reset()

    def update(self, labels, preds):
        for m in self.metrics:
            m.update(labels, preds)

    def _collect(self, getter):
        names, values = [], []
        for m in self.metrics:
            n, v = getter(m)
            names.extend(_as_list(n))
            values.extend(_as_list(v))
        return names, values

    def get(self):
        return self._collect(lambda m: m.get())

    def get_global(self):
        return self._collect(lambda m: m.get_global())

    def reset_local(self):
        for m in self.metrics:
            m.reset_local()


_aliases = {"acc": "accuracy", "ce": "crossentropy", "nll_loss": "negativeloglikelihood", "top_k_acc": "topkaccuracy",
            "cross-entropy": "crossentropy"}


def create(metric, *args, **kwargs):
    """A metric from an instance, a name ('acc', 'ce', 'mse', ...), a function, or a list of those."""
    if isinstance(metric, EvalMetric):
        return metric
    if callable(metric):
        return CustomMetric(metric, *args, **kwargs)
    if isinstance(metric, (list, tuple)):
        return CompositeEvalMetric([create(m) for m in metric])
    key = _aliases.get(metric.lower(), metric.lower())
    if key not in _registry:
        raise ValueError("Metric must be either callable or in %s" % sorted(_registry))
    return _registry[key](*args, **kwargs)
