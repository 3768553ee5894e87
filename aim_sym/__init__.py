"""aim-sym: derive, compile and solve Bayes-optimal learning of attention models.

The symbolic layer: output channels as data, Z_out, g_out and its Jacobian, free entropy,
state-evolution (SE) maps, stability, and code generation. Equations refer to THEORY.md.
"""

__version__ = "0.1.0"
