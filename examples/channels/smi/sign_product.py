"""SMI channel file: the sequence single-index model y = sign(z_1 . z_2) for two tokens in R^P,
P = 1 here (y = sign(z_11 z_12)). Its weak threshold is pi^2 / 8 in closed form.

    aim-sym threshold weak --model smi --channel-file examples/channels/smi/sign_product.py
"""

import sympy as sp

from aim_sym.smi_channels import discrete, z_matrix


def smi_channel(tokens):
    if tokens != 2:
        raise ValueError("this channel is written for tokens = 2 (two tokens z_1, z_2)")
    z = z_matrix(1, 2)          # 1 row, 2 tokens: z[0, 0] = z_11, z[0, 1] = z_12
    form = z[0, 0] * z[0, 1]
    return discrete(name="sign-product-file", P=1, M=2,
                    likelihood={1: sp.Heaviside(form), -1: sp.Heaviside(-form)},
                    description="y = sign(z_11 z_12)")
