"""Which token is more similar to token 1? y = sign(h_12 - h_11)."""

from aim_sym.channels import h_matrix, sign_channel


def channel(tokens):
    h = h_matrix(tokens)
    return sign_channel(
        name="sign-similarity", tokens=tokens, forms=[h[0, 1] - h[0, 0]],
        description="y = sign(h_12 - h_11): is token 2 more similar to token 1 than token 1 itself",
    )
