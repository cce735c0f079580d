"""The user-facing error types; their messages name the problem and the fix."""


class DatasetError(ValueError):
    """A dataset file is missing, foreign, incomplete or malformed."""


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names it and the allowed values."""


class MissingStackError(ConfigError):
    """A solver needs a package this machine lacks (gmsh, dolfinx, basix: the FEM stack, absent on the GPU
    machines); the message names the package, the source and where such data can be made."""
