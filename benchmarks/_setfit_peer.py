"""SetFit 1.2.0, the peer of ``few_labels.py``: one fit and its predictions, at SetFit's defaults.

Runs in its own environment (``benchmarks/.setfit-env``, built by ``_peers.venv_python``
on first use with ``SETFIT_PINS``; pip resolves sentence-transformers, transformers and
datasets, whose versions the result records), never imported by skbert;
``few_labels.py`` imports only ``run_setfit`` from here. A JSON job holds the model
folder, the training texts and labels (multi-hot lists where ``multi_label``), the test
texts, ``seed`` and an optional ``max_steps``. The fit is what a user writes:

    # multi_target_strategy="one-vs-rest" for multi-label jobs
    model = SetFitModel.from_pretrained(folder)
    trainer = Trainer(model=model, args=TrainingArguments(seed=seed),
                      train_dataset=Dataset.from_dict({"text": texts, "label": labels}))
    trainer.train()

with ``max_steps`` added to ``TrainingArguments`` only where the job gives it. Timed from
``from_pretrained`` to the end of ``train()`` (the model's load is part of skbert's
``fit`` too); ``predict`` timed apart. SetFit's default ``output_dir`` ("checkpoints",
a checkpoint every 500 steps) lies in a temporary working directory, removed afterwards.

Writes a JSON result (predictions, seconds, steps and pairs trained on, the defaults
it ran with, versions, this process's peak RSS) to the second argument.

Run (by ``few_labels.py``):
``benchmarks/.setfit-env/bin/python benchmarks/_setfit_peer.py JOB RESULT``
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _peers import peak_rss_mb, run_job, venv_python  # this folder is on sys.path

SETFIT_ENV = Path(__file__).resolve().parent / ".setfit-env"
SETFIT_PINS = ["torch==2.13.0", "setfit==1.2.0"]
_CHECK = ("import setfit, torch; assert setfit.__version__ == '1.2.0', setfit.__version__; "
          "assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__")


def run_setfit(job):
    """The result of one SetFit fit (``job``: see the module's docstring), in its environment;
    :class:`_peers.JobFailed` with the log's last lines if it fails."""
    python = venv_python(SETFIT_ENV, SETFIT_PINS, check=_CHECK)
    return run_job([python, __file__], job, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                               "HF_DATASETS_OFFLINE": "1"})


def defaults(args, model):
    """The training arguments and head that the fit ran with (SetFit's defaults but the
    seed and, where given, ``max_steps``)."""
    names = ("batch_size", "num_epochs", "max_steps", "sampling_strategy", "num_iterations",
             "body_learning_rate", "head_learning_rate", "warmup_proportion", "l2_weight",
             "max_length", "end_to_end", "use_amp", "seed", "save_strategy", "save_steps")
    found = {name: getattr(args, name) for name in names}
    found["loss"] = args.loss.__name__
    found["head"] = repr(model.model_head)
    found["body_max_seq_length"] = model.model_body.max_seq_length
    return found


def fit_predict(job):
    import torch
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    strategy = {"multi_target_strategy": "one-vs-rest"} if job["multi_label"] else {}
    steps = {} if job.get("max_steps") is None else {"max_steps": job["max_steps"]}
    start = time.perf_counter()
    model = SetFitModel.from_pretrained(job["model"], **strategy)
    args = TrainingArguments(seed=job["seed"], **steps)
    trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_dict(
        {"text": job["texts"], "label": job["labels"]}))
    trainer.train()
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    predictions = model.predict(job["test"], as_numpy=True)
    predict_s = time.perf_counter() - start
    return {"predictions": predictions.tolist(), "fit_s": fit_s, "predict_s": predict_s,
            "steps": trainer.st_trainer.state.global_step,
            "pairs": len(trainer.st_trainer.train_dataset),
            "threads": torch.get_num_threads(), "setfit_defaults": defaults(args, model)}


def main():
    from importlib.metadata import version

    job = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as work:
        os.environ["HF_HOME"] = str(Path(work) / "hf")
        os.chdir(work)  # SetFit's checkpoints ("checkpoints/", its default output_dir)
        result = fit_predict(job)
        os.chdir(home)
    result["versions"] = {name: version(name) for name in (
        "setfit", "sentence-transformers", "transformers", "torch", "datasets", "scikit-learn",
        "accelerate")}
    result["peak_mb"] = peak_rss_mb()
    Path(sys.argv[2]).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
