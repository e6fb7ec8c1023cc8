"""Reader for retrieval data sets in the BEIR layout (not bundled: they are large)."""

import csv
import json
from pathlib import Path

from sklearn.utils import Bunch


def load_beir(directory, split="test"):
    """Read a BEIR-layout retrieval data set from disk.

    The layout is ``corpus.jsonl`` (``_id``, ``title``, ``text``),
    ``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv`` (header
    ``query-id corpus-id score``), as BEIR distributes SciFact, NFCorpus and
    the others. Nothing is downloaded.

    Parameters
    ----------
    directory : str or path-like
        The data set's directory.
    split : str, default="test"
        Which ``qrels/<split>.tsv`` to read.

    Returns
    -------
    data : Bunch
        ``doc_ids`` (list of str), ``documents`` (``"title text"`` per
        document, the usual way to embed BEIR documents), ``queries``
        (``{query id: text}`` for the queries judged in ``split``) and
        ``qrels`` (``{query id: {doc id: relevance}}``), ready for
        :func:`skbert.metrics.evaluate_retrieval`.

    Examples
    --------
    >>> from skbert.datasets import load_beir
    >>> scifact = load_beir("../shared/data/scifact")  # doctest: +SKIP
    >>> len(scifact.doc_ids), len(scifact.qrels)  # doctest: +SKIP
    (5183, 300)
    """
    directory = Path(directory)
    qrels_file = directory / "qrels" / f"{split}.tsv"
    for path in (directory / "corpus.jsonl", directory / "queries.jsonl", qrels_file):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: {directory} is not a BEIR-layout "
                                    f"data set with a {split!r} split.")
    qrels = {}
    with open(qrels_file, encoding="utf-8", newline="") as file:
        for row in csv.DictReader(file, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    with open(directory / "corpus.jsonl", encoding="utf-8") as file:
        docs = [json.loads(line) for line in file if line.strip()]
    with open(directory / "queries.jsonl", encoding="utf-8") as file:
        queries = {row["_id"]: row["text"] for row in map(json.loads, file) if row["_id"] in qrels}
    return Bunch(
        doc_ids=[doc["_id"] for doc in docs],
        documents=[f"{doc.get('title', '')} {doc['text']}".strip() for doc in docs],
        queries=queries,
        qrels=qrels,
    )
