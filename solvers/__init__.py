"""Numerical PDE solvers and random-field samplers that generate opflow datasets.

Each module holds one PDE family: a ``Params`` dataclass, a registered generator
(:mod:`solvers.base`) and the verified numerics. No torch model code lives here.
"""
