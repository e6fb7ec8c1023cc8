"""What comes from outside is not trusted: model folders that ship code, inputs that can only
be read once or have no order, and light pickles whose model folder changed."""

import io
import json
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from skbert import BertVectorizer, SimilaritySearch
from skbert._encoder import _persistence

# --- model folders that ship code ----------------------------------------------------------------

REFUSED = "needs its own Python code to load: its config.json maps"


@pytest.fixture
def marker(tmp_path):
    """The file that the folder's code writes if it ever runs."""
    return tmp_path / "code-ran"


def _code_files(marker):
    """config.json of an architecture transformers does not know, and the code it maps to."""
    code = textwrap.dedent(f"""
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("ran")
        from transformers import BertConfig, BertModel

        class EvilConfig(BertConfig):
            model_type = "evil-bert"

        class EvilModel(BertModel):
            config_class = EvilConfig
    """)
    config = {"model_type": "evil-bert", "architectures": ["EvilModel"],
              "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"},
              "vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 37}
    return {"config.json": json.dumps(config).encode(), "evil.py": code.encode()}


@pytest.fixture
def code_folder(tiny_model_dir, tmp_path, marker):
    folder = tmp_path / "code-model"
    shutil.copytree(tiny_model_dir, folder)
    for name, data in _code_files(marker).items():
        (folder / name).write_bytes(data)
    return folder


def test_folder_with_code_is_refused(code_folder, marker):
    with pytest.raises(ValueError, match=rf"'{code_folder}' {REFUSED} \['AutoConfig', 'AutoModel'"
                                         r"\] .*model_type 'evil-bert'.*never runs code"):
        BertVectorizer(str(code_folder)).fit()
    assert not marker.exists()


def test_fine_tuning_and_the_command_refuse_it_too(code_folder, marker, tmp_path, capsys):
    from skbert import BertClassifier
    from skbert._cli import _command

    with pytest.raises(ValueError, match=REFUSED):
        BertClassifier(str(code_folder)).fit(["a", "b"], [0, 1])
    (tmp_path / "in.txt").write_text("the cat\n")
    assert _command.main(["embed", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy"),
                      "--model", str(code_folder)]) == 1
    assert REFUSED in capsys.readouterr().err
    assert not marker.exists()


def test_folder_with_code_is_refused_without_a_prompt_whatever_stdin_says(code_folder, marker):
    script = f"from skbert import BertVectorizer; BertVectorizer({str(code_folder)!r}).fit()"
    done = subprocess.run([sys.executable, "-c", script], input="y\ny\ny\n", text=True,
                          capture_output=True, timeout=120)
    assert done.returncode != 0 and REFUSED in done.stderr
    assert "custom code?" not in done.stdout + done.stderr  # transformers' [y/N] question
    assert not marker.exists()


