"""The user-facing error types; their messages name the problem and the fix."""

from __future__ import annotations


class DatasetError(ValueError):
    """A dataset file is missing, foreign, incomplete or malformed."""


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names it and the allowed values.

    One error may carry several problems (:meth:`collect`: every mistake of a config at once, one
    line each); :attr:`problems` lists them (the message alone for a single one).
    """

    @property
    def problems(self) -> list[str]:
        """One line per problem."""
        return list(getattr(self, "_problems", None) or [str(self)])

    @classmethod
    def collect(cls, problems: list[str]) -> ConfigError:
        """One error holding ``problems`` (message: one per line, in order, repeats dropped)."""
        unique = list(dict.fromkeys(problems))
        err = cls("\n".join(unique))
        err._problems = unique
        return err


class MissingStackError(ConfigError):
    """A solver needs a package this machine lacks (gmsh, dolfinx, basix: the FEM stack, absent on the GPU
    machines); the message names the package, the source and where such data can be made."""


class DiskFullError(DatasetError):
    """A file could not be written for lack of space (a full file system or quota, or the file-size
    limit of ``ulimit -f``); the message names the path, the bytes free and needed, and says that the
    partial file was removed (:func:`opflow.atomic.no_space_error`)."""
