"""``opflow schema``: the JSON schema is generated from the models the loader uses, so the shipped
configs validate against it and the configs the loader refuses are refused by it too."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from opflow.cli import main
from opflow.config import check_workflow, load_config_files
from opflow.config_schema import workflow_json_schema
from opflow.data.errors import ConfigError
from opflow.data.view_spec import spec_of, view_kinds
from opflow.models.hparams import ARCHITECTURES, available_archs, hparams_model
from opflow.schema import dataclass_model
from solvers.base import get_generator, params_classes

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = str(ROOT / "config" / "default.yaml")
QUICK = str(ROOT / "config" / "quick.yaml")


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``opflow schema --out FILE`` writes."""
    out = tmp_path_factory.mktemp("schema") / "schema.json"
    assert main(["schema", "--out", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def default() -> dict[str, Any]:
    return load_config_files([DEFAULT])


def errors(schema: dict[str, Any], config: dict[str, Any]) -> list[jsonschema.ValidationError]:
    return list(jsonschema.Draft202012Validator(schema).iter_errors(config))


def test_the_schema_is_a_valid_draft_2020_12_schema(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("files", [[DEFAULT], [DEFAULT, QUICK]], ids=["default", "default+quick"])
def test_the_shipped_configs_validate(schema: dict[str, Any], files: list[str]) -> None:
    """quick.yaml is an overlay (it sets sizes only): it is checked merged over default.yaml, as
    ``snakemake --configfile config/quick.yaml`` reads it."""
    config = load_config_files(files)
    assert [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors(schema, config)] == []


def _set(config: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(config)
    *path, last = dotted.split("/")
    node = out
    for key in path:
        node = node[key]
    node[last] = value
    return out


# (what is wrong, key path, bad value, the loader's message)
WRONG = [
    ("unknown hyperparameter", "models/ono/widht", 64, "models.ono: ono has no hyperparameter 'widht'"),
    ("hyperparameter of another arch", "models/fno/ortho_dim", 16, "models.fno: fno has no hyperparameter 'ortho_dim'"),
    ("wrong type of a hyperparameter", "models/ono/n_layers", "8", "models.ono.n_layers: '8' is not of type int"),
    ("unknown arch", "models/ono/arch", "onoo", "unknown model arch 'onoo'"),
    ("extends a number", "models/gt_regular/extends", 3, "models.gt_regular.extends: 3 is not a model name"),
    ("an arch key in an entry that extends none", "models/gt/nrom", "regular", "models.gt: gt has no hyperparameter 'nrom'"),
    ("wrong type of a solver parameter", "sources/darcy_piecewise/params/resolution", 421.5, "resolution: 421.5 is not of type int"),
    ("unknown solver parameter", "sources/darcy_piecewise/params/resolutoin", 421, "unknown parameter 'resolutoin'"),
    ("solver parameter not among its choices", "sources/darcy_piecewise/params/coefficient", "smooth", "'smooth' is not one of"),
    ("unknown view key", "datasets/kolmogorov/view/history", 10, "do not belong to view kind 'one_step'"),
    ("view key without its kind", "datasets/burgers/view", {"coords": "unit"}, "do not belong to view kind 'auto'"),
    ("unknown view kind", "datasets/burgers/view", "gird", "kind: 'gird' is not one of"),
    ("unknown training key", "training/epoch", 3, "training: unknown key 'epoch'"),
    ("bad device", "training/device", "gpu", "'gpu' must be auto, cpu, mps, cuda or cuda:N"),
]


def _loader_refuses(config: dict[str, Any]) -> str:
    """The loader's message (the typed tree and, for a source's params, its solver's Params)."""
    with pytest.raises(ConfigError) as e:
        check_workflow(config)
        for name, src in config["sources"].items():
            get_generator(src["solver"]).from_config(src.get("params"), f"sources.{name}.params")
    return str(e.value)


@pytest.mark.parametrize("what, key, value, message", WRONG, ids=[w[0] for w in WRONG])
def test_a_config_the_loader_refuses_is_refused_by_the_schema(
    schema: dict[str, Any], default: dict[str, Any], what: str, key: str, value: Any, message: str
) -> None:
    bad = _set(default, key, value)
    assert message in _loader_refuses(bad)
    found = errors(schema, bad)
    assert found, f"the schema accepts a config with {what} ({key}: {value!r})"
    where = key.split("/")[:-1][:2]  # the entry (or section) holding the bad key
    assert all(list(e.absolute_path)[: len(where)] == where for e in found), [list(e.absolute_path) for e in found]


# what the loader accepts besides the plain form: the schema must accept it too
SHORTHANDS = [
    ("a view as its kind's name", "datasets/burgers/view", "grid"),
    ("a null view (auto)", "datasets/burgers/view", None),
    ("one task variable without a list", "datasets/burgers/task", {"inputs": "u0", "outputs": "u"}),
    ("a float as a YAML 1.1 numeric string", "training/lr", "1e-3"),
    ("an int where a float goes", "sources/darcy_piecewise/params/rtol", 0),
    ("a hyperparameter set from the data", "models/gnot/global_channels", 2),
]


@pytest.mark.parametrize("what, key, value", SHORTHANDS, ids=[s[0] for s in SHORTHANDS])
def test_what_the_loader_accepts_the_schema_accepts(schema: dict[str, Any], default: dict[str, Any], what: str, key: str, value: Any) -> None:
    ok = _set(default, key, value)
    if "rtol" not in key:  # rtol 0 is a type the schema takes; its range is the Params' own check
        check_workflow(ok)
    assert [e.message for e in errors(schema, ok)] == []


def test_every_variant_is_generated_from_the_loader_models(schema: dict[str, Any]) -> None:
    """One variant per architecture, solver and view kind, with exactly the loader's fields."""
    defs = schema["$defs"]

    def variant(branch: dict[str, Any], tag: str, value: str) -> dict[str, Any]:
        refs = branch["discriminator"]["mapping"]
        assert branch["discriminator"]["propertyName"] == tag and set(refs) >= {value}
        return defs[refs[value].rsplit("/", 1)[1]]

    by_arch, extending = schema["properties"]["models"]["additionalProperties"]["anyOf"]
    models = by_arch
    assert defs[extending["$ref"].rsplit("/", 1)[1]]["required"] == ["extends"]  # the other keys are the base's arch's
    assert set(models["discriminator"]["mapping"]) == set(available_archs()) >= set(ARCHITECTURES)  # runtime registrations too
    for arch in available_archs():
        hparams = hparams_model(arch)
        v = variant(models, "arch", arch)
        assert set(v["properties"]) == {*hparams.model_fields, "arch", "training"} and v["additionalProperties"] is False
        assert v["properties"]["arch"]["const"] == arch and "arch" in v["required"]

    sources = schema["properties"]["sources"]["additionalProperties"]
    solvers = params_classes()
    assert set(sources["discriminator"]["mapping"]) == set(solvers)
    for name, params in solvers.items():
        v = variant(sources, "solver", name)
        p = defs[v["properties"]["params"]["$ref"].rsplit("/", 1)[1]]
        assert set(p["properties"]) == set(dataclass_model(params).model_fields) and p["additionalProperties"] is False

    view = defs["DatasetConfig"]["properties"]["view"]["anyOf"]
    assert set(view[0]["discriminator"]["mapping"]) == set(view_kinds()) and view[1]["enum"] == list(view_kinds())
    for kind in view_kinds():
        v = variant(view[0], "kind", kind)
        assert set(v["properties"]) == set(spec_of(kind).model_fields)
        assert ("kind" in v.get("required", [])) == (kind != "auto")  # a mapping without kind is auto


def test_without_the_solvers_params_are_an_open_mapping() -> None:
    schema = workflow_json_schema()
    assert schema["properties"]["sources"]["additionalProperties"] == {"$ref": "#/$defs/SourceConfig"}
    assert schema["$defs"]["SourceConfig"]["properties"]["params"]["type"] == "object"
