"""Numeric layer of aim-sym (installed as ``aim_sym.numerics``): quadrature, spectral integrals,
SE solvers, thresholds.

numpy, scipy and mpmath only: never sympy, never another aim_sym module (tests/test_layers.py).
Compiled callables arrive as arguments (a compiled channel ``cc``, AMP functions ``fns``) or, for
the SMI pieces, through :mod:`aim_sym.numerics.compiled_functions`. The leaf modules
:mod:`~aim_sym.numerics.records` (errors, Estimate) and
:mod:`~aim_sym.numerics.special_functions` (Phi2 kernels) are the only ones the symbolic and
compiled layers may import.
"""
