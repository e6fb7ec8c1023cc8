"""Words in context, for every estimator whose samples are word occurrences.

Word samples, ``(words, i)`` or ``(text, start, end)``: checked, aligned to
subword tokens, run through the model once per window and pooled per word
(``_samples``); BertWordVectorizer, one row of features per word occurrence
(``_word_vectorizer``); and BertWordClassifier, token classification with the
encoder trained by sentence (``_word_classifier``). The rest of the package
reads word samples through ``_samples`` only (PairSimilarity's word pairs, the
layer probe).
"""