def test_tokenizer_code_of_a_known_architecture_never_runs(tiny_model_dir, tmp_path, marker):
    folder = tmp_path / "tokenizer-code"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "evil_tokenizer.py").write_text(f"import pathlib\n"
                                              f"pathlib.Path({str(marker)!r}).write_text('ran')\n")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["auto_map"] = {"AutoTokenizer": ["evil_tokenizer.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    expected = BertVectorizer(tiny_model_dir).fit_transform(["the cat sat"])
    got = BertVectorizer(str(folder)).fit_transform(["the cat sat"])  # transformers' own class
    assert not marker.exists()
    np.testing.assert_array_equal(got, expected)


def test_light_pickle_of_a_folder_that_now_ships_code_is_refused(tiny_model_dir, tmp_path,
                                                                 marker):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    payload = pickle.dumps(BertVectorizer(str(folder), persist_weights=False).fit())
    for name, data in _code_files(marker).items():
        (folder / name).write_bytes(data)
    with pytest.raises(ValueError, match=REFUSED):
        pickle.loads(payload)
    assert not marker.exists()


@pytest.fixture
def pickled_code(tiny_model_dir, marker, monkeypatch):
    """A fitted vectorizer whose self-contained pickle carries a folder that ships code."""
    dump_model = _persistence.dump_model

    def with_code(model, tokenizer):
        return {**dump_model(model, tokenizer), **_code_files(marker)}

    monkeypatch.setattr(_persistence, "dump_model", with_code)
    return BertVectorizer(tiny_model_dir).fit()


def test_full_pickle_that_ships_code_is_refused(pickled_code, tmp_path, marker):
    joblib.dump(pickled_code, tmp_path / "model.joblib")
    with pytest.raises(ValueError, match=REFUSED):
        joblib.load(tmp_path / "model.joblib")
    assert not marker.exists()


def test_skops_file_that_ships_code_is_refused(pickled_code, tmp_path, marker):
    sio = pytest.importorskip("skops.io")
    sio.dump(pickled_code, tmp_path / "model.skops")
    with pytest.raises(ValueError, match=REFUSED):
        sio.load(tmp_path / "model.skops", trusted=["skbert._vectorizer.BertVectorizer"])
    assert not marker.exists()


# --- inputs --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fitted(tiny_model_dir):
    return BertVectorizer(tiny_model_dir, cache=False).fit()


@pytest.mark.parametrize("one_pass", [lambda t: (text for text in t), lambda t: map(str, t),
                                      lambda t: iter(t)])
def test_one_pass_iterables_are_read_once_and_encoded(fitted, texts, one_pass):
    expected = fitted.transform(texts)
    np.testing.assert_array_equal(fitted.fit_transform(one_pass(texts)), expected)
    generator = one_pass(texts)
    np.testing.assert_array_equal(fitted.fit(generator).transform(generator), expected)


def test_file_lines_are_encoded(fitted):
    lines = ["the cat sat\n", "a dog ran\n"]
    np.testing.assert_array_equal(fitted.fit_transform(io.StringIO("".join(lines))),
                                  fitted.transform(lines))


def test_generator_through_a_pipeline(tiny_model_dir, texts):
    labels = [0, 1] * (len(texts) // 2)
    pipe = Pipeline([("bert", BertVectorizer(tiny_model_dir)),
                     ("clf", LogisticRegression(max_iter=200))])
    expected = pipe.fit(texts, labels).predict_proba(texts)
    got = pipe.fit((text for text in texts), labels).predict_proba(iter(texts))
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_search_index_from_a_generator(tiny_model_dir, texts):
    search = SimilaritySearch(BertVectorizer(tiny_model_dir),
                              query_vectorizer=BertVectorizer(tiny_model_dir, prompt="query: "),
                              n_neighbors=2).fit(text for text in texts)
    assert search.n_samples_fit_ == len(texts)
    expected = SimilaritySearch(BertVectorizer(tiny_model_dir),
                                query_vectorizer=BertVectorizer(tiny_model_dir, prompt="query: "),
                                n_neighbors=2).fit(texts)
    np.testing.assert_array_equal(search.kneighbors(texts[:3])[1],
                                  expected.kneighbors(texts[:3])[1])


@pytest.mark.parametrize("container, kind, why", [
    ({"b", "a"}, "set", "it has no order"), (frozenset({"a"}), "frozenset", "it has no order"),
    ({"a": 0, "b": 1}, "dict", "iterating over it gives its keys")])
def test_sets_and_dicts_are_refused(fitted, container, kind, why):
    message = rf"Iterable over raw text documents expected, {kind} object received: {why}"
    for method in (fitted.transform, fitted.fit, fitted.fit_transform):
        with pytest.raises(ValueError, match=message):
            method(container)


def test_dict_views_keep_their_order(fitted, texts):
    values = dict(enumerate(texts)).values()
    np.testing.assert_array_equal(fitted.transform(values), fitted.transform(texts))


def test_errors_give_the_pandas_index_label(fitted):
    series = pd.Series(["fine", 3, "also"], index=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"Text at position 1 \(index label 'b'\) is int"):
        fitted.transform(series)
    with pytest.raises(ValueError, match=r"^Text at index 1 is int"):  # label = position
        fitted.transform(pd.Series(["fine", 3]))
    pairs = pd.DataFrame({"a": ["x", "y"], "b": ["z", float("nan")]}, index=[10, 11])
    with pytest.raises(ValueError, match=r"The second text of the pair at position 1 \(index "
                                         r"label 11\) is NaN"):
        fitted.transform(pairs)


# --- light pickles and the shared model store see a changed folder ------------------------------

@pytest.fixture
def private_copy(tiny_model_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    return folder


def _swap_two_token_ids(folder):
    path = folder / "tokenizer.json"
    tokenizer = json.loads(path.read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["cat"], vocab["dog"] = vocab["dog"], vocab["cat"]
    path.write_text(json.dumps(tokenizer))


def _shorten_model_max_length(folder):
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text())
    settings["model_max_length"] = 16
    path.write_text(json.dumps(settings))


@pytest.mark.parametrize("change", [_swap_two_token_ids, _shorten_model_max_length])
def test_light_pickle_detects_a_changed_tokenizer(private_copy, change):
    payload = pickle.dumps(BertVectorizer(str(private_copy), persist_weights=False).fit())
    change(private_copy)
    with pytest.raises(ValueError, match=r"The tokenizer of .*model' \(revision=None\) changed "
                                         r"since this BertVectorizer was pickled with "
                                         r"persist_weights=False: expected tokenizer fingerprint"):
        pickle.loads(payload)


def test_model_saved_again_into_its_folder_is_seen(private_copy, tmp_path, texts):
    import torch
    from transformers import AutoModel

    before = BertVectorizer(str(private_copy)).fit()
    old_features = before.transform(texts)
    payload = pickle.dumps(BertVectorizer(str(private_copy), persist_weights=False).fit())
    model = AutoModel.from_pretrained(private_copy)
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight.mul_(1.5)
    model.save_pretrained(private_copy)  # no clearing of skbert's model store
    elsewhere = Path(shutil.copytree(private_copy, tmp_path / "retrained"))
    expected = BertVectorizer(str(elsewhere)).fit().transform(texts)
    np.testing.assert_array_equal(BertVectorizer(str(private_copy)).fit().transform(texts),
                                  expected)
    assert not np.allclose(expected, old_features)
    np.testing.assert_array_equal(before.transform(texts), old_features)  # fitted: kept its model
    with pytest.raises(ValueError, match="The weights of .* changed since"):
        pickle.loads(payload)


def test_cache_directory_inside_the_model_folder_is_not_a_change(private_copy, texts):
    vectorizer = BertVectorizer(str(private_copy), cache=str(private_copy / "cache")).fit()
    vectorizer.transform(texts)  # writes entries two levels down
    assert BertVectorizer(str(private_copy)).fit().model_ is vectorizer.model_
