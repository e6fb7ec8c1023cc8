"""Atomic writes of files and directories that the other users of a shared folder can read."""

import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from skbert._encoder import _files
from skbert._encoder._files import atomic_file, follow_umask, staged_directory
from tests.test_reranker import TUPLES
from tests.test_static import gapless_model_dir  # noqa: F401 (a fixture)

NOBODY = 65534


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_file_gets_its_mode_from_the_umask(tmp_path, umask, expected):
    previous = os.umask(umask)
    try:
        with atomic_file(tmp_path / "entry.bin") as file:
            file.write(b"\x00\x01")
        with atomic_file(tmp_path / "entry.json", text=True) as file:
            file.write('{"é": 1}')
    finally:
        os.umask(previous)
    assert (tmp_path / "entry.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "entry.json").read_text(encoding="utf-8") == '{"é": 1}'
    assert mode(tmp_path / "entry.bin") == mode(tmp_path / "entry.json") == expected


def test_a_file_replaces_the_old_one_and_fsync_is_asked_for(tmp_path, monkeypatch):
    synced, original = [], os.fsync
    monkeypatch.setattr(os, "fsync", lambda handle: synced.append(handle) or original(handle))
    (tmp_path / "progress.json").write_text("old")
    with atomic_file(tmp_path / "progress.json", text=True) as file:
        file.write("new")
    assert not synced
    with atomic_file(tmp_path / "progress.json", text=True, fsync=True) as file:
        file.write("newer")
    assert len(synced) == 1
    assert os.listdir(tmp_path) == ["progress.json"]
    assert (tmp_path / "progress.json").read_text() == "newer"


def test_a_failure_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "entry.f32"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="the writer failed"):
        with atomic_file(target) as file:
            file.write(b"half of the ")
            raise RuntimeError("the writer failed")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(target) as file:
            file.write(b"half of the ")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["entry.f32"] and target.read_bytes() == b"old"


def test_a_failed_rename_leaves_no_temporary(tmp_path):
    (tmp_path / "in-the-way").mkdir()
    with pytest.raises(IsADirectoryError, match="in-the-way"):
        with atomic_file(tmp_path / "in-the-way") as file:
            file.write(b"data")
    assert os.listdir(tmp_path) == ["in-the-way"]


def test_a_missing_directory_is_the_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"No such file or directory: '.*missing/\.tmp-"):
        with atomic_file(tmp_path / "missing" / "entry"):
            pass


def test_each_temporary_is_a_new_marked_name_beside_the_target(tmp_path):
    seen = []
    for _ in range(2):
        with atomic_file(tmp_path / "entry"):
            seen += [name for name in os.listdir(tmp_path) if name != "entry"]
    assert len(set(seen)) == 2 and all(name.startswith(_files.TEMPORARY) for name in seen)


def test_a_staged_directory_gets_its_mode_from_the_umask(tmp_path, umask_022):
    target = tmp_path / "export"
    with staged_directory(target) as staging:
        assert staging.path.parent == tmp_path and staging.path.name.startswith(".tmp-")
        with atomic_file(staging.path / "model.onnx") as file:
            file.write(b"graph")
        assert not target.exists()
    assert staging.placed and os.listdir(tmp_path) == ["export"]
    assert (target / "model.onnx").read_bytes() == b"graph"
    assert mode(target) == 0o755 and mode(target / "model.onnx") == 0o644


def test_a_failure_midway_removes_the_staged_directory(tmp_path):
    with pytest.raises(RuntimeError, match="conversion failed"):
        with staged_directory(tmp_path / "export") as staging:
            (staging.path / "half.onnx").write_bytes(b"half")
            raise RuntimeError("conversion failed")
    assert not staging.placed and os.listdir(tmp_path) == []


