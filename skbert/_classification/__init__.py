"""Texts classified, or given a number, by the encoder fine-tuned end to end.

BertClassifier and BertRegressor: a linear head over one pooled vector per
text, trained with the encoder or with part of it, and inference through the
fitted BertVectorizer that the fit leaves (``_classifier``). Their head,
persistence and training loop lie below them in ``skbert._train``, shared with
the other fine-tuners.
"""
