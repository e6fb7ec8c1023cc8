"""The one place where skbert imports scikit-learn's private helpers.

They are stable in practice but not public API; keeping them here means a
scikit-learn release that moves them breaks exactly one module.
"""

from sklearn.base import _fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

__all__ = ["HasMethods", "Interval", "StrOptions", "_fit_context"]
