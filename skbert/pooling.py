"""Mask-aware pooling: token vectors -> one vector per sequence.

Every function takes ``hidden``, a ``(batch, tokens, dim)`` tensor of token
vectors, and ``mask``, a ``(batch, tokens)`` tensor that is true (or 1) for the
tokens that take part, and returns a new ``(batch, dim)`` float32 tensor
(``(batch, 2 * dim)`` for :func:`mean_max_pooling`). They never write into
their inputs, so they are safe on a model's output tensors, and padding never
leaks into the result. Sums run in float32 whatever the input precision.

A row whose mask is empty (e.g. an empty text pooled without its special
tokens) pools to zeros rather than NaN or -inf.

The functions also take layer-merged token vectors: see :func:`combine_layers`.
"""

import torch

__all__ = [
    "POOLINGS",
    "cls_pooling",
    "combine_layers",
    "last_pooling",
    "max_pooling",
    "mean_max_pooling",
    "mean_pooling",
    "mean_sqrt_len_pooling",
    "token_counts",
]


def token_counts(mask):
    """Number of tokens that take part in each row, as float32 ``(batch,)``.

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import token_counts
    >>> token_counts(torch.tensor([[1, 1, 0], [1, 1, 1]])).tolist()
    [2.0, 3.0]
    """
    return mask.sum(dim=1, dtype=torch.float32)


def cls_pooling(hidden, mask):
    """The first token's vector ([CLS] for BERT-family tokenizers).

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import cls_pooling
    >>> hidden = torch.arange(12.0).reshape(1, 3, 4)
    >>> cls_pooling(hidden, torch.ones(1, 3)).tolist()
    [[0.0, 1.0, 2.0, 3.0]]
    """
    return hidden[:, 0].float()


def last_pooling(hidden, mask):
    """The vector of the last token in the mask (the final [SEP] with an attention mask).

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import last_pooling
    >>> hidden = torch.arange(6.0).reshape(1, 3, 2)
    >>> last_pooling(hidden, torch.tensor([[1, 1, 0]])).tolist()
    [[2.0, 3.0]]
    """
    n_tokens = mask.shape[1]
    # The first true position counted from the end works for right and left padding.
    last = n_tokens - 1 - mask.flip(1).int().argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()


def mean_pooling(hidden, mask):
    """Average of the vectors in the mask.

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import mean_pooling
    >>> hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    >>> mean_pooling(hidden, torch.tensor([[1, 1, 0]])).tolist()
    [[2.0, 3.0]]
    """
    weights = mask.unsqueeze(-1).to(torch.float32)
    total = (hidden.float() * weights).sum(dim=1)
    return total / token_counts(mask).clamp(min=1.0).unsqueeze(-1)


def mean_sqrt_len_pooling(hidden, mask):
    """Sum of the vectors in the mask divided by the square root of their number.

    This is sentence-transformers' ``mean_sqrt_len_tokens``.

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import mean_sqrt_len_pooling
    >>> hidden = torch.ones(1, 4, 2)
    >>> mean_sqrt_len_pooling(hidden, torch.ones(1, 4)).tolist()
    [[2.0, 2.0]]
    """
    return mean_pooling(hidden, mask) * token_counts(mask).sqrt().unsqueeze(-1)


def max_pooling(hidden, mask):
    """Element-wise maximum over the vectors in the mask.

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import max_pooling
    >>> hidden = torch.tensor([[[1.0, -5.0], [-2.0, -3.0], [9.0, 9.0]]])
    >>> max_pooling(hidden, torch.tensor([[1, 1, 0]])).tolist()
    [[1.0, -3.0]]
    """
    keep = mask.bool().unsqueeze(-1)
    pooled = torch.where(keep, hidden.float(), float("-inf")).amax(dim=1)
    return torch.where(keep.any(dim=1), pooled, 0.0)


def mean_max_pooling(hidden, mask):
    """:func:`mean_pooling` and :func:`max_pooling` side by side.

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import mean_max_pooling
    >>> hidden = torch.tensor([[[1.0], [3.0]]])
    >>> mean_max_pooling(hidden, torch.ones(1, 2)).tolist()
    [[2.0, 3.0]]
    """
    return torch.cat([mean_pooling(hidden, mask), max_pooling(hidden, mask)], dim=-1)


#: Pooling name (the ``pooling`` parameter of :class:`skbert.BertVectorizer`) -> function.
POOLINGS = {
    "cls": cls_pooling,
    "last": last_pooling,
    "mean": mean_pooling,
    "mean_sqrt_len": mean_sqrt_len_pooling,
    "max": max_pooling,
    "mean_max": mean_max_pooling,
}


def combine_layers(hidden_states, how="mean"):
    """Merge several layers' token vectors into one token vector.

    Parameters
    ----------
    hidden_states : sequence of tensors of shape (batch, tokens, dim)
        The layers to merge, in order.
    how : {"mean", "sum", "concat"}, default="mean"
        Element-wise mean or sum, or concatenation along the last axis
        (in the order given).

    Returns
    -------
    tensor of shape (batch, tokens, dim), or (batch, tokens, n_layers * dim) for "concat"

    Examples
    --------
    >>> import torch
    >>> from skbert.pooling import combine_layers
    >>> a, b = torch.zeros(1, 2, 3), torch.ones(1, 2, 3)
    >>> combine_layers([a, b], "mean").shape, combine_layers([a, b], "concat").shape
    (torch.Size([1, 2, 3]), torch.Size([1, 2, 6]))
    """
    if how == "concat":
        return torch.cat([h.float() for h in hidden_states], dim=-1)
    stacked = torch.stack([h.float() for h in hidden_states])
    if how == "mean":
        return stacked.mean(dim=0)
    if how == "sum":
        return stacked.sum(dim=0)
    raise ValueError(f"how must be 'mean', 'sum' or 'concat', got {how!r}.")
