"""mx.runtime: which features this build of troupe has (MXNet's runtime.Features)."""
import collections

from . import _core

Feature = collections.namedtuple("Feature", ["name", "enabled"])


def feature_list():
    """The features as (name, enabled) pairs, with MXNet's names where they mean the same."""
    has = dict(_core.features())
    return [Feature(name, bool(has.get(name, False))) for name in sorted(has)]


class Features(collections.OrderedDict):
    """Features by name: Features().is_enabled("CUDA")."""

    def __init__(self):
        super().__init__((f.name, f) for f in feature_list())

    def is_enabled(self, feature_name):
        feature_name = feature_name.upper()
        if feature_name not in self:
            raise RuntimeError("Feature '{}' is unknown, known features are: {}".format(feature_name, list(self)))
        return self[feature_name].enabled
