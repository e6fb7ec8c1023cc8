"""Retrieval: the documents of a corpus that answer a query, found, fused and reranked.

SimilaritySearch, the nearest neighbours of a vectorizer's rows in bounded
memory, and what the searches built on it share: a fitted reranker, reranked
candidates, a ranking without the query itself (``_search``); the corpus
indexes it walks block by block, float32, int8, binary and sparse (``_index``);
BM25Vectorizer, BM25 weights of documents and term counts of queries, with no
encoder (``_bm25``); HybridSearch, the fusion of several searches' rankings
(``_hybrid``); and BertReranker, a cross-encoder that scores (query, document)
pairs (``_reranker``).
"""
