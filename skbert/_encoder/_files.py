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

Writers of other libraries may not follow the umask: safetensors (``save_file``,
and transformers' ``save_pretrained`` through it) writes via a temporary file of
mode 0o600. :func:`follow_umask` gives their files the mode a new file gets, and
a staged directory applies it to every file in it before the rename.
"""

import contextlib
import os
import secrets
import shutil
import stat
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


def follow_umask(paths):
    """Give the files ``paths`` the mode that the umask gives a new file (0o666 less it) in
    their directory, whatever mode their writer chose.

    The umask is read by making a file, not by ``os.umask``: setting it to read it
    would change it meanwhile for every other thread.

    Examples
    --------
    >>> import os, stat, tempfile
    >>> from skbert._encoder._files import follow_umask
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "model.safetensors")
    >>> os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    >>> previous = os.umask(0o022)
    >>> follow_umask([path])
    >>> _ = os.umask(previous)
    >>> oct(stat.S_IMODE(os.stat(path).st_mode))
    '0o644'
    """
    modes = {}  # directory -> the mode of a new file there
    for path in map(Path, paths):
        directory = path.parent
        if directory not in modes:
            probe = _temporary_next_to(path)
            handle = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                modes[directory] = stat.S_IMODE(os.fstat(handle).st_mode)
            finally:
                os.close(handle)
                os.unlink(probe)
        if stat.S_IMODE(os.stat(path).st_mode) != modes[directory]:
            os.chmod(path, modes[directory])


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
        follow_umask(path for path in staging.path.rglob("*") if path.is_file())
        try:
            os.replace(staging.path, target)
            staging.placed = True
        except OSError:
            if not target.is_dir():
                raise
    finally:
        if not staging.placed:
            shutil.rmtree(staging.path, ignore_errors=True)


def check_new_folder(path, method):
    """Refuse a ``path`` that is a file or a folder with files in it: the folders that skbert's
    ``save_*`` methods write are new or empty, and never overwrite a user's files. ``method``
    is the name of the method called, for the message."""
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{os.fspath(path)!r} is a file; {method} writes a new or empty "
                              "folder.")
    if path.is_dir() and any(path.iterdir()):
        raise FileExistsError(
            f"{os.fspath(path)!r} is not empty; {method} writes a new or empty folder and never "
            "overwrites files. Choose another path or empty it."
        )


@contextlib.contextmanager
def new_folder(path, method):
    """Write the folder ``path`` (a Path, new or empty) for ``method``, whole or not at all:
    :func:`check_new_folder`, then yield a staging directory (a Path) to fill, renamed onto
    ``path`` on success (:func:`staged_directory`; missing parent folders are created).

    Files that appear in ``path`` meanwhile, or a folder that another process puts there
    first, are left as they are: FileExistsError, and nothing of ours stays.

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> from skbert._encoder._files import new_folder
    >>> target = Path(tempfile.mkdtemp()) / "model"
    >>> with new_folder(target, "save_model") as staging:
    ...     _ = (staging / "config.json").write_text("{}")
    >>> os.listdir(target)
    ['config.json']
    """
    check_new_folder(path, method)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged_directory(path) as staging:
        yield staging.path
        if path.is_dir():  # an empty folder, which the rename replaces
            try:
                os.rmdir(path)
            except OSError as exc:  # files appeared meanwhile
                raise FileExistsError(f"{os.fspath(path)!r} received files while {method} "
                                      "wrote the folder; nothing was written there.") from exc
    if not staging.placed:
        raise FileExistsError(f"{os.fspath(path)!r} was created by someone else while {method} "
                              "wrote the folder; nothing was written there.")
