"""Tokenization into windows, length-sorted batching and forward passes.

A *window* is one encoder input: token ids with their special-token mask (and
token type ids for text pairs). Every text gives at least one window; the
window -> text map says how to merge them back. Forward passes run over the
windows sorted by length, so each batch pads only to its own longest window,
and results are written back in input order.
"""

from dataclasses import dataclass

import numpy as np

from skbert._features import compute_parts, layers_read


@dataclass
class Windows:
    """Tokenized encoder inputs: one row per window, in text order."""

    input_ids: list
    special_mask: list
    token_type_ids: list | None
    owner: np.ndarray

    def __len__(self):
        return len(self.input_ids)

    def subset(self, indices):
        """The windows at ``indices`` (owners kept)."""
        def pick(rows):
            return None if rows is None else [rows[i] for i in indices]

        return Windows(pick(self.input_ids), pick(self.special_mask), pick(self.token_type_ids),
                       self.owner[indices])

    @property
    def lengths(self):
        return np.fromiter(map(len, self.input_ids), dtype=np.int64, count=len(self))


def tokenize(tokenizer, texts, max_length):
    """Windows of ``texts`` (str or (str, str) pairs), keeping the first ``max_length`` tokens."""
    if texts and isinstance(texts[0], tuple):
        first, second = zip(*texts)
        encoded = tokenizer(list(first), list(second), truncation=True, max_length=max_length,
                            return_special_tokens_mask=True, return_attention_mask=False)
    else:
        encoded = tokenizer(list(texts), truncation=True, max_length=max_length,
                            return_special_tokens_mask=True, return_attention_mask=False)
    return Windows(
        input_ids=encoded["input_ids"],
        special_mask=encoded["special_tokens_mask"],
        token_type_ids=encoded.get("token_type_ids"),
        owner=np.arange(len(texts)),
    )


def length_sorted_batches(lengths, batch_size):
    """Index arrays of at most ``batch_size`` windows, longest first (so memory peaks early)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def _pad(rows, value):
    padded = np.full((len(rows), max(map(len, rows))), value, dtype=np.int64)
    for row, tokens in enumerate(rows):
        padded[row, :len(tokens)] = tokens
    return padded


def _model_inputs(tokenizer, windows, batch, device):
    import torch

    def tensor(rows, value):
        return torch.from_numpy(_pad([rows[i] for i in batch], value)).to(device)

    inputs = {"input_ids": tensor(windows.input_ids, tokenizer.pad_token_id)}
    inputs["attention_mask"] = tensor([[1] * len(ids) for ids in windows.input_ids], 0)
    if "token_type_ids" in tokenizer.model_input_names:
        types = windows.token_type_ids or [[0] * len(ids) for ids in windows.input_ids]
        inputs["token_type_ids"] = tensor(types, 0)
    special = tensor(windows.special_mask, 1)
    return inputs, special


def forward_parts(model, tokenizer, windows, keys, batch_size, progress=None):
    """Run the encoder over ``windows`` and return ``{part key: array}`` with one row per window.

    Hidden states of the inner layers are requested only when ``keys`` read
    them. Parts are computed on the model's device and each batch crosses to
    the CPU once, into arrays allocated up front.
    """
    import torch

    keys = sorted(keys, key=repr)
    n_states = model.config.num_hidden_layers + 1
    inner = bool(layers_read(keys) - {n_states - 1})
    device = next(model.parameters()).device
    parts = {}
    with torch.inference_mode():
        for batch in length_sorted_batches(windows.lengths, batch_size):
            inputs, special = _model_inputs(tokenizer, windows, batch, device)
            outputs = model(**inputs, output_hidden_states=inner)
            hidden = outputs.hidden_states if inner else {n_states - 1: outputs.last_hidden_state}
            pooled = compute_parts(hidden, inputs["attention_mask"], special,
                                   getattr(outputs, "pooler_output", None), keys)
            flat = torch.cat([pooled[key].reshape(len(batch), -1) for key in keys], dim=1)
            flat = flat.cpu().numpy()
            start = 0
            for key in keys:
                width = pooled[key][0].numel()
                if key not in parts:
                    shape = (len(windows),) + tuple(pooled[key].shape[1:])
                    parts[key] = np.empty(shape, dtype=np.float32)
                rows = flat[:, start:start + width]
                parts[key][batch] = rows.reshape((len(batch),) + parts[key].shape[1:])
                start += width
            if progress is not None:
                progress.update(len(batch))
    return parts

