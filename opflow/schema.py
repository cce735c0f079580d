"""Validation of the workflow config against config/schema.yaml with short, actionable messages.

jsonschema's own messages dump the whole schema; these name the dotted key path, what is wrong,
and the allowed keys or values, e.g.::

    config error at sources.darcy_piecewise: unknown key 'n_sample'; allowed: mpi_ranks, n_samples, ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opflow.data.errors import ConfigError


def _path(err: Any) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "<top level>"


def _message(err: Any) -> str:
    where = _path(err)
    schema = err.schema
    if err.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        keys = ", ".join(repr(k) for k in extra)
        return f"config error at {where}: unknown key {keys}; allowed: {', '.join(allowed)}"
    if err.validator == "required":
        return f"config error at {where}: {err.message}"
    if err.validator == "enum":
        return f"config error at {where}: {err.instance!r} is not one of {schema['enum']}"
    return f"config error at {where}: {err.message}"


def validate_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Raise :class:`ConfigError` describing the first (deepest) schema violation, if any."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (-len(e.absolute_path), str(e.absolute_path)))
    if errors:
        raise ConfigError(_message(errors[0]))
