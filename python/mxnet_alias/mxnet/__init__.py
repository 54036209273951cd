"""`import mxnet` resolving to troupe: an opt-in alias so that MXNet 1.x scripts run unchanged.

Installed on its own (pip install python/mxnet_alias), next to the troupe package. `import mxnet as mx` gives the
troupe module itself and `mxnet.<sub>` (mxnet.gluon.nn, mxnet.ndarray, ...) troupe's submodules: the same
objects, so classes and isinstance checks agree whichever name a script uses.
"""
import importlib
import importlib.abc
import importlib.util
import sys


class _TroupeAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("mxnet."):
            try:
                importlib.util.find_spec("troupe" + fullname[len("mxnet"):])
            except ModuleNotFoundError:
                return None
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("troupe" + spec.name[len("mxnet"):])

    def exec_module(self, module):
        pass


if not any(isinstance(f, _TroupeAlias) for f in sys.meta_path):
    sys.meta_path.insert(0, _TroupeAlias())

import troupe as _troupe  # noqa: E402

sys.modules[__name__] = _troupe
