"""opflow: verified PDE datasets and attention-based neural operators in one Snakemake workflow.

Learning side: ``opflow.data`` (file format, datasets, normalisers), ``opflow.models``,
``opflow.train``, ``opflow.evaluate``, ``opflow.plots``, ``opflow.cli``; ``opflow.atomic`` is the one
atomic file writer. The numerical solvers live in the sibling package ``solvers`` and the gmsh
geometry in ``meshes``; ``opflow`` never imports them.
"""

__version__ = "0.1.0"
