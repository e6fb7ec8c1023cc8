"""The way a text goes through a model, for every estimator that owns an encoder.

Loading a model folder or hub id untrusted and offline (``_loading``), and a
sentence-transformers folder read and written (``_st_folder``); texts cut into
windows and batches (``_encoding``); the engines that run them, torch, OpenVINO
and ONNX Runtime (``_engines``), with their checked, keyed exports
(``_exports``) and torch's oneDNN Linear layers (``_onednn``); the pooled parts
of a forward pass (``_features``); the forward-pass cache (``_cache``), its
stores in memory and on disk (``_stores``) and its keys (``_keys``); weights as
bytes for pickles (``_persistence``) and files written atomically
(``_files``). The estimators reach a model only through these modules; none
of them imports an estimator.
"""
