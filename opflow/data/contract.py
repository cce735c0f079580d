"""What a dataset file promises beyond its schema: the variables its generator writes, and a split
that training and evaluation can use. Checked by ``opflow validate`` (:func:`opflow.data.format.check_file`).

* **Variables.** A file records its generator and parameters (``opflow_generator``,
  ``opflow_params``; a derived file keeps its source's). The generator declares the fields and
  coordinates it writes; a file whose variables differ (a field renamed ``u`` -> ``v`` after
  generation, so training would learn ``v``) is invalid. The declaration comes from the
  generator itself, which lives in ``solvers`` (opflow never imports it): the caller passes a
  lookup, :class:`Declared` per file (``opflow validate`` passes :func:`pipeline.regenerate.declared_variables`);
  a file whose generator is not registered here (a test's, another version's) is not checked.
* **Split.** A derived file (``opflow_split_rule``, written by ``opflow derive``) must have its
  ``split`` variable, and the number of train, val and test samples must be those the rule records
  (the dataset's configured sizes). Any file with a ``split`` must have test samples, and train
  samples unless its rule records none (a dataset that only serves as an evaluation set).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: variables every opflow file may have besides the generator's own
INFRASTRUCTURE = frozenset({"sample", "sample_index", "split"})


@dataclass(frozen=True)
class Declared:
    """The variables generator ``generator`` writes with the file's parameters."""

    generator: str
    #: per-sample fields
    fields: frozenset[str]
    #: coordinate variables; None when they cannot be built here (e.g. a mesh without gmsh)
    coords: frozenset[str] | None = None


def _names(names: Iterable[str]) -> str:
    return "[" + ", ".join(sorted(names)) + "]"


def variable_problems(nc: Any, declared: Declared) -> list[str]:
    """One problem line when the file's variables are not those ``declared`` (none when they are)."""
    per_sample = {n for n, v in nc.variables.items() if v.dimensions[:1] == ("sample",)} - INFRASTRUCTURE
    static = set(nc.variables) - per_sample - INFRASTRUCTURE
    missing = sorted(declared.fields - per_sample)
    extra = sorted(per_sample - declared.fields)
    if declared.coords is not None:
        missing += sorted(declared.coords - static)
        extra += sorted(static - declared.coords)
    if not missing and not extra:
        return []
    parts = []
    if missing:
        parts.append(f"missing {_names(missing)}")
    if extra:
        parts.append(f"not written by it {_names(extra)}")
    renamed = " (renamed after generation?)" if missing and extra else ""
    return [
        f"variables differ from what generator {declared.generator!r} writes ({_names(declared.fields)}): {'; '.join(parts)}{renamed}; "
        "make the file again from its source (snakemake, or `opflow regenerate FILE --out NEW`)"
    ]


def _rule_counts(rule_text: Any, splits: Iterable[str]) -> dict[str, int] | str:
    try:
        rule = json.loads(str(rule_text))
        return {k: int(rule[k][1]) - int(rule[k][0]) for k in splits}
    except (ValueError, KeyError, TypeError, IndexError) as e:
        return f"attribute opflow_split_rule is not a train/val/test rule ({type(e).__name__}: {e})"


def split_problems(nc: Any, splits: Mapping[str, int]) -> list[str]:
    """Problems of the ``split`` variable (codes ``splits``: name -> code, :data:`opflow.data.format.SPLITS`)
    against the split contract (module docstring)."""
    SPLITS = splits  # noqa: N806 - the format's constant, passed in (this module does not import the format)
    rule = _rule_counts(nc.getncattr("opflow_split_rule"), SPLITS) if "opflow_split_rule" in nc.ncattrs() else None
    if isinstance(rule, str):
        return [rule]
    if "split" not in nc.variables:
        if rule is None:
            return []
        want = ", ".join(f"{rule[k]} {k}" for k in SPLITS)
        return [f"no 'split' variable, but it is a derived file whose opflow_split_rule records {want}; derive it again (opflow derive)"]
    codes = np.asarray(nc.variables["split"][:])
    have = {k: int((codes == c).sum()) for k, c in SPLITS.items()}
    text = ", ".join(f"{have[k]} {k}" for k in SPLITS)
    if rule is not None and have != rule:
        want = ", ".join(f"{rule[k]} {k}" for k in SPLITS)
        return [f"split has {text} samples but opflow_split_rule records {want} (the dataset's configured sizes); derive it again (opflow derive)"]
    problems = []
    if not have["test"]:
        problems.append(f"split has no test samples ({text}): there is nothing to evaluate on; derive it again with --test N")
    if not have["train"] and (rule is None or rule["train"]):
        problems.append(f"split has no train samples ({text}): there is nothing to train on; derive it again with --train N")
    return problems
