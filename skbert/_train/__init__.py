"""Fine-tuning, written once for every estimator that trains its encoder.

The training skeleton, its loop, optimizer and schedule, the seeded random
state and the freeze rules (``_training``: :func:`_training.fit_network`
prepares what trains, trains it and merges it, and returns a record the
estimator assigns); the contrastive losses and gradient caching of
FineTunedVectorizer (``_losses``); LoRA's adapters beside the shared weights,
and their merge (``_lora``). The estimators (BertClassifier / BertRegressor,
FineTunedVectorizer, BertWordClassifier) are thin shells over them.
"""
