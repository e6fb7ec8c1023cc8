"""What becomes of a vectorizer's embeddings: tuned, distilled into a table, compared in pairs.

FineTunedVectorizer, a BertVectorizer's encoder fine-tuned on pairs, triplets,
scored pairs or labelled texts (``_finetuned_vectorizer``); StaticVectorizer, a
static token table distilled from a vectorizer's setting, whose transform needs
no torch (``_static_vectorizer``); and PairSimilarity, the similarity of text
pairs (or of one word in two contexts) as an estimator GridSearchCV tunes
(``_pair_similarity``). BertVectorizer itself lies below the wings
(``skbert._vectorizer``): BertClassifier, FineTunedVectorizer and BertReranker
run their texts through one.
"""
