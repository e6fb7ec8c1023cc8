"""Fine-tuning, written once for every estimator that trains its encoder.

The training skeleton, its loop, optimizer and schedule, the seeded random
state and the freeze rules (``_training``: :func:`_training.fit_network`
prepares what trains, trains it and merges it, and returns a record the
estimator assigns); the contrastive losses and gradient caching of
FineTunedVectorizer (``_losses``); LoRA's adapters beside the shared weights,
and their merge (``_lora``); how a fine-tuned estimator pickles, with its
weights or light (``_tuned_persistence``), and the linear head of the
classifiers (``_linear_head``). The estimators (BertClassifier /
BertRegressor, FineTunedVectorizer, BertWordClassifier, BertReranker) are thin
shells over them.
"""
