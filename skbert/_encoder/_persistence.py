"""Model weights and tokenizer <-> bytes, so that pickles are self-contained.

The bytes are the files that ``save_pretrained`` writes (safetensors weights,
config, tokenizer files), kept as a ``{file name: bytes}`` dict; loading
writes them to a temporary directory and reads them back with
``from_pretrained`` onto the CPU, so a pickle made on a GPU loads anywhere.
"""

import tempfile
from pathlib import Path

from skbert._encoder import _loading


def dump_model(model, tokenizer):
    """``{relative file name: bytes}`` of the model (safetensors) and its tokenizer."""
    with tempfile.TemporaryDirectory(prefix="skbert-") as directory, \
            _loading.quiet_transformers():
        model.save_pretrained(directory, safe_serialization=True)
        tokenizer.save_pretrained(directory)
        root = Path(directory)
        return {
            str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*"))
            if path.is_file()
        }


def load_model(files, dtype):
    """Rebuild ``(model, tokenizer)`` on the CPU from :func:`dump_model`'s output."""
    with tempfile.TemporaryDirectory(prefix="skbert-") as directory:
        root = Path(directory)
        for name, data in files.items():
            target = (root / name).resolve()
            if root.resolve() not in target.parents:
                raise ValueError(f"Refusing to unpack model file {name!r} outside its directory.")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return _loading.from_pretrained(directory, None, dtype)
