"""Reader for retrieval data sets in the BEIR layout (not bundled: they are large)."""

import csv
import json
from pathlib import Path

from sklearn.utils import Bunch


def load_beir(directory, split="test"):
    r"""Read a BEIR-layout retrieval data set from disk.

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
    A data set of two documents and one judged query, written where it is read:

    >>> import tempfile
    >>> from pathlib import Path
    >>> from skbert.datasets import load_beir
    >>> directory = Path(tempfile.mkdtemp())
    >>> (directory / "qrels").mkdir()
    >>> _ = (directory / "corpus.jsonl").write_text(
    ...     '{"_id": "d1", "title": "Tides", "text": "The Moon raises them."}\n'
    ...     '{"_id": "d2", "title": "Stocks", "text": "They fell on Monday."}\n')
    >>> _ = (directory / "queries.jsonl").write_text('{"_id": "q1", "text": "what causes tides?"}')
    >>> _ = (directory / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    >>> data = load_beir(directory)
    >>> data.doc_ids, data.documents[0]
    (['d1', 'd2'], 'Tides The Moon raises them.')
    >>> data.queries, data.qrels
    ({'q1': 'what causes tides?'}, {'q1': {'d1': 1}})

    The SciFact sample in skbert's repository reads the same way
    (``load_beir("examples/data/scifact_sample", "train")``), as does BEIR's
    full SciFact: 5,183 documents and 300 judged test queries.
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
