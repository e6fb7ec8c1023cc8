"""LoRA for the fine-tuning estimators: low-rank adapters on a shared, unchanged encoder.

:func:`adapted` gives a module tree of its own around the shared model's
weights (the same storage, never written, nothing copied) with peft's LoRA
layers on the attention projections of :data:`TARGETS`; only their ``lora_A``
and ``lora_B`` matrices train. :func:`factors` takes the trained matrices out,
and :func:`merged` puts ``W + (alpha / r) B A`` in place of each adapted
projection, so that inference costs what the unadapted encoder costs. The
factors are all that a light pickle needs besides the base model's reference.
"""

import copy

# The query and value projections of self-attention: the LoRA paper adapts these two (Hu et
# al. 2021, section 7.1: W_q and W_v at rank 4 beat W_q alone at rank 8, and any single matrix,
# for the same number of trainable parameters), and so do peft's defaults for the
# architectures it knows. ModernBERT computes query, key and value with one fused projection.
TARGETS = {
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"),
    "electra": ("query", "value"),
    "albert": ("query", "value"),
    "distilbert": ("q_lin", "v_lin"),
    "mpnet": ("q", "v"),
    "deberta-v2": ("query_proj", "value_proj"),
    "modernbert": ("Wqkv",),
}
ADAPTER = "default"  # peft's name for a model's only adapter


def check_peft():
    try:
        import peft  # noqa: F401
    except ImportError:
        raise ImportError("freeze='lora' trains adapters with peft: pip install "
                          "'skbert[peft]'") from None


def targets(model, name):
    """The module names that LoRA adapts in ``model``; ``name`` (its id or path) for errors."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in TARGETS:
        raise ValueError(
            f"freeze='lora' does not know which projections of {type(model).__name__} "
            f"(model_type {model_type!r}, {name!r}) to adapt; it adapts "
            f"{', '.join(sorted(TARGETS))}. Use freeze=None, an int or 'all'."
        )
    return TARGETS[model_type]


def _sharing_copy(model):
    """A module tree of its own whose parameters are the shared weights' storage, frozen:
    flags and structure can change, the weights are not copied and not written."""
    import torch

    memo = {id(parameter): torch.nn.Parameter(parameter.detach(), requires_grad=False)
            for parameter in model.parameters()}
    memo.update({id(buffer): buffer for buffer in model.buffers()})
    return copy.deepcopy(model, memo)


def adapted(model, name, rank, alpha, dropout):
    """``model`` with trainable LoRA adapters (peft) on its :func:`targets`, sharing the base
    weights; returns ``(encoder, {name: trainable parameter})``."""
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=list(targets(model, name)))
    encoder = inject_adapter_in_model(config, _sharing_copy(model))
    trainable = {key: parameter for key, parameter in encoder.named_parameters()
                 if ".lora_" in key}
    for parameter in trainable.values():
        parameter.requires_grad_(True)
    return encoder, trainable


def factors(encoder):
    """``{module name: (A, B, scaling)}`` of every adapted projection, as float32 numpy."""
    from peft.tuners.lora import LoraLayer

    found = {}
    for key, module in encoder.named_modules():
        if isinstance(module, LoraLayer):
            found[key] = (module.lora_A[ADAPTER].weight.detach().cpu().float().numpy(),
                          module.lora_B[ADAPTER].weight.detach().cpu().float().numpy(),
                          float(module.scaling[ADAPTER]))
    return found


def merged(model, found):
    """A module tree sharing the weights of ``model`` (the base, without adapters) but for the
    projections of ``found`` (:func:`factors`), each a plain ``Linear`` of
    ``W + scaling * B @ A``."""
    import torch

    encoder = _sharing_copy(model).eval()
    for key, (a, b, scaling) in found.items():
        parent_name, _, child = key.rpartition(".")
        parent = encoder.get_submodule(parent_name)
        base = getattr(parent, child)
        weight = base.weight.detach()
        delta = torch.from_numpy(b) @ torch.from_numpy(a) * scaling
        # Not initialized (its weight is overwritten): no draw from torch's random state.
        linear = torch.nn.utils.skip_init(torch.nn.Linear, base.in_features, base.out_features,
                                          bias=base.bias is not None, device=weight.device,
                                          dtype=weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(weight + delta.to(weight))
            if base.bias is not None:
                linear.bias = torch.nn.Parameter(base.bias.detach(), requires_grad=False)
        linear.weight.requires_grad_(False)
        setattr(parent, child, linear)
    return encoder
