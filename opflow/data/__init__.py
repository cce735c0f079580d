"""Data side of opflow: the NetCDF dataset format (one place), provenance, shards and transforms.

Importing this package is cheap and needs neither torch nor dolfinx.
"""

from .errors import ConfigError, DatasetError
from .format import FORMAT, Dataset, DatasetWriter, Variable, read_dataset, validate, write_dataset

__all__ = ["ConfigError", "FORMAT", "Dataset", "DatasetError", "DatasetWriter", "Variable", "read_dataset", "validate", "write_dataset"]
