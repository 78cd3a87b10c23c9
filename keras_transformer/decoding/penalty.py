"""The GNMT length penalty, shared by beam search and scoring."""

from keras import ops


def length_penalty(length, alpha=0.6):
    """GNMT length penalty ((5 + length) / 6) ** alpha (float32, elementwise)."""
    length = ops.cast(length, "float32")
    return ops.power((5.0 + length) / 6.0, ops.cast(alpha, "float32"))