def test_a_target_made_meanwhile_is_left_as_it_is(tmp_path):
    target = tmp_path / "export"
    with staged_directory(target) as staging:
        (staging.path / "model.onnx").write_bytes(b"ours")
        target.mkdir()  # another process stored its export first
        (target / "model.onnx").write_bytes(b"theirs")
    assert not staging.placed and os.listdir(tmp_path) == ["export"]
    assert (target / "model.onnx").read_bytes() == b"theirs"


def test_a_file_in_place_of_the_target_is_the_error(tmp_path):
    (tmp_path / "export").write_text("not a directory")
    with pytest.raises(NotADirectoryError, match="export"):
        with staged_directory(tmp_path / "export") as staging:
            (staging.path / "model.onnx").write_bytes(b"graph")
    assert os.listdir(tmp_path) == ["export"]


@pytest.mark.parametrize("umask", [0o022, 0o002], ids=["umask 022", "umask 002"])
def test_files_written_0600_by_a_library_follow_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        with staged_directory(tmp_path / "folder") as staging:
            for name in ["model.safetensors", "config.json"]:
                os.close(os.open(staging.path / name, os.O_WRONLY | os.O_CREAT, 0o600))
        alone = tmp_path / "alone.bin"
        os.close(os.open(alone, os.O_WRONLY | os.O_CREAT, 0o600))
        follow_umask([alone])
    finally:
        os.umask(previous)
    assert {path.name: mode(path) for path in (tmp_path / "folder").iterdir()} == {
        "model.safetensors": 0o666 & ~umask, "config.json": 0o666 & ~umask}
    assert mode(alone) == 0o666 & ~umask
    assert sorted(os.listdir(tmp_path)) == ["alone.bin", "folder"]  # no probe left


@pytest.mark.parametrize("umask", [0o022, 0o002], ids=["umask 022", "umask 002"])
def test_saved_model_folders_follow_the_umask(tiny_model_dir, gapless_model_dir,  # noqa: F811
                                              tmp_path, umask):
    """safetensors writes the weights through a temporary file of mode 0o600; every file of
    the folders that skbert saves gets the umask's mode, the weights included."""
    from skbert import BertReranker, BertVectorizer, StaticVectorizer

    vectorizer = BertVectorizer(tiny_model_dir).fit()
    reranker = BertReranker(tiny_model_dir, freeze="all", epochs=1, random_state=0).fit(TUPLES)
    static = StaticVectorizer(BertVectorizer(gapless_model_dir, pooling="mean"),
                              n_components=8).fit()
    previous = os.umask(umask)
    try:
        folders = [vectorizer.save_sentence_transformer(tmp_path / "st"),
                   reranker.save_cross_encoder(tmp_path / "cross-encoder"),
                   static.save_model2vec(tmp_path / "model2vec")]
    finally:
        os.umask(previous)
    for folder in folders:
        modes = {path.name: mode(path) for path in folder.rglob("*") if path.is_file()}
        assert "model.safetensors" in modes
        assert modes == dict.fromkeys(modes, 0o666 & ~umask), folder


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="switching to another user needs root")
def test_another_user_reads_what_root_wrote(umask_022):
    # Not tmp_path: pytest makes its base 0o700, which no other user may enter.
    shared = tempfile.mkdtemp(prefix="skbert-shared-")
    try:
        os.chmod(shared, 0o755)
        with atomic_file(os.path.join(shared, "entry.json"), text=True) as file:
            file.write("an entry")
        with staged_directory(os.path.join(shared, "export")) as staging:
            (staging.path / "model.onnx").write_bytes(b"a graph")

        def as_nobody(*command):
            done = subprocess.run(command, user=NOBODY, group=NOBODY, extra_groups=[],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert as_nobody("cat", os.path.join(shared, "entry.json")) == "an entry"
        assert as_nobody("ls", os.path.join(shared, "export")) == "model.onnx\n"
        assert as_nobody("cat", os.path.join(shared, "export", "model.onnx")) == "a graph"
    finally:
        shutil.rmtree(shared)
