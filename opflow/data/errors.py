"""The two user-facing error types; their messages name the problem and the fix."""


class DatasetError(ValueError):
    """A dataset file is missing, foreign, incomplete or malformed."""


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names it and the allowed values."""
