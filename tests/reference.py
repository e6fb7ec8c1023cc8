"""Independent reference: one text at a time through transformers, pooled with numpy loops."""

import functools

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer


@functools.lru_cache(maxsize=8)
def _states(model_dir, texts, max_length):
    """Per text: hidden states (float64, one array per layer), special-token mask, pooler output
    (None for a model without a pooler)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    results = []
    for text in texts:
        # Batch form (lists): the single form drops an empty second text of a pair.
        pair = [[text[0]], [text[1]]] if isinstance(text, tuple) else [[text]]
        encoded = tokenizer(*pair, truncation=True, max_length=max_length, return_tensors="pt",
                            return_special_tokens_mask=True)
        special = encoded.pop("special_tokens_mask")[0].numpy().astype(bool)
        with torch.no_grad():
            output = model(**encoded, output_hidden_states=True)
        states = [h[0].numpy().astype(np.float64) for h in output.hidden_states]
        pooler = getattr(output, "pooler_output", None)  # None: the model has no pooler
        results.append((states, special, None if pooler is None else pooler[0].numpy()))
    return results


def reference_features(model_dir, texts, *, layer=-1, layer_combine="mean", pooling="mean",
                       include_special_tokens=True, max_length=None):
    """What BertVectorizer should return, computed without any of its code."""
    rows = []
    for states, special, pooler_output in _states(model_dir, tuple(texts), max_length):
        layers = range(len(states)) if layer == "all" else np.atleast_1d(layer)
        chosen = [states[i] for i in layers]
        if layer_combine == "concat":
            tokens = np.concatenate(chosen, axis=1)
        else:
            tokens = np.sum(chosen, axis=0) / (len(chosen) if layer_combine == "mean" else 1)
        keep = np.ones(len(tokens), bool) if include_special_tokens else ~special
        rows.append(_pool(tokens, keep, pooling, pooler_output))
    return np.asarray(rows)


def _pool(tokens, keep, pooling, pooler_output):
    picked = tokens[keep]
    if pooling == "cls":
        return tokens[0]
    if pooling == "last":
        return tokens[-1]
    if pooling == "pooler":
        return pooler_output
    if pooling == "mean":
        return picked.mean(axis=0) if len(picked) else np.zeros(tokens.shape[1])
    if pooling == "mean_sqrt_len":
        return picked.sum(axis=0) / np.sqrt(max(len(picked), 1))
    if pooling == "max":
        return picked.max(axis=0) if len(picked) else np.zeros(tokens.shape[1])
    if pooling == "mean_max":
        return np.concatenate([_pool(tokens, keep, "mean", None), _pool(tokens, keep, "max", None)])
    raise ValueError(pooling)
