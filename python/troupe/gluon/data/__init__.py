"""gluon.data: datasets and the DataLoader."""
from .dataset import Dataset, SimpleDataset, ArrayDataset
from .sampler import Sampler, SequentialSampler, RandomSampler, BatchSampler
from .dataloader import DataLoader, default_batchify_fn
from . import vision
