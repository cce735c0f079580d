"""The JSON schema of the workflow config, generated from the typed models the loader uses.

``opflow schema`` prints it, for editors and for checking a config with any JSON-schema validator
(``jsonschema``). Nothing in it is written by hand: every key, type, default, range and enum comes
from the pydantic models that :func:`opflow.config.parse_workflow` validates with, so the schema
cannot drift from the loader. What the typed tree keeps open, because the loader checks it per
choice, is closed here by generating one variant per choice:

* ``models.<name>``: one variant per architecture (:func:`opflow.models.hparams.available_archs`),
  its hyperparameter model plus ``arch`` (a constant, the discriminator) and ``training``; or an entry
  that ``extends`` another (:func:`opflow.config.expand_extends`): ``extends`` a name, ``training``
  typed, its other keys open, since their arch is the other entry's (the loader checks the expanded entry);
* ``datasets.<name>.view``: one variant per registered view kind
  (:func:`opflow.data.view_spec.view_kinds`), ``kind`` required except for ``auto`` (the
  default), or the kind's name alone, or null;
* ``sources.<name>``: one variant per solver, ``solver`` a constant (the discriminator) and
  ``params`` the solver's ``Params`` dataclass as the loader types it
  (:func:`opflow.schema.dataclass_model`), when the caller passes the solvers' ``Params`` classes
  (``opflow`` never imports ``solvers``: :mod:`opflow.cli` does, as for ``regenerate``); without
  them ``params`` is an open mapping.

Floats: the loader reads numeric strings as floats (YAML 1.1 reads ``1e-3`` as a string), so
every non-strict ``number`` of the schema also admits a numeric string (:class:`ConfigJsonSchema`).

Not expressible in a JSON schema, and checked only when the workflow loads: cross-field rules
(``width`` a multiple of ``n_heads``, frames within a source, splits within ``n_samples``, ...),
and the mapping of a YAML config over ``config/default.yaml`` (validate the merged config).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema as cs

from opflow.config import DatasetConfig, SourceConfig, TrainConfig, WorkflowConfig
from opflow.data.view_spec import AutoView, spec_of, view_kinds
from opflow.models.hparams import available_archs, hparams_model
from opflow.schema import Str, dataclass_model

#: the numeric strings Python's ``float`` reads that a YAML file may hold (no inf / nan)
NUMERIC_STRING = r"^\s*[+-]?(\d+(_?\d+)*\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"


class ConfigJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, with lax floats admitting numeric strings as the loader does."""

    def float_schema(self, schema: cs.FloatSchema) -> JsonSchemaValue:
        number = super().float_schema(schema)
        if schema.get("strict"):
            return number
        return {"anyOf": [number, {"type": "string", "pattern": NUMERIC_STRING}]}


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p)


def _one_of(variants: list[type[BaseModel]], tag: str) -> Any:
    """The union of ``variants``, discriminated by the constant field ``tag``."""
    if len(variants) == 1:
        return variants[0]
    return Annotated[Union[tuple(variants)], Field(discriminator=tag)]  # noqa: UP007


def _model_entries() -> Any:
    """``models.<name>``: per arch, its hyperparameters + ``arch`` + ``training``."""
    variants = []
    for arch in available_archs():
        hp = hparams_model(arch)
        variants.append(
            create_model(
                f"{_camel(arch)}Model", __base__=hp, __doc__=hp.__doc__,
                arch=(Literal[arch], ...), training=(TrainConfig | None, None),
            )  # fmt: skip
        )
    extending = create_model(
        "ExtendingModel", __config__=ConfigDict(extra="allow"),
        __doc__="An entry written as another entry (``extends``) with some keys changed; the loader checks it expanded.",
        extends=(Str, ...), training=(TrainConfig | None, None),
    )  # fmt: skip
    return Union[_one_of(variants, "arch"), extending]  # noqa: UP007


def _views() -> Any:
    """``datasets.<name>.view``: per registered kind its specification (``kind`` required but for
    auto), the kind's name alone, or null (auto)."""
    variants: list[type[BaseModel]] = []
    for kind in view_kinds():
        spec = spec_of(kind)
        assert spec is not None
        if issubclass(spec, AutoView):
            variants.append(spec)
        else:
            variants.append(create_model(spec.__name__, __base__=spec, __doc__=spec.__doc__, kind=(Literal[kind], ...)))
    return Union[_one_of(variants, "kind"), Literal[tuple(view_kinds())], None]  # noqa: UP007


def _sources(solver_params: Mapping[str, type]) -> Any:
    """``sources.<name>``: per solver, ``solver`` a constant and ``params`` its ``Params``."""
    variants = []
    for solver, params_cls in sorted(solver_params.items()):
        loaded = dataclass_model(params_cls)
        params = create_model(f"{_camel(solver)}Params", __base__=loaded, __doc__=params_cls.__doc__)
        required = any(f.is_required() for f in loaded.model_fields.values())
        variants.append(
            create_model(
                f"{_camel(solver)}Source", __base__=SourceConfig, __doc__=SourceConfig.__doc__,
                solver=(Literal[solver], ...), params=(params, ... if required else Field(default_factory=dict)),
            )  # fmt: skip
        )
    return _one_of(variants, "solver")


def _schema_model(solver_params: Mapping[str, type]) -> type[WorkflowConfig]:
    """A schema-only subclass of :class:`WorkflowConfig` whose open entries are closed per choice
    (built on each call: architectures and view kinds can be registered at run time)."""
    dataset = create_model("DatasetConfig", __base__=DatasetConfig, __doc__=DatasetConfig.__doc__, view=(_views(), Field(default_factory=AutoView)))
    fields: dict[str, Any] = {
        "datasets": (dict[Str, dataset], Field(default_factory=dict)),
        "models": (dict[Str, _model_entries()], Field(default_factory=dict)),
    }
    if solver_params:
        fields["sources"] = (dict[Str, _sources(solver_params)], Field(default_factory=dict))
    return create_model("WorkflowConfig", __base__=WorkflowConfig, __doc__=WorkflowConfig.__doc__, **fields)


def workflow_json_schema(solver_params: Mapping[str, type] | None = None) -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of the workflow config (module docstring).

    ``solver_params``: solver name -> its ``Params`` dataclass (:func:`solvers.base.params_classes`),
    to type ``sources.<name>.params`` per solver; without it they are open mappings.
    """
    model = _schema_model(solver_params or {})
    schema = model.model_json_schema(schema_generator=ConfigJsonSchema)
    schema["$schema"] = ConfigJsonSchema.schema_dialect
    return schema


__all__ = ["NUMERIC_STRING", "ConfigJsonSchema", "workflow_json_schema"]
