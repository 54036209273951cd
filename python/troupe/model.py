"""mx.model: checkpoints as MXNet writes them (prefix-symbol.json, prefix-NNNN.params with arg:/aux: names)."""
from . import ndarray as nd, symbol as sym


def save_checkpoint(prefix, epoch, symbol, arg_params, aux_params, remove_amp_cast=True):
    if symbol is not None:
        symbol.save("%s-symbol.json" % prefix)
    save = {"arg:%s" % k: v for k, v in arg_params.items()}
    save.update({"aux:%s" % k: v for k, v in aux_params.items()})
    nd.save("%s-%04d.params" % (prefix, epoch), save)


def load_params(prefix, epoch):
    arg_params, aux_params = {}, {}
    for k, v in nd.load("%s-%04d.params" % (prefix, epoch)).items():
        kind, _, name = k.partition(":")
        if kind == "arg":
            arg_params[name] = v
        elif kind == "aux":
            aux_params[name] = v
    return arg_params, aux_params


def load_checkpoint(prefix, epoch):
    """(symbol, arg_params, aux_params) of a checkpoint."""
    return (sym.load("%s-symbol.json" % prefix),) + load_params(prefix, epoch)


BatchEndParam = __import__("collections").namedtuple("BatchEndParams", ["epoch", "nbatch", "eval_metric", "locals"])
