"""The user-facing error types; their messages name the problem and the fix."""


class DatasetError(ValueError):
    """A dataset file is missing, foreign, incomplete or malformed."""


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names it and the allowed values."""


class MissingStackError(ConfigError):
    """A solver needs a package this machine lacks (gmsh, dolfinx, basix: the FEM stack, absent on the GPU
    machines); the message names the package, the source and where such data can be made."""


class DiskFullError(DatasetError):
    """A file could not be written for lack of space (a full file system or quota, or the file-size
    limit of ``ulimit -f``); the message names the path, the bytes free and needed, and says that the
    partial file was removed (:func:`opflow.atomic.no_space_error`)."""
