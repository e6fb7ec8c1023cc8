"""The losses of skbert's fine-tuners that a plain cross-entropy does not express.

The contrastive losses of :class:`skbert.FineTunedVectorizer` and gradient
caching, then the reranking losses of :class:`skbert.BertReranker`
(:data:`RERANK_LOSSES`).

Every loss takes the embeddings of one batch as columns (``columns[k][i]``
is the k-th text of row i: anchor, positive, hard negative; one column of
texts for ``"supcon"``) and the batch's targets (scores or labels, or None),
and compares rows by their cosine, times ``scale`` (1 / temperature):

- :func:`in_batch`: symmetric InfoNCE with in-batch negatives (van den Oord
  et al. 2018; the symmetric form of sentence-transformers'
  MultipleNegativesRankingLoss): each anchor's own positive among every
  positive and hard negative of the batch, and each positive's own anchor
  among every anchor; the mean of both cross-entropies.
- :func:`cosent`: CoSENT (Su 2022), a ranking loss on the cosines of scored
  pairs: ``log(1 + sum over y_i < y_j of exp(scale (cos_i - cos_j)))``.
- :func:`cosine`: the squared error of each pair's cosine to its target in
  [0, 1].
- :func:`supcon`: supervised contrastive (Khosla et al. 2020, the "out"
  form): texts of one label in a batch are each other's positives; with
  several labels a text, positives weigh by the overlap of their label sets
  (:func:`positive_weights`).

:func:`cached` runs a loss with gradient caching (GradCache, Gao et al. 2021):
embeddings of the whole batch without a graph, their gradient from the loss,
then mini-batch by mini-batch a forward pass with a graph that takes that
gradient, under the random state of its first pass (the same dropout), so a
large batch's negatives fit in the memory of a mini-batch.
"""

from skbert._train import _training


def _unit(vectors):
    import torch

    return torch.nn.functional.normalize(vectors.float(), dim=1)


def in_batch(columns, targets, scale):
    import torch

    anchors, positives = _unit(columns[0]), _unit(columns[1])
    documents = torch.cat([positives, *map(_unit, columns[2:])])
    own = torch.arange(len(anchors), device=anchors.device)
    forward = torch.nn.functional.cross_entropy(scale * anchors @ documents.T, own)
    backward = torch.nn.functional.cross_entropy(scale * positives @ anchors.T, own)
    return (forward + backward) / 2


def _cosines(columns):
    return (_unit(columns[0]) * _unit(columns[1])).sum(dim=1)


def cosent(columns, targets, scale):
    import torch

    cosines = scale * _cosines(columns)
    differences = cosines[:, None] - cosines[None, :]  # [i, j]: cos_i - cos_j
    ranked = targets[:, None] < targets[None, :]  # pair j should have the higher cosine
    terms = torch.cat([differences[ranked], differences.new_zeros(1)])  # the 1 of log(1 + ...)
    return torch.logsumexp(terms, dim=0)


def cosine(columns, targets, scale):
    import torch

    return torch.nn.functional.mse_loss(_cosines(columns), targets.float())


def positive_weights(rows, overlap="jaccard"):
    """The weight of text j as a positive of text i, from their label-indicator ``rows``
    (one row of 0/1 per text): ``"jaccard"`` weighs it by the overlap of their label sets,
    ``|A & B| / |A | B|``; ``"any"`` (SetFit's multi-label pairs) gives 1 where they share a
    label. One-hot rows (one label per text) give 1 for the same label and 0 otherwise
    under both. A text without labels is no text's positive (not even another without
    labels): "none of these labels" is no class. The diagonal is 0."""
    import torch

    rows = rows.float()
    shared = rows @ rows.T
    if overlap == "any":
        weights = (shared > 0).float()
    else:
        sizes = rows.sum(dim=1)
        union = sizes[:, None] + sizes[None, :] - shared
        weights = torch.where(union > 0, shared / union.clamp(min=1), shared.new_zeros(()))
    return weights.fill_diagonal_(0.0)


def supcon(columns, targets, scale, overlap="jaccard"):
    """Supervised contrastive loss of one column of texts; ``targets`` are their class
    labels (n,) or label-indicator rows (n, n_labels), whose positives weigh by
    :func:`positive_weights`: each anchor's loss is the weighted mean of its positives'
    -log p, p the softmax over every other text of the batch."""
    import torch

    unit = _unit(columns[0])
    similarities = scale * unit @ unit.T
    itself = torch.eye(len(unit), dtype=torch.bool, device=unit.device)
    log_p = similarities - torch.logsumexp(similarities.masked_fill(itself, float("-inf")),
                                           dim=1, keepdim=True)
    if targets.ndim == 1:  # class labels: their one-hot rows
        targets = torch.nn.functional.one_hot(torch.unique(targets, return_inverse=True)[1])
    weights = positive_weights(targets, overlap)
    totals = weights.sum(dim=1)
    anchors = totals > 0
    if not bool(anchors.any()):  # no two texts share a label: nothing to pull together
        return similarities.sum() * 0.0
    per_anchor = (log_p * weights).sum(dim=1)[anchors] / totals[anchors]
    return -per_anchor.mean()


LOSSES = {"in_batch": in_batch, "cosent": cosent, "cosine": cosine, "supcon": supcon}


# The losses of :class:`skbert.BertReranker`, on its relevance logits ``scores`` of shape
# (rows, documents per row): one (query, document) pair a row with its target in [0, 1]
# ("bce"), or a (query, positive, negative, ...) tuple a row, the positive first ("listwise").


def pointwise_bce(scores, targets):
    """Binary cross-entropy of each pair's logit against its relevance in [0, 1]."""
    import torch

    return torch.nn.functional.binary_cross_entropy_with_logits(scores.float(), targets.float())


def listwise(scores, targets):
    """Softmax cross-entropy of each tuple's positive (column 0) against its negatives."""
    import torch

    first = torch.zeros(len(scores), dtype=torch.long, device=scores.device)
    return torch.nn.functional.cross_entropy(scores.float(), first)


RERANK_LOSSES = {"bce": pointwise_bce, "listwise": listwise}


def cached(embed, chunks, loss_of, device):
    """``loss_of(embeddings)`` with gradient caching: a loss tensor whose backward pass sends
    its gradient into the encoder, mini-batch by mini-batch.

    Parameters
    ----------
    embed : callable
        ``embed(chunk)``: the embeddings (differentiable) of the texts of one
        chunk.
    chunks : list
        The mini-batches, in the order of the rows of ``embeddings``.
    loss_of : callable
        The loss of the batch's embeddings, all chunks stacked.
    device : torch.device
        Where the encoder runs (its random state is replayed there).
    """
    import torch

    states, parts = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(_training.random_state(device))
            parts.append(embed(chunk))
    embeddings = torch.cat(parts).requires_grad_()
    with torch.enable_grad():
        loss = loss_of(embeddings)
        (gradient,) = torch.autograd.grad(loss, embeddings)
    gradients = gradient.split([len(part) for part in parts])
    loss = loss.detach().requires_grad_()

    def backward(grad_output):  # grad_output: 1, or the loss scale of float16
        with torch.enable_grad():
            for chunk, state, part_gradient in zip(chunks, states, gradients):
                with _training.seeded(state, device):
                    surrogate = (embed(chunk) * part_gradient).sum()
                (surrogate * grad_output).backward()

    loss.register_hook(backward)
    return loss
