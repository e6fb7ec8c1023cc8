"""How an estimator that trained its encoder pickles: :class:`TunedPersistence`.

Its fitted :class:`skbert.BertVectorizer` runs the tuned weights and pickles
them; a ``persist_weights=False`` pickle keeps the :class:`_Fitted` record
instead (base model reference, adapters) and finds the base model again when
it loads. BertClassifier / BertRegressor, FineTunedVectorizer,
BertWordClassifier and BertReranker pickle so.
"""

import dataclasses
import inspect

from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from skbert._train import _lora


@dataclasses.dataclass(frozen=True)
class _Fitted:
    """What a fit trained, which pickles read instead of the parameters: ``freeze``, the
    base model's reference (:meth:`skbert._base.FeaturesMixin._reference`) and the adapters
    of ``freeze="lora"``. Builtins and numpy arrays, so that it pickles as a dict."""

    freeze: object
    reference: dict
    lora_factors: object = None  # freeze="lora": {module name: (A, B, scaling)}


def _check_persist_weights(persist_weights, freeze, kept=("all", "lora")):
    """Refuse ``persist_weights=False`` for a fit with ``freeze`` that trains the base weights
    (those of ``kept`` do not)."""
    if not persist_weights and freeze not in kept:
        raise ValueError(
            f"persist_weights=False pickles a reference to the base model, which a fit with "
            f"freeze={freeze!r} changes by training it: fit with freeze="
            f"{' or '.join(map(repr, kept))}, or use persist_weights=True."
        )


class TunedPersistence:
    """Pickles of an estimator that trained its encoder: its fitted :class:`BertVectorizer`
    (``_vectorizer``, over the tuned weights) and the :class:`_Fitted` record (``_fitted``).

    With ``persist_weights`` the vectorizer pickles the weights it runs;
    without, the pickle keeps the vectorizer unfitted and the record, and
    unpickling loads the base model again, checks it against the reference
    and merges the adapters back in.
    """

    _light = ("all", "lora")  # the freeze values whose fits may pickle light
    # Parameters renamed since 0.1.0, {old name: new name}: the old one stays one release.
    _renamed = {}

    def __getstate__(self):
        state = dict(super().__getstate__())  # a copy: it may be the live __dict__
        if "_fitted" in state:
            _check_persist_weights(self.persist_weights, self._fitted.freeze, self._light)
            if not self.persist_weights:  # the vectorizer unfitted: _fitted has the reference
                # Its int8 calibration texts as they were (calibration="fit" read fit's texts).
                calibration = self._vectorizer._engine.calibration
                state["_vectorizer"] = clone(self._vectorizer).set_params(
                    revision=self._fitted.reference["revision"],
                    calibration=None if calibration is None else list(calibration))
            # Builtins, so that skops needs to trust no type beyond skbert's estimators.
            state["_fitted"] = dataclasses.asdict(self._fitted)
        return state

    def __setstate__(self, state):
        # A pickle of 0.1.0: its renamed parameters under their new names, and the parameters
        # added since at their defaults.
        for old, new in self._renamed.items():
            if new not in state and old in state:
                state[new], state[old] = state[old], "deprecated"
        for name, parameter in inspect.signature(type(self).__init__).parameters.items():
            if name != "self" and parameter.default is not parameter.empty:
                state.setdefault(name, parameter.default)
        fitted = state.get("_fitted")
        if fitted is not None:
            state["_fitted"] = fitted = _Fitted(**fitted)
        super().__setstate__(state)
        if fitted is not None and not self.persist_weights:  # find the base model again
            vectorizer = self._vectorizer.fit()
            vectorizer._check_reference(fitted.reference, type(self).__name__)
            if fitted.lora_factors is not None:
                vectorizer.model_ = _lora.merged(vectorizer.model_, fitted.lora_factors)

    def _running(self):
        """The fitted vectorizer as a shallow copy with ``device`` and ``batch_size`` as they
        are now: where and in what batches inference runs, which changes nothing fitted."""
        check_is_fitted(self)
        vectorizer = object.__new__(type(self._vectorizer))
        vectorizer.__dict__.update(self._vectorizer.__dict__)
        return vectorizer.set_params(device=self.device, batch_size=self.batch_size)
