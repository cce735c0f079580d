"""The workflow layer: the config that Snakemake loads and checks as a whole, and regenerate.

``opflow`` (the learning side) and ``solvers`` (the generators) are the two halves of the
workflow; what relates them sits here, above both, and neither imports it:

* :mod:`pipeline.config`: :func:`~pipeline.config.load_workflow`, the one loader of the workflow
  config (``rules/common.smk`` and ``opflow train --config``): the typed tree and learning checks
  of :mod:`opflow.config`, the generators' metadata (parameters, grids, fields, frames) and every
  (dataset, model) pair against what the dataset will look like (:mod:`opflow.compat`); the JSON
  schema with each solver's ``params`` typed (``opflow schema``);
* :mod:`pipeline.regenerate`: rebuild a file from its provenance with its generator and compare
  (``opflow regenerate``), and the variables a file's generator declares (``opflow validate``).

Direction of imports across the packages (``tests/opflow/test_imports.py`` checks it; inside
``opflow`` see ``opflow/__init__.py``)::

    opflow.cli          the console script: imports pipeline inside the commands that need it
      ^
    pipeline            this package: imports opflow (below the cli) and solvers
      ^          ^
    opflow       solvers, meshes
    (below the   import opflow.data (the file format, the contract between the halves) and the
     cli)        leaves opflow.schema and opflow.atomic; nothing else of opflow, nothing of pipeline

So ``opflow`` imports neither ``solvers`` nor ``meshes``; only its console script imports this
package, and only inside the commands that read the workflow config or run generators (where
``solvers`` cannot be imported, e.g. a GPU machine without its dependencies, those commands say
so and the others work). The name is not ``workflow``: in a Snakefile that is Snakemake's own
object, which ``import workflow`` would hide.
"""
