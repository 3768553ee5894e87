"""SMI channel file: one softmax attention layer over M tokens with P = 1 row,
y = softmax_rows(beta z_a z_b) + noise on its M (M - 1) free (off-diagonal) entries.

    aim-sym threshold weak --model smi --channel-file examples/channels/smi/noisy_attention.py \
        --param Delta=0.1 --param beta=1
"""

import sympy as sp

from aim_sym.smi_channels import noisy, z_matrix

beta = sp.Symbol("beta", positive=True)
Delta = sp.Symbol("Delta", positive=True)


def smi_channel(tokens):
    M = tokens
    z = z_matrix(1, M)
    scores = [[beta * z[0, a] * z[0, b] for b in range(M)] for a in range(M)]
    y = [[sp.exp(scores[a][b]) / sum(sp.exp(s) for s in scores[a]) for b in range(M)]
         for a in range(M)]
    free = [y[a][b] for a in range(M) for b in range(M) if a != b]
    return noisy(name="noisy-attention-file", P=1, M=M, output=free, noise=Delta,
                 params={beta: 1.0, Delta: 0.1},
                 description="free entries of softmax_rows(beta z_a z_b) + N(0, Delta)")
