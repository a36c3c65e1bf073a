"""buildah's store written by one grpolab command at a time (hostlab/images/builders/storelock.py), for real between
processes: a second holder waits, naming the first, and goes on once it is free; a store of its own does not wait;
one process does not wait for itself; and `invoke clean` waits for a build in the store buildah is set to use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import read_until

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "entrypoint")])}


def holder(store: Path | None, doing: str) -> subprocess.Popen:
    """A process that holds the store (`store`, or buildah's own) until a line arrives on its stdin."""
    code = (
        "import sys\nfrom hostlab.images.builders.storelock import store_held\n"
        f"with store_held({doing!r}, store={str(store) if store else None!r}):\n"
        "    print('held', flush=True)\n    sys.stdin.readline()\nprint('let go', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    read_until(proc, lambda line: line.startswith("held"), timeout_s=60)
    return proc


def waiter(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def let_go(proc: subprocess.Popen) -> None:
    proc.stdin.write(b"\n")
    proc.stdin.flush()
    proc.communicate(timeout=60)


def test_a_second_holder_waits_naming_the_first_and_goes_on_once_it_is_free(tmp_path):
    store = tmp_path / "store"
    first = holder(store, "a build of track c as grpolab:c")
    second = waiter(
        "from hostlab.images.builders.storelock import store_held\n"
        f"with store_held('a build of track cv', store={str(store)!r}):\n    print('got it', flush=True)\n"
    )
    said = read_until(second, lambda line: "waiting" in line, timeout_s=60)
    assert f"is in use by a build of track c as grpolab:c (pid {first.pid}" in said, said
    try:
        second.wait(timeout=2)
        raise AssertionError("the second holder went on while the first held the store")
    except subprocess.TimeoutExpired:
        pass
    let_go(first)
    out = said + second.communicate(timeout=60)[0].decode()
    assert second.returncode == 0 and "got it" in out and "free after" in out, out


def test_stores_of_their_own_do_not_wait_for_each_other(tmp_path):
    first = holder(tmp_path / "one", "a build")
    try:
        other = subprocess.run(
            [sys.executable, "-c", "from hostlab.images.builders.storelock import store_held\n"
             f"with store_held('another', store={str(tmp_path / 'two')!r}):\n    print('got it')\n"],
            env=ENV, capture_output=True, text=True, timeout=60,
        )
    finally:
        let_go(first)
    assert other.returncode == 0 and other.stdout.strip() == "got it", other.stdout + other.stderr


def test_one_process_does_not_wait_for_itself_and_lets_go_after_an_error(tmp_path):
    code = (
        "from hostlab.images.builders.storelock import store_held, store_lock_path\n"
        f"store = {str(tmp_path / 'store')!r}\n"
        "try:\n"
        "    with store_held('invoke clean', store=store):\n"
        "        with store_held('a build inside it', store=store):\n"
        "            print('inside', flush=True)\n"
        "            raise RuntimeError('a failed build')\n"
        "except RuntimeError:\n"
        "    pass\n"
        "print(repr(store_lock_path(store).read_text()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["inside", "''"], out.stdout + out.stderr
    after = holder(tmp_path / "store", "the next one")  # free again: taken at once
    let_go(after)


def test_invoke_clean_waits_for_a_build_in_the_store_buildah_uses(tmp_path, monkeypatch):
    conf = tmp_path / "storage.conf"  # a store of the test's own, found as buildah finds it: not the builds' beside
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{tmp_path}/root"\nrunroot = "{tmp_path}/run"\n')
    monkeypatch.setitem(ENV, "CONTAINERS_STORAGE_CONF", str(conf))
    build = holder(None, "a build of track c as grpolab:c")
    clean = waiter("from hostlab.images.clean import clean\nclean('c', steps=())\n")
    try:
        said = read_until(clean, lambda line: "waiting" in line, timeout_s=60)
        assert f"buildah's store ({tmp_path / 'root'}) is in use by a build of track c as grpolab:c" in said, said
    finally:
        let_go(build)
    out = said + clean.communicate(timeout=60)[0].decode()
    assert clean.returncode == 0 and "GB freed in all" in out, out
