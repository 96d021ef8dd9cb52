"""experiments/unpack_logs.py: a pack of scratch's logs goes into the sweep dirs (finished runs) or stopped/ (the
others), a run stored with other bytes is never touched, a pack folder without SWEEP_DIR finds its one matching
folder or is refused in one line, and no member outside <flat>/... is ever written."""
import io
import json
import os
import tarfile

import pytest

from experiments import unpack_logs

SWEEP = "experiments/study/w64/cosine"
FLAT = SWEEP.replace("/", "_")


def logs(max_iters, last_eval):
    config = json.dumps({"max_iters": max_iters, "seed": 1}).encode()
    metrics = "\n".join(json.dumps({"type": "eval", "iter": it, "val_loss": 5.0 - it / 100})
                        for it in range(0, last_eval + 1, 10)).encode() + b"\n"
    return {"config.json": config, "log.txt": b"a log\n", "metrics.jsonl": metrics}


def pack(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def members(mark=True, extra=None):
    out = {f"./{FLAT}/{SWEEP_RUN}/{n}": d for n, d in logs(20, 20).items()}
    out.update({f"./{FLAT}/{STOPPED_RUN}/{n}": d for n, d in logs(20, 10).items()})
    out[f"./{FLAT}/{STOPPED_RUN}.out"] = b"stdout\n"
    if mark:
        out[f"./{FLAT}/SWEEP_DIR"] = (SWEEP + "\n").encode()
    out.update(extra or {})
    return out


SWEEP_RUN, STOPPED_RUN = "d64-b20-baseline-s1", "d64-b20-spd-s1"


def test_finished_runs_go_to_the_sweep_dir_the_others_to_stopped(tmp_path):
    path = pack(tmp_path / "p.tgz", members())
    root = tmp_path / "repo"
    said = []
    assert unpack_logs.unpack(path, str(root), say=said.append) == []
    done, stopped = root / SWEEP / SWEEP_RUN, root / "experiments/study/w64/stopped" / STOPPED_RUN
    assert sorted(os.listdir(done)) == sorted(os.listdir(stopped)) == ["config.json", "log.txt", "metrics.jsonl"]
    assert (done / "metrics.jsonl").read_bytes() == logs(20, 20)["metrics.jsonl"]
    assert said == [f"stored {SWEEP}/{SWEEP_RUN} (complete: config.json, log.txt, metrics.jsonl)",
                    f"stored experiments/study/w64/stopped/{STOPPED_RUN} (not finished: config.json, log.txt, "
                    "metrics.jsonl)"]
    said.clear()
    assert unpack_logs.unpack(path, str(root), say=said.append) == [] and all(s.startswith("already") for s in said)


def test_a_run_stored_with_other_bytes_is_left_as_it_is(tmp_path, capsys):
    root = tmp_path / "repo"
    stored = root / SWEEP / SWEEP_RUN
    stored.mkdir(parents=True)
    (stored / "log.txt").write_bytes(b"the stored log\n")
    path = pack(tmp_path / "p.tgz", members())
    assert unpack_logs.main([path, "--root", str(root)]) == 1
    assert sorted(os.listdir(stored)) == ["log.txt"] and (stored / "log.txt").read_bytes() == b"the stored log\n"
    assert f"left as stored: {SWEEP}/{SWEEP_RUN} (log.txt differ" in capsys.readouterr().out


def test_dry_run_writes_nothing(tmp_path):
    root = tmp_path / "repo"
    assert unpack_logs.main([pack(tmp_path / "p.tgz", members()), "--root", str(root), "--dry_run"]) == 0
    assert not root.exists()


def test_without_sweep_dir_the_one_matching_folder_or_one_line(tmp_path, capsys):
    path = pack(tmp_path / "p.tgz", members(mark=False))
    root = tmp_path / "repo"
    with pytest.raises(SystemExit) as e:
        unpack_logs.main([path, "--root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "no SWEEP_DIR and 0 folders here match" in err[0]
    (root / SWEEP).mkdir(parents=True)
    assert unpack_logs.unpack(path, str(root), say=lambda _: None) == []
    assert (root / SWEEP / SWEEP_RUN / "config.json").exists()


def test_members_outside_a_pack_folder_are_never_written(tmp_path):
    evil = {"../escaped/log.txt": b"x", "/abs/log.txt": b"x", f"./{FLAT}/../../escaped2/a/log.txt": b"x",
            f"./{FLAT}/SWEEP_DIR/x/log.txt": b"x"}
    root = tmp_path / "repo"
    assert unpack_logs.unpack(pack(tmp_path / "p.tgz", members(extra=evil)), str(root), say=lambda _: None) == []
    written = sorted(os.path.relpath(os.path.join(d, f), tmp_path) for d, _, fs in os.walk(tmp_path) for f in fs)
    assert [w for w in written if not w.startswith("repo/experiments/study/w64/") and w != "p.tgz"] == []


def test_a_sweep_dir_mark_that_is_not_the_folders_path_is_refused(tmp_path):
    bad = members(extra={f"./{FLAT}/SWEEP_DIR": b"../elsewhere\n"})
    with pytest.raises(unpack_logs.UnpackError, match="is not the folder's path"):
        unpack_logs.unpack(pack(tmp_path / "p.tgz", bad), str(tmp_path / "repo"), say=lambda _: None)
