"""What the benchmarks that drop the page cache do for a user without root, run as one: the child process imports
the code as whoever runs the tests, then (when that is root, as in CI) gives up root for the user `nobody` (uid and
gid 65534) before it calls anything, so /proc/sys/vm/drop_caches is really not writable to it. Nothing is faked."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534

DROP_ROOT = textwrap.dedent("""
    import os
    if os.geteuid() == 0:  # give root up for good: the rest runs as a user without it
        os.setgroups([])
        os.setgid(%d)
        os.setuid(%d)
    assert os.geteuid() != 0 and not os.access("/proc/sys/vm/drop_caches", os.W_OK)
""" % (NOBODY, NOBODY))


def run_without_root(code: str) -> subprocess.CompletedProcess:
    """`code` after the imports it names, as a user without root; its output and exit status."""
    imports, _, body = code.partition("\n---\n")
    script = imports + DROP_ROOT + body
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'entrypoint'}", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", script], cwd="/", env=env, capture_output=True, text=True, timeout=120)


def test_the_projection_bench_refuses_cold_without_root():
    done = run_without_root(textwrap.dedent("""
        from hostlab import HostError
        from hostlab.bench import projection
        ---
        try:
            projection.check_can_drop_page_cache()
        except HostError as err:
            print("REFUSED", err)
    """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("REFUSED --cold drops the page cache") and "needs root" in done.stdout


def test_the_cold_up_bench_refuses_without_root_before_touching_anything():
    done = run_without_root(textwrap.dedent("""
        from hostlab import HostError
        from hostlab.bench import coldup
        def forget_images(names):
            raise SystemExit(f"removed {names} before refusing")
        def make_bare():
            raise SystemExit("purged the engine before refusing")
        coldup.forget_images, coldup.make_bare = forget_images, make_bare
        ---
        for bare in (False, True):
            try:
                coldup.cold_up_bench(bare=bare)
            except HostError as err:
                print("REFUSED", err)
    """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("REFUSED") == 2 and "run it as root" in done.stdout
