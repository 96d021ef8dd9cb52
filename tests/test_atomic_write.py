"""Atomic writes replace only regular files (issue 70): a FIFO, a directory or a device where the file goes is
refused in one line naming it and left as it was; so is this process's own stdout. A symlink is followed."""
import os
import stat
import sys

import pytest
import torch

from analysis.compare import RunError, check_out
from atomic_files import NotReplaceable, atomic_write, replace_problem, write_text
from training.checkpoint import CheckpointError, write_checkpoint

from data.prepare_utils import PrepareError, write_atomic


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "target.json"
    os.mkfifo(path)
    return path


def only(folder, name):
    """The folder holds name and nothing else: no temp file was left."""
    assert sorted(os.listdir(folder)) == [name]


def test_a_fifo_is_refused_and_kept(fifo):
    with pytest.raises(NotReplaceable) as e:
        write_text(str(fifo), "{}")
    assert str(e.value) == f"{fifo} is a FIFO (named pipe), not a regular file: refusing to replace it"
    assert isinstance(e.value, OSError)  # every caller's `except OSError` reports it
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    only(fifo.parent, fifo.name)


def test_a_directory_is_refused_and_kept(tmp_path):
    target = tmp_path / "results.md"
    target.mkdir()
    (target / "inside").write_text("kept")
    with pytest.raises(NotReplaceable, match=f"{target} is a directory, not a regular file"):
        atomic_write(str(target), lambda f: f.write(b"x"))
    assert (target / "inside").read_text() == "kept"
    only(tmp_path, "results.md")


def test_devices_and_our_own_streams_are_named_without_writing():
    assert replace_problem(os.devnull) == f"{os.devnull} is a character device, not a regular file: refusing to replace it"
    # fd 1 is pytest's capture file (a regular file), a pipe or a terminal: refused in each case
    assert replace_problem("/dev/stdout").startswith("/dev/stdout is ")
    assert replace_problem("/dev/stderr").startswith("/dev/stderr is ")


def test_regular_files_and_new_names_are_written(tmp_path):
    assert replace_problem(str(tmp_path / "new.md")) is None
    write_text(str(tmp_path / "new.md"), "one")
    write_text(str(tmp_path / "new.md"), "two")
    assert (tmp_path / "new.md").read_text() == "two"
    only(tmp_path, "new.md")


def test_a_symlink_is_followed_and_kept(tmp_path):
    (tmp_path / "real.md").write_text("old")
    (tmp_path / "link.md").symlink_to("real.md")
    write_text(str(tmp_path / "link.md"), "new")
    assert os.path.islink(tmp_path / "link.md") and (tmp_path / "real.md").read_text() == "new"


def test_prepare_write_atomic_refuses_a_fifo(fifo):
    with pytest.raises(PrepareError, match=f"^{fifo} is a FIFO"):
        write_atomic(str(fifo), b"data")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    only(fifo.parent, fifo.name)


def test_a_checkpoint_over_a_fifo_is_refused(tmp_path):
    path = tmp_path / "ckpt.pt"
    os.mkfifo(path)
    with pytest.raises(CheckpointError) as e:
        write_checkpoint([str(path)], {"model": {"w": torch.zeros(2)}})
    assert e.value.kind == "unwritable" and "a FIFO (named pipe), not a regular file" in str(e.value)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    only(tmp_path, "ckpt.pt")


def test_a_checkpoint_link_over_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "ckpt_keep.pt")
    with pytest.raises(CheckpointError, match="ckpt_keep.pt: cannot be written: it is a FIFO"):
        write_checkpoint([str(tmp_path / "ckpt.pt")], {"model": {"w": torch.zeros(2)}},
                         links=[str(tmp_path / "ckpt_keep.pt")])
    assert stat.S_ISFIFO(os.lstat(tmp_path / "ckpt_keep.pt").st_mode)


def test_compare_stats_json_refuses_a_fifo_before_the_work(fifo):
    with pytest.raises(RunError, match=f"--stats-json: {fifo} is a FIFO"):
        check_out(str(fifo), "--stats-json", formats=None)
    with pytest.raises(RunError, match="/dev/full is a character device"):
        check_out("/dev/full", "--stats-json", formats=None)


def test_debian_pack_targets_are_checked_before_the_work(fifo):
    from types import SimpleNamespace
    from data.debian_docs import prepare
    args = SimpleNamespace(workers=1, from_pack=None, pack=str(fifo))
    with pytest.raises(PrepareError, match=f"--pack {fifo} is a FIFO"):
        prepare.check_arguments(args)
    args = SimpleNamespace(workers=1, from_pack=str(fifo), pack=None)  # was: "no such file", write a pack over it
    with pytest.raises(PrepareError, match=f"--from-pack {fifo} is a FIFO \\(named pipe\\), not a regular file; "
                                           "give the pack file itself$"):
        prepare.check_arguments(args)
    args = SimpleNamespace(workers=1, from_pack=os.devnull, pack=None)
    with pytest.raises(PrepareError, match="is a character device"):
        prepare.check_arguments(args)


def test_a_failed_write_names_its_file_and_ends_in_one_line(tmp_path, capsys):
    """`ulimit -f` under compare_runs was a traceback: write() errors name no file (issue 70)."""
    import errno
    from atomic_files import WriteError, one_line_write_errors
    (tmp_path / "c.png").write_bytes(b"old")

    def too_large(f):
        raise OSError(errno.EFBIG, "File too large")
    with pytest.raises(WriteError) as e:
        atomic_write(str(tmp_path / "c.png"), too_large)
    assert (e.value.errno, e.value.filename) == (errno.EFBIG, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").read_bytes() == b"old"
    only(tmp_path, "c.png")

    def main(path):
        atomic_write(path, too_large)
    assert one_line_write_errors(main)(str(tmp_path / "c.png")) == 1
    assert one_line_write_errors(main)(os.devnull) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: cannot write {tmp_path / 'c.png'}: File too large; the file there before, if any, is intact",
        f"error: {os.devnull} is a character device, not a regular file: refusing to replace it"]
    assert one_line_write_errors(lambda: 0)() == 0
