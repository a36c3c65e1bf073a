"""CI's proof harness, CPU ONLY: run an exported verl bundle on one machine without a GPU (in track clustercpu's
environment), as `invoke verl-cpu` does on every commit to prove that a bundle trains.

Not the product: a learner's `grpolab` does not offer it, a cluster never runs it and a bundle never carries it. It is
everything verl 0.9.1 needs beyond the bundle to train on a CPU, in one place:

- a verl platform for the CPU (verl knows nvidia, npu and rocm): registered when verl imports this module, which it
  does in every process when VERL_USE_EXTERNAL_MODULES names it, and chosen with VERL_PLATFORM;
- Ray with one GPU that is not there (verl's resource pool always asks Ray for GPUs), on the machine's CPUs;
- the start-up settings of vLLM's CPU build: eager mode, no sleep mode (the CPU has none), a KV cache of
  VLLM_CPU_KVCACHE_SPACE GiB;
- and two verl assumptions no hook reaches, patched here, in this process tree only:
  - verl finds vLLM by its distribution's name (`importlib.metadata.version("vllm")`, verl/third_party/vllm) and
    stops without it; vLLM's CPU build is the distribution `vllm-cpu`. Here "vllm" answers with vllm-cpu's version
    and "+cpu", as vllm-cpu's own vllm/platforms/__init__.py does (vLLM picks its CPU platform by that "+cpu").
    Upstream: fall back to `vllm.__version__`.
  - verl joins "cpu:gloo" with the device's own backend (verl/utils/distributed.py), which on a CPU names the cpu
    device twice, and torch refuses ("Duplicate device type cpu"). Here init_process_group is given each pair once.
    Upstream: leave the second pair out when the device is the CPU.

Each run goes into BUNDLE/cpu-runs/<time>/ (verl's metrics file and checkpoint); when verl is done, its run becomes a
run-log line like a cluster run's (grpolab.export.verl_result: pass@1 by our evaluator on verl's adapter), and one
JSON summary is printed.

usage: python -m grpolab.bench verl-cpu BUNDLE [--steps N] [HYDRA_OVERRIDE ...]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import psutil
import torch
import torch.distributed
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

from ..environment.machine import usable_cores
from ..export.verl_result import record_verl_run, summary

PLATFORM = "grpolab-cpu"
MODULE = "grpolab.bench.verl_cpu_proof"  # verl imports it in each of its processes
KV_CACHE_GIB = "1"
RAY_CPU_SLOTS = 8
VERL_REWARD_WORKERS = 8  # verl 0.9.1's reward.num_workers


class CPUDeviceModule:
    """What verl asks of `torch.cuda` (its platform's device module), for the CPU: torch.cpu where torch has it, the
    process's memory where verl asks for the device's (resident set for "allocated" and "reserved", its high-water mark,
    which /proc/self/clear_refs resets, for the peaks; the machine's free memory for mem_get_info)."""

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)

    @staticmethod
    def _status_kib(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        return 0

    def memory_allocated(self, device=None) -> int:
        return self._status_kib("VmRSS") * 1024

    memory_reserved = memory_allocated

    def max_memory_allocated(self, device=None) -> int:
        return self._status_kib("VmHWM") * 1024

    max_memory_reserved = max_memory_allocated

    def reset_peak_memory_stats(self, device=None) -> None:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from the current resident set

    def mem_get_info(self, device=None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    def empty_cache(self) -> None:
        pass

    def ipc_collect(self) -> None:
        pass

    def set_device(self, device) -> None:
        pass

    def get_rng_state(self, device=None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device=None) -> None:
        torch.set_rng_state(state)

    def get_device_name(self, device=None) -> str:
        return "cpu"


@PlatformRegistry.register(platform=PLATFORM)
class CPUPlatform(PlatformBase):
    """The CPU as verl's device: torch.cpu, gloo, Ray's (fake) GPU resource, no IPC."""

    device_name = "cpu"
    vendor_name = "cpu"

    @property
    def device_module(self):
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return True

    def current_device(self) -> torch.device:
        # verl moves tensors with .to(get_device_id()), where torch reads a bare index as a CUDA device
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index=None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the fake GPU; nothing reads it on a CPU

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


CPU_DEVICE_MODULE = CPUDeviceModule()

_distribution_version = importlib.metadata.version


def _version_with_vllm_cpu_as_vllm(name: str) -> str:
    """importlib.metadata.version, where "vllm" falls back to the `vllm-cpu` distribution (the module's docstring)."""
    try:
        return _distribution_version(name)
    except importlib.metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _distribution_version("vllm-cpu") + "+cpu"  # "+cpu": how vLLM itself tells its CPU build


importlib.metadata.version = _version_with_vllm_cpu_as_vllm

_init_process_group = torch.distributed.init_process_group


def _init_process_group_once_per_device(*args, backend=None, **kwargs):
    """torch's init_process_group with "cpu:gloo,cpu:gloo" given as "cpu:gloo" (see the module's docstring)."""
    if isinstance(backend, str) and "," in backend:
        pairs = list(dict.fromkeys(part.strip() for part in backend.split(",")))
        backend = ",".join(pairs)
    return _init_process_group(*args, backend=backend, **kwargs)


torch.distributed.init_process_group = _init_process_group_once_per_device


def cpu_environment() -> dict[str, str]:
    """The environment verl and vLLM's CPU build need on a CPU, on top of the caller's."""
    # vLLM's CPU worker runs its sampler through torch.compile (inductor) while it sizes the KV cache, even in eager
    # mode, and inductor needs a C++ compiler, which the images do not carry (track clustercpu's image stopped at
    # "InvalidCxxCompiler: No working C++ compiler found"); without one, torch.compile is off in every process, as
    # the lab's vLLM path does (grpolab.rollouts.vllm_cpu.sampler_compilation). Where there is one, it is as vLLM has
    # it.
    no_compiler = shutil.which(os.environ.get("CXX") or "g++") is None
    return {
        **({"TORCH_COMPILE_DISABLE": "1"} if no_compiler else {}),
        "VERL_USE_EXTERNAL_MODULES": MODULE,
        "VERL_PLATFORM": PLATFORM,
        # verl registers its FSDP engine for the devices "cuda" and "npu" only; the engine asks the platform for its
        # device and its collectives, so the "cuda" entry is the one that runs on the CPU platform
        "VERL_ENGINE_DEVICE": "cuda",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    }


def cpu_overrides(steps: int) -> list[str]:
    """Hydra overrides for a CPU, after the bundle's own (later wins): Ray's fake GPU, one TransferQueue storage unit,
    vLLM's CPU start-up, N steps."""
    return [
        "+ray_kwargs.ray_init.num_gpus=1",
        # Ray's CPUs are slots, not cores: verl's placement group takes 3 beside its GPU, and its TaskRunner, the
        # TransferQueue controller and storage unit one each, so 2 cores' worth of slots never schedule them
        f"ray_kwargs.ray_init.num_cpus={max(RAY_CPU_SLOTS, os.cpu_count() or 1)}",
        # TransferQueue's storage units are Ray actors of one CPU each: 8 (its default) on a 2-CPU Ray never all
        # start, and the run waits for them without a word
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # FSDP1 (verl's default "fsdp") takes the device as an index, which torch reads as a CUDA device; FSDP2
        # takes verl's device mesh, built on the platform's device
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        # verl's defaults of 8 agent-loop workers, 8 reward-loop workers and 8 data-loader processes, each its own
        # Python process, on 2 cores. The reward loop keeps one worker per usable core (up to verl's 8): with 8 on 2
        # cores,
        # 2 steps took 156.8 s and 212 CPU-s, with 2 139.3 s and 174 CPU-s at the same 2.01 s of generation a step;
        # with 1, generation took 3.01 s a step
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"reward.num_workers={min(VERL_REWARD_WORKERS, max(1, usable_cores()))}",
        "data.dataloader_num_workers=0",
        "actor_rollout_ref.rollout.enforce_eager=true",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "++actor_rollout_ref.rollout.enable_sleep_mode=false",  # vLLM has no sleep mode on a CPU
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={steps}",
        "trainer.device=cpu",
    ]


def run_shown_and_kept(command: list[str], env: dict, output_log: Path) -> int:
    """Run `command` in the folder `output_log` is in, its output shown as it comes and kept in `output_log` (the
    run-log line quotes its first error). That folder, not the caller's: Hydra, verl's configuration, writes an
    outputs/<date>/<time>/ folder into the working folder, and runs from the clone's root left them there."""
    with (
        open(output_log, "wb") as kept,
        subprocess.Popen(
            command, env=env, cwd=output_log.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        ) as proc,
    ):
        for line in proc.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            kept.write(line)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpolab.bench verl-cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=Path, help="the folder `invoke export --engine verl` wrote")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps to train (default 2)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides, after the CPU's")
    args = parser.parse_intermixed_args(argv)
    if args.steps < 1:  # verl would take 0 or fewer as its total and train nothing
        print(
            f"FAILED [input] --steps {args.steps}: verl trains at least 1 step; use --steps 1 or more", file=sys.stderr
        )
        return 2
    bundle = args.bundle.resolve()
    run_sh = bundle / "run.sh"
    if not run_sh.is_file():
        print(
            f"FAILED [input] {run_sh} does not exist: make the bundle with `invoke export --engine verl`",
            file=sys.stderr,
        )
        return 2
    # Each run in a folder of its own: verl resumes from any checkpoint it finds in trainer.default_local_dir
    work = bundle / "cpu-runs" / time.strftime("%Y%m%dT%H%M%S")
    work.mkdir(parents=True)
    metrics_file, checkpoints = work / "verl-metrics.jsonl", work / "checkpoints"
    command = [
        "bash",
        str(run_sh),
        *cpu_overrides(args.steps),
        f"trainer.default_local_dir={checkpoints}",
        *args.overrides,
    ]
    started_at, started = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.monotonic()
    print(
        f"verl on the CPU: {args.steps} GRPO steps of {bundle} (run.sh with the CPU's overrides), into {work}",
        flush=True,
    )
    # run.sh calls `python3`: this environment's, as an activated venv or the image would give it
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, **cpu_environment(), "VERL_FILE_LOGGER_PATH": str(metrics_file), "PATH": path}
    output_log = work / "verl-output.log"
    status = run_shown_and_kept(command, env, output_log)
    record = record_verl_run(
        bundle,
        metrics_file,
        checkpoints,
        verl_exit_status=status,
        wall_clock_s=round(time.monotonic() - started, 1),
        started_at=started_at,
        output_log=output_log,
    )
    print(json.dumps(summary(record)))
    if record["status"] != "passed":
        print(f"FAILED [{record['failed_layer']}] {record['error']}", file=sys.stderr)
        return status or 1
    if len(record["steps"]) != args.steps:
        print(f"FAILED [first_step] verl trained {len(record['steps'])} step(s), not {args.steps}", file=sys.stderr)
        return 1
    return 0
