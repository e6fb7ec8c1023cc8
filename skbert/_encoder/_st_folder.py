"""A fitted BertVectorizer written as a sentence-transformers model folder.

:func:`save_sentence_transformer` saves the encoder's weights and tokenizer
and the files that tell ``sentence_transformers.SentenceTransformer`` how to
use them (``modules.json``: Transformer, Pooling and, for ``norm_="l2"``,
Normalize; the window length; the prompt), so that loading the folder there
gives the vectorizer's own vectors. The files are those of sentence-transformers'
own folders, in the format every version since 2.x reads (``pooling_mode_*``
flags, ``sentence_transformers.models.*`` module types), and skbert reads them
back with ``pooling="auto"`` and ``norm="auto"``.

A setting that such a folder cannot express (an inner layer, BERT's pooler,
special tokens left out of pooling, ...) is refused before anything is
written, rather than saved as a folder whose vectors differ from ``transform``.
The folder is written under a temporary name and renamed into place
(:func:`skbert._encoder._files.staged_directory`): it is there whole or not at all, and
never replaces a user's files.
"""

import json
import os
from pathlib import Path

from sklearn.utils.validation import check_is_fitted

from skbert._encoder import _files, _loading
from skbert._encoder._encoding import TOKENIZER_LOCK

# skbert pooling -> the sentence-transformers Pooling flag that computes it.
POOLING_FLAGS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
                 "max": "pooling_mode_max_tokens",
                 "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
                 "last": "pooling_mode_lasttoken"}
# Every flag a Pooling config of sentence-transformers 2.x and later holds.
ALL_FLAGS = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
             "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
             "pooling_mode_lasttoken")
POOLING_DIR, NORMALIZE_DIR = "1_Pooling", "2_Normalize"


def unsupported_settings(vectorizer):
    """Why a sentence-transformers folder would not give ``vectorizer``'s vectors: one
    sentence per setting it cannot express (empty when it can)."""
    pooling, norm = vectorizer.pooling_, vectorizer.norm_
    problems = []
    if vectorizer._layers(pooling) != (vectorizer.n_layers_ - 1,):
        problems.append(f"layer={vectorizer.layer!r}: sentence-transformers pools the token "
                        "vectors of the last layer only (layer=-1)")
    if pooling == "pooler":
        problems.append("pooling='pooler': sentence-transformers' Transformer module passes on "
                        "token vectors only, not BERT's pooler output (pooling='cls' is the "
                        "[CLS] vector)")
    elif pooling == "mean_max":
        problems.append("pooling='mean_max': sentence-transformers' Pooling flags concatenate "
                        "max before mean, skbert puts mean first")
    if not vectorizer.include_special_tokens and pooling in ("mean", "max", "mean_sqrt_len"):
        problems.append("include_special_tokens=False: sentence-transformers pools [CLS] and "
                        "[SEP] with the text tokens")
    if norm not in (None, "l2"):
        problems.append(f"norm={norm!r}: sentence-transformers' Normalize module is L2 only")
    if (vectorizer.truncate_dim is not None
            and vectorizer.truncate_dim < vectorizer._config.hidden_size):
        problems.append(f"truncate_dim={vectorizer.truncate_dim!r}: the folder cannot store "
                        "it, and SentenceTransformer's truncate_dim truncates after Normalize, "
                        "where skbert truncates before normalizing")
    if vectorizer.truncation != "head":
        problems.append(f"truncation={vectorizer.truncation!r}: sentence-transformers keeps the "
                        "first max_seq_length tokens of a long text (truncation='head') only")
    return problems


def folder_files(vectorizer):
    """The sentence-transformers JSON files for ``vectorizer``: {relative path: content}."""
    pooling, sentence = vectorizer.pooling_, vectorizer._sentence
    modules = [("", "Transformer"), (POOLING_DIR, "Pooling")]
    if vectorizer.norm_ == "l2":
        modules.append((NORMALIZE_DIR, "Normalize"))
    prompt, prompts = vectorizer.prompt_, dict(sentence.prompts)
    if prompt:
        prompts["default"] = prompt
    return {
        "modules.json": [{"idx": index, "name": str(index), "path": path,
                          "type": f"sentence_transformers.models.{kind}"}
                         for index, (path, kind) in enumerate(modules)],
        "sentence_bert_config.json": {"max_seq_length": vectorizer._window_length(),
                                      "do_lower_case": False},
        f"{POOLING_DIR}/config.json": {
            "word_embedding_dimension": vectorizer._config.hidden_size,
            **{flag: flag == POOLING_FLAGS[pooling] for flag in ALL_FLAGS},
            # skbert's cls is the window's first token, prompt or not; sentence-transformers'
            # is the first token after an excluded prompt, and the first one otherwise.
            "include_prompt": sentence.include_prompt or pooling == "cls",
        },
        "config_sentence_transformers.json": {
            "__version__": _versions(),
            "model_type": "SentenceTransformer",
            "prompts": prompts,
            "default_prompt_name": "default" if prompt else None,
            "similarity_fn_name": "cosine",
        },
    }


def _versions():
    import importlib.metadata

    import torch
    import transformers

    try:
        skbert_version = importlib.metadata.version("skbert")
    except importlib.metadata.PackageNotFoundError:
        skbert_version = "unknown"
    return {"skbert": skbert_version, "transformers": transformers.__version__,
            "pytorch": torch.__version__}


def save_sentence_transformer(vectorizer, path):
    """Write fitted ``vectorizer`` as a sentence-transformers folder at ``path``, new or
    empty; return it as a :class:`pathlib.Path`.

    See :meth:`skbert.BertVectorizer.save_sentence_transformer`, whose
    contract this is.
    """
    check_is_fitted(vectorizer)
    vectorizer._check_fit_parameters()
    problems = unsupported_settings(vectorizer)
    if problems:
        raise ValueError(
            "A sentence-transformers folder cannot reproduce the vectors of this "
            f"{type(vectorizer).__name__}: {'; '.join(problems)}. Nothing was written."
        )
    files = folder_files(vectorizer)  # checks max_length and the prompt against the model
    path = Path(os.fspath(path)).expanduser()
    with (_files.new_folder(path, "save_sentence_transformer") as staging,
          _loading.quiet_transformers()):
        vectorizer.model_.save_pretrained(staging, safe_serialization=True)
        with TOKENIZER_LOCK:  # a fast tokenizer's core cannot be read while it tokenizes
            vectorizer.tokenizer_.save_pretrained(staging)
        # As sentence-transformers' own save: the tokenizer's limit is the window, so that a
        # reader that truncates at the tokenizer's limit (skbert's max_length=None) agrees.
        files["tokenizer_config.json"] = {
            **_read_json(staging / "tokenizer_config.json"),
            "model_max_length": files["sentence_bert_config.json"]["max_seq_length"]}
        for name, content in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            (staging / name).write_text(json.dumps(content, indent=2) + "\n",
                                        encoding="utf-8")
    return path


def _read_json(path):
    with open(path, encoding="utf-8") as file:
        return json.load(file)
