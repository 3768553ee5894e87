"""Numeric layer of aim-sym: quadrature, spectral integrals, SE solvers, thresholds.

Consumes compiled functions produced by :mod:`aim_sym.codegen`; never manipulates sympy trees.
"""
