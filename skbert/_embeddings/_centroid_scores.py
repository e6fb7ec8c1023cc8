"""How well unit vectors group labelled texts: :meth:`skbert.FineTunedVectorizer.score` on
texts with labels.

Each text is compared by its cosine with each label's centroid (the sum of the
unit vectors of the texts that hold the label), its own labels' centroids
without it (leave one out): :func:`centroid_accuracy` counts the texts whose
nearest centroid is their label's, :func:`centroid_ranking` ranks each text's
labels among all (several labels a text).
"""

import numpy as np

from skbert._retrieval._index import unit_rows


def centroid_similarities(vectors, Y):
    """Cosine of each unit vector to each label's centroid, of the label-indicator rows ``Y``
    (one-hot for one label per text): a text's own labels' centroids without it (leave one
    out); -inf for a label that no other text holds."""
    counts = Y.sum(axis=0)
    sums = Y.T @ vectors
    similarities = vectors @ unit_rows(sums, np.float64).T
    similarities[:, counts == 0] = -np.inf
    texts, labels = np.nonzero(Y)
    others = unit_rows(sums[labels] - vectors[texts], np.float64)
    similarities[texts, labels] = np.where(counts[labels] == 1, -np.inf,
                                           (vectors[texts] * others).sum(axis=1))
    return similarities


def centroid_accuracy(vectors, y):
    """Leave-one-out nearest-centroid accuracy (by cosine) of unit ``vectors``, labels ``y``."""
    classes, labels = np.unique(y, return_inverse=True)
    similarities = centroid_similarities(vectors, np.eye(len(classes))[labels])
    return float(np.mean(similarities.argmax(axis=1) == labels))


def centroid_ranking(vectors, Y):
    """Label ranking average precision of the labels of each text that has any, ranked by the
    cosine of its unit vector to their leave-one-out centroids."""
    from sklearn.metrics import label_ranking_average_precision_score

    labelled = Y.sum(axis=1) > 0
    if not labelled.any():
        raise ValueError("score with a label-indicator y needs texts with labels; no row of "
                         "y holds a 1.")
    # Below any cosine: a label that no other text holds ranks last (its ties pessimistically).
    similarities = np.maximum(centroid_similarities(vectors[labelled], Y[labelled]), -2.0)
    return float(label_ranking_average_precision_score(Y[labelled], similarities))
