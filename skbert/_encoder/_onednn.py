"""The torch engine's Linear layers on oneDNN, where the CPU has AVX-512
(skbert._encoder._engines)."""

import logging
from types import SimpleNamespace

from skbert import _compat

logger = logging.getLogger(__name__)


def onednn_linears(model):
    """``model`` with each float32 ``torch.nn.Linear`` run by oneDNN, or ``model`` itself
    where it has none (or this torch has no oneDNN linear op).

    PyTorch runs a float32 Linear on the CPU through its BLAS (MKL); the
    oneDNN linear that its compiler (inductor) emits for the CPU ran
    all-MiniLM-L6-v2 1.5x faster on an AMD EPYC with AVX-512, where MKL takes a
    slower path (benchmarks/words.py). On an AVX2-only EPYC it was no faster,
    and it costs memory: oneDNN keeps kernels for every batch shape it has run
    (290 shapes: +511 MB resident against +54 MB with torch's Linear), so the
    torch engine uses it on CPUs with AVX-512 only, and pads its batches to a
    grid of widths that bounds the shapes (:func:`skbert._encoder._encoding.padded_length`).
    The result is a copy of the module tree that shares every weight, the Linear
    ones too. Both
    compute in float32: features differ by rounding (a few 1e-6).

    The op does only the arithmetic, so a call runs the original Linear instead
    (the plain path) where the op would lose what the Linear does: where the
    Linear or torch globally has a module hook, registered before or after the
    conversion (the hooks then see the original Linear, once per call); under
    autocast for the input's device; where gradients are recorded and the input
    or a weight requires them; and for the whole tree from then on once the op
    has failed (the plain Linear then raises where the input is at fault, and
    the op is kept). The failure's reason is ``fallback.reason`` of every
    converted layer (None before) and logged once, at INFO, by ``skbert._encoder._onednn``.
    """
    import torch

    op = _compat.linear_pointwise()
    if op is None:
        return model
    fallback = SimpleNamespace(reason=None)  # the tree's: one failure ends the op for all

    class OneDNNLinear(torch.nn.Module):
        def __init__(self, linear):
            super().__init__()
            self.linear = linear  # its weight, bias and hooks, shared
            self.fallback = fallback

        # What model code may read of a Linear (a dtype, a shape) reads the same here.
        weight = property(lambda self: self.linear.weight)
        bias = property(lambda self: self.linear.bias)

        def forward(self, x):
            linear = self.linear
            if (fallback.reason is not None or _compat.runs_hooks(linear)
                    or _compat.autocast_enabled(x.device.type)
                    or torch.is_grad_enabled() and (
                        x.requires_grad or any(p.requires_grad for p in linear.parameters()))):
                return linear(x)
            try:
                return op(x, linear.weight, linear.bias, "none", [], "")
            except Exception as error:  # a private op: any failure, the Linear's own next
                output = linear(x)  # raises too where the input is at fault, not the op
                fallback.reason = f"{type(error).__name__}: {error}"
                logger.info("oneDNN's linear op failed (%s): this model's Linear layers run "
                            "torch's own Linear from now on", fallback.reason)
                return output

        # The wrapper runs no hooks of its own, torch's global ones included: the Linear's
        # call runs them, so that a hook sees the calls of the plain model.
        __call__ = forward

    def convert(module):
        if type(module) is torch.nn.Linear and module.weight.dtype == torch.float32:
            return OneDNNLinear(module)
        children = {name: convert(child) for name, child in module.named_children()}
        if all(children[name] is child for name, child in module.named_children()):
            return module
        converted = _compat.with_children(module, children)
        return module if converted is None else converted  # None: the plain module

    _compat.install_output_hooks(model)  # before the copy, whose layers share the model's hooks
    return convert(model)
