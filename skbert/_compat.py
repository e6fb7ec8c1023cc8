"""The one place where skbert reads private helpers of scikit-learn, torch and transformers.

They are stable in practice but not public API; keeping them here, each with a
fallback, means a release that moves them breaks exactly one module.
"""

from sklearn.base import _fit_context
from sklearn.utils._param_validation import (
    HasMethods,
    Hidden,
    Interval,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils.metaestimators import _BaseComposition

__all__ = ["HasMethods", "Hidden", "Interval", "StrOptions", "_BaseComposition", "_fit_context",
           "autocast_enabled", "check_count_vectorizer", "validate_parameter_constraints",
           "cached_model_file", "install_output_hooks", "linear_pointwise", "runs_hooks",
           "sets_own_output", "tensor_version", "with_children"]


def check_count_vectorizer(counter):
    """Run the checks that ``CountVectorizer.fit`` runs on its parameters, on ``counter``'s,
    without fitting it: ``ngram_range`` in order (a ValueError), and the UserWarnings about
    parameters its analyzer leaves unused and about stop words its preprocessing cannot
    match. Where a release renames the private checks, the stop words' alone remain (the
    public ``build_analyzer`` runs it)."""
    for check in ("_validate_ngram_range", "_warn_for_unused_params"):
        getattr(counter, check, lambda: None)()
    counter.build_analyzer()


def sets_own_output(estimator):
    """Whether ``set_output(transform=...)`` was called on ``estimator``: scikit-learn keeps the
    setting in a private attribute, absent until one is set; where a release keeps it
    elsewhere, this says False and the estimator's output is the vectorizer's."""
    return "transform" in getattr(estimator, "_sklearn_output_config", {})


def install_output_hooks(model):
    """Install the hooks through which transformers >= 5 records hidden states, if not yet.

    transformers installs them on a model's first call that asks for hidden
    states and marks the model as done; a shallow copy made before that would
    install a second set on the shared layers. Older versions have no hooks.
    """
    try:
        from transformers.utils.output_capturing import maybe_install_capturing_hooks
    except ImportError:
        return
    maybe_install_capturing_hooks(model)


def tensor_version(tensor):
    """torch's version counter of ``tensor`` (bumped by every in-place change), or None
    where it has none (an inference-mode tensor) or this torch does not expose it."""
    try:
        return tensor._version
    except (AttributeError, RuntimeError):
        return None


def linear_pointwise():
    """torch's oneDNN linear op, ``torch.ops.mkldnn._linear_pointwise`` (private: what its
    compiler emits for a Linear on the CPU), or None where this torch has no oneDNN or no
    such op."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return None
    return getattr(torch.ops.mkldnn, "_linear_pointwise", None)


def runs_hooks(module):
    """Whether calling ``module`` runs a hook, its own or one of torch's global module hooks
    (the check of ``torch.nn.Module.__call__``). True where this torch keeps them under other
    names: a caller that would skip the call for a faster op then keeps it."""
    from torch.nn.modules import module as modules

    try:
        return any((module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
                    module._backward_pre_hooks, modules._global_forward_hooks,
                    modules._global_forward_pre_hooks, modules._global_backward_hooks,
                    modules._global_backward_pre_hooks))
    except AttributeError:
        return True


def autocast_enabled(device_type):
    """Whether autocast is on for ``device_type`` ("cpu", "cuda"), on torch before 2.4 too,
    whose ``torch.is_autocast_enabled`` takes no device type and means CUDA."""
    import torch

    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled()
        return torch.is_autocast_enabled()


def cached_model_file(source, filename, revision):
    """The local path of ``filename`` of the hub model ``source`` as transformers resolves it,
    or None where the repository has no such file or cannot be reached.

    transformers' private ``_raise_exceptions_for_*`` arguments turn its errors
    into None; where they are refused (TypeError), or ignored so that the error
    comes (OSError), huggingface_hub's public look-up in its cache answers.
    """
    from transformers.utils import cached_file

    try:
        return cached_file(source, filename, revision=revision,
                           _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False)
    except (TypeError, OSError):
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(source, filename, revision=revision)
        return path if isinstance(path, str) else None  # not a "known missing" marker


def with_children(module, children):
    """A shallow copy of ``module`` (its parameters, buffers and hooks shared) whose child
    modules named in ``children`` are replaced, ``module`` left as it is; or None where
    this torch keeps no ``_modules`` dict (callers then use ``module`` itself).

    The copy needs a child dict of its own: ``setattr`` on it would write into the
    dict it shares with ``module``.
    """
    import copy

    if not isinstance(getattr(module, "_modules", None), dict):
        return None
    view = copy.copy(module)
    view._modules = {**module._modules, **children}
    return view
