"""Files and directories written atomically, readable by the other users of a shared folder.

A cache directory, an export directory or an output folder may be shared by a
team or a cluster's workers. What skbert writes there is first written under a
temporary name in the same directory (``.tmp-`` and a random suffix), then
renamed into place, so that a reader never sees a half-written file and two
writers never write into the same one. The temporary file is created with mode
0o666 and a staging directory with 0o777, so the process's umask decides what
other users may do, as for any file the user makes (``tempfile.mkstemp`` and
``mkdtemp`` make 0o600 and 0o700, which no other user can read, even after
the rename). On failure the temporary is removed and the error propagates.
"""

import contextlib
import os
import secrets
import shutil
from pathlib import Path

# Every temporary name starts so: the cache removes those of killed writers by it.
TEMPORARY = ".tmp-"


def _temporary_next_to(path):
    return path.with_name(f"{TEMPORARY}{secrets.token_hex(8)}")


@contextlib.contextmanager
def atomic_file(path, *, text=False, fsync=False):
    """Write ``path`` atomically: yield a new file to write, renamed onto ``path`` on success.

    Parameters
    ----------
    path : str or path-like
        The file to create or replace; its directory must exist.
    text : bool, default=False
        Yield a UTF-8 text file instead of a binary one.
    fsync : bool, default=False
        Flush the data to the disk before the rename, so that after a crash
        ``path`` holds either the old contents or the new ones.

    Examples
    --------
    >>> import os, tempfile
    >>> from skbert._encoder._files import atomic_file
    >>> folder = tempfile.mkdtemp()
    >>> with atomic_file(os.path.join(folder, "notes.txt"), text=True) as file:
    ...     _ = file.write("written whole or not at all")
    >>> os.listdir(folder)
    ['notes.txt']
    """
    path = Path(path)
    temporary = _temporary_next_to(path)
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(handle, "w" if text else "wb",
                       encoding="utf-8" if text else None) as file:
            yield file
            if fsync:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class StagedDirectory:
    """The directory :func:`staged_directory` yields: fill ``path``; afterwards ``placed`` says
    whether it became the target (False: another writer's target was there first)."""

    def __init__(self, path):
        self.path, self.placed = path, False


@contextlib.contextmanager
def staged_directory(target):
    """Make the directory ``target`` atomically: yield a new empty one to fill, renamed onto
    ``target`` on success.

    Where ``target`` appeared meanwhile (another process made it), it is left
    as it is and ours removed: the caller checks ``placed`` and decides whether
    theirs will do. On failure the staging directory is removed and the error
    propagates.

    Examples
    --------
    >>> import os, tempfile
    >>> from skbert._encoder._files import staged_directory
    >>> folder = tempfile.mkdtemp()
    >>> with staged_directory(os.path.join(folder, "export")) as staging:
    ...     open(os.path.join(staging.path, "model.onnx"), "wb").close()
    >>> staging.placed, os.listdir(folder), os.listdir(os.path.join(folder, "export"))
    (True, ['export'], ['model.onnx'])
    """
    target = Path(target)
    staging = StagedDirectory(_temporary_next_to(target))
    os.mkdir(staging.path, 0o777)
    try:
        yield staging
        try:
            os.replace(staging.path, target)
            staging.placed = True
        except OSError:
            if not target.is_dir():
                raise
    finally:
        if not staging.placed:
            shutil.rmtree(staging.path, ignore_errors=True)
