"""Equation sheets of the AIM with the softmax channel (any beta), T = 2 and 3."""

from aim_sym.channels import softmax
from aim_sym.sheets import aim_expressions, aim_sheet

SHEETS = {
    f"aim_softmax_T{T}.md": ((lambda T=T: aim_sheet(softmax(T))),
                             (lambda T=T: aim_expressions(softmax(T))))
    for T in (2, 3)
}

if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
