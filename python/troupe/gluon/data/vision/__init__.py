"""gluon.data.vision: image datasets read from local files, and transforms."""
from .datasets import MNIST, FashionMNIST
from . import transforms
