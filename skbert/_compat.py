"""The one place where skbert imports private helpers of scikit-learn and transformers.

They are stable in practice but not public API; keeping them here means a
release that moves them breaks exactly one module.
"""

from sklearn.base import _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

__all__ = ["HasMethods", "Interval", "StrOptions", "_fit_context", "install_output_hooks"]


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
