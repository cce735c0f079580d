"""opflow: verified PDE datasets and attention-based neural operators in one Snakemake workflow.

Learning side: ``opflow.data`` (file format, datasets, normalisers), ``opflow.models``,
``opflow.train``, ``opflow.evaluate``, ``opflow.plots``, ``opflow.cli``; ``opflow.atomic`` is the one
atomic file writer. The numerical solvers live in the sibling package ``solvers`` and the gmsh
geometry in ``meshes``; ``opflow`` never imports them.

Direction of imports
--------------------

Each module imports only modules of the layers below its own (or beside it, within its package),
so there is no import cycle; ``tests/opflow/test_imports.py`` reads every import statement,
inside functions too (a lazy import that avoids a cycle at import time is still the cycle), and
fails on any cycle or on an edge against these rules::

    opflow.cli                       the console script; the only module that reaches the workflow layer
      ^                              (pipeline: the config Snakemake loads and checks, regenerate)
    train, train_step, evaluate, inference, report, publish, bench, resources, records, optim
      ^
    compat                           does a model fit a dataset view (models x data x training settings)
      ^
    config, config_schema            the typed workflow settings (torch-free)
      ^
    data (format, views, datasets)   models (hparams, needs, base, layers, architectures)
      ^                              -- siblings: neither imports the other, the config or compat
    leaves: data.errors, data.provenance, schema, atomic, filekind, losses, hostsync, metrics,
            plots, runtime, joblogs (the first two live in data/ but import nothing)

* The check that relates models and data (:mod:`opflow.compat`) sits above both: a model
  declares what it needs in the words of :mod:`opflow.models.needs` (a leaf of the models), and
  the check imports the models' hyperparameters and the config's training settings.
* The loss names are :mod:`opflow.losses`, a leaf both the config (which accepts them) and the
  metrics (which compute them) import; the metrics and the plots are leaves the data views call.
* Model classes registered at run time are kept in :mod:`opflow.models.hparams`
  (``REGISTERED``), so the torch-free hyperparameter lookups never import
  :mod:`opflow.models.base`.

Across packages (the top-level ``pipeline`` package's docstring has the whole picture): ``solvers``
and ``meshes`` import the file format (``opflow.data``) and the leaves ``opflow.schema`` and
``opflow.atomic``, nothing else of ``opflow``; ``opflow`` imports neither of them, and only
``opflow.cli`` imports ``pipeline``, the workflow layer above both halves.
"""

__version__ = "0.1.0"
