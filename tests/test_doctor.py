"""The doctor: for real on this machine (no GPU), its JSON against doctor.schema.json, each verdict through the
code that reads the machine, and, for hardware we lack, the tools' outputs and /proc, /sys, /dev trees in the
form those machines give them (nvidia-smi, rocminfo: written from their documented formats until
images/gpu/check_doctor.sh records real ones)."""

import http.server
import importlib.metadata
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import pytest

from grpolab.environment.doctor import SCHEMA_FILE, Context, doctor_report, gather, render_report
from grpolab.environment.trl_range import trl_vllm_range, vllm_in_trl_range
from grpolab.environment.fingerprint import environment_fingerprint
from grpolab.environment.machine import HostFacts, host_facts
from grpolab.common.runlog import append_run
from grpolab.environment.torch_build import Devices, TorchBuild, torch_build

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads(SCHEMA_FILE.read_text())
NVIDIA_SMI_H200 = {
    "--query-gpu": "NVIDIA H200, 580.95.05, 143771, 143190, 9.0",
    "": "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |",
}
ROCMINFO_STRIX = {
    "": "Agent 1\n  Name:                    AMD RYZEN AI MAX+ 395\nAgent 2\n  Name:                    gfx1151\n  "
        "Marketing Name:          AMD Radeon 8060S\n"
}


def fake_tool(folder: Path, monkeypatch, name: str, answers: dict[str, str]) -> None:
    """A stand-in for a vendor tool on PATH: prints the answer whose key starts its first argument."""
    cases = "".join(
        f'  "{key}"*) cat <<"EOF"\n{text}\nEOF\n  ;;\n' for key, text in sorted(answers.items(), reverse=True)
    )
    tool = folder / name
    tool.write_text(f'#!/bin/sh\ncase "$1" in\n{cases}esac\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GRPOLAB_TRACK", "c")
    for var in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HSA_OVERRIDE_GFX_VERSION",
        "CUDA_VISIBLE_DEVICES",
        "GRPOLAB_LOCK_FILE",
    ):
        monkeypatch.delenv(var, raising=False)


def named(report, name):
    return next(i for i in report["items"] if i["name"] == name)


def valid(report):
    jsonschema.validate(json.loads(json.dumps(report, default=str)), SCHEMA)
    return report


def context(track="c", build=None, devices=None, host=None, rollout=None, server_url=None, packages=None) -> Context:
    """The doctor's inputs, with the torch build, devices and host facts of a machine we lack in place of ours
    (and, with `packages`, installed versions as that machine's fingerprint would list them)."""
    real = gather(track, rollout, server_url)
    fingerprint = {**real.fingerprint, "packages": {**real.fingerprint["packages"], **(packages or {})}}
    return Context(
        real.track,
        build or real.build,
        devices or real.devices,
        host or real.host,
        fingerprint,
        rollout or real.rollout,
        server_url,
    )


# --- on this machine, for real ---------------------------------------------------------------------------


def test_report_on_this_machine_is_valid_and_short():
    # Not timed (speed is a benchmark's job): with PyPI's CUDA torch, as CI has, importing torch alone can take
    # over 5 s on a loaded 2-core machine.
    report = valid(doctor_report("c"))
    names = [i["name"] for i in report["items"]]
    for name in (
        "system",
        "memory",
        "gpu driver",
        "gpus",
        "torch",
        "device",
        "packages",
        "lock drift",
        "vllm",
        "llama.cpp",
        "environment",
        "disk",
        "huggingface token",
        "last smoke test",
    ):
        assert name in names
    assert (
        report["schema"] == "grpolab-doctor"
        and report["schema_version"] == SCHEMA["properties"]["schema_version"]["const"]
    )
    text = render_report(report)
    item_lines = [line for line in text.splitlines() if re.match(r"  \[(ok  |warn|FAIL)\] ", line)]
    assert len(item_lines) == len(report["items"])  # one line per item
    assert len(text.splitlines()) == 2 + len(item_lines) + sum(1 for i in report["items"] if i["status"] != "ok")
    assert len(render_report(report, verbose=True).splitlines()) > len(text.splitlines())
    if report["fingerprint"]["device_type"] == "cpu":
        assert named(report, "device")["status"] == "ok" and "as track c expects" in named(report, "device")["summary"]


def test_schema_is_a_valid_schema_and_catches_a_bad_report():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    report = json.loads(json.dumps(doctor_report("c"), default=str))
    report["items"][0]["status"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, SCHEMA)
    report["items"][0].update(status="warn", action="")
    with pytest.raises(jsonschema.ValidationError):  # a warning always says what to do
        jsonschema.validate(report, SCHEMA)


def test_cli_short_form_verbose_and_json(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "entrypoint"), "GRPOLAB_RUNS_DIR": str(tmp_path)}

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "grpolab", "doctor", "--track", "c", *args],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=300,
        ).stdout  # noqa: E731
    short, verbose, as_json = run(), run("-v"), json.loads(run("--json"))
    valid(as_json)
    assert short.splitlines()[0].startswith("grpolab doctor: track c") and "grpolab doctor -v" in short
    assert len(verbose.splitlines()) > len(short.splitlines())


def test_a_gpu_track_without_a_gpu_fails_with_an_action():
    if environment_fingerprint()["device_type"] != "cpu":
        pytest.skip("this machine has an accelerator")
    report = valid(doctor_report("s"))
    # A CPU wheel is the wrong wheel; a CUDA wheel (PyPI's, as CI has) on a machine without a GPU sees none.
    wanted = "sees no GPU" if torch_build().kind == "cuda" else "needs a CUDA build"
    assert named(report, "device")["status"] == "fail" and wanted in named(report, "device")["summary"]
    assert named(report, "gpu driver")["status"] == "fail"
    assert report["status"] == "fail" and "->" in render_report(report)


# --- the machine's facts, from the files and tools such machines have --------------------------------------


def strix_halo_root(root: Path) -> Path:
    files = {
        "proc/meminfo": "MemTotal:       131072000 kB\nMemFree:         2000000 kB\nMemAvailable:   120000000 kB\n",
        "proc/cpuinfo": "processor\t: 0\nmodel name\t: AMD RYZEN AI MAX+ 395 w/ Radeon 8060S\n"
        "flags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512_bf16 avx512_vnni\n",
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 amd_iommu=off amdgpu.gttsize=126976 "
                        "ttm.pages_limit=32505856\n",
        "proc/sys/kernel/osrelease": "6.17.1-061701-generic\n",
        "etc/os-release": 'PRETTY_NAME="Ubuntu 25.10"\n',
        "sys/class/drm/card1/device/vendor": "0x1002\n",
        "sys/class/drm/card1/device/mem_info_gtt_total": f"{126976 * 2**20}\n",
        "sys/class/drm/card1/device/mem_info_vram_total": f"{512 * 2**20}\n",
        "sys/module/amdgpu/version": "6.16.6\n",
        "sys/module/ttm/parameters/pages_limit": "32505856\n",
        "dev/kfd": "",
        "dev/dri/renderD128": "",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_amd_machine_facts_from_sys_proc_and_rocminfo(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, "rocminfo", ROCMINFO_STRIX)
    host = host_facts(strix_halo_root(tmp_path / "root"))
    assert host.amd_gpu == "gfx1151" and host.amd_agents == ["gfx1151"] and host.amdgpu_version == "6.16.6"
    assert (
        host.kfd_present
        and host.kfd_accessible
        and [n.path.rsplit("/", 1)[1] for n in host.device_nodes] == ["kfd", "renderD128"]
    )
    assert (
        host.kernel == "6.17.1-061701-generic"
        and host.os_name == "Ubuntu 25.10"
        and host.cpu_model.startswith("AMD RYZEN AI MAX+ 395")
        # Zen 5's vector units, which decide a CPU track's speed; no AMX on it
        and host.cpu_flags == ["avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni"]
    )
    assert host.mem_total_gb == 134.2 and host.mem_available_gb == 122.9
    assert (
        host.gtt["amdgpu.gttsize"] == "126976"
        and host.gtt["card1_mem_info_gtt_total_gb"] == 133.1
        and host.gtt["ttm_pages_limit_gb"] == 133.1
    )


def test_amd_gpu_without_rocminfo_is_still_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    host = host_facts(strix_halo_root(tmp_path / "root"))
    assert host.amd_gpu == "AMD GPU (PCI vendor 0x1002, card1)" and host.nvidia_driver is None


def test_nvidia_machine_facts_from_nvidia_smi(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, "nvidia-smi", NVIDIA_SMI_H200)
    host = host_facts(tmp_path / "bare")
    assert (host.nvidia_driver, host.driver_cuda) == ("580.95.05", "13.0")
    assert host.nvidia_gpus == [
        {"name": "NVIDIA H200", "memory_total_gb": 150.8, "memory_free_gb": 150.1, "compute_cap": "9.0"}
    ]
    assert host.amd_gpu is None and not host.kfd_present


# --- each verdict ------------------------------------------------------------------------------------------

H200 = Devices("cuda", 1, ["NVIDIA H200"], "sm_90", [150.0], 149.0)
CU130 = TorchBuild("2.13.0+cu130", "cuda", cuda="13.0", arch_list=["sm_80", "sm_90", "sm_100", "sm_120", "compute_120"])
THEROCK = TorchBuild("2.10.0+rocm7.11.0", "hip", hip="7.11.0", arch_list=["gfx1151"])
STRIX = Devices("cuda", 1, ["AMD Radeon 8060S"], "gfx1151", [103.1], 100.0)
AMD = dict(amd_gpu="gfx1151", kfd_present=True, kfd_accessible=True, kernel="6.18.4", mem_available_gb=101.0)


def test_driver_against_the_wheels_cuda():
    old = valid(doctor_report(ctx=context("n", CU130, H200, HostFacts(nvidia_driver="550.54", driver_cuda="12.4"))))
    assert (
        named(old, "gpu driver")["status"] == "fail"
        and "older than torch's CUDA 13.0" in named(old, "gpu driver")["summary"]
    )
    new = valid(doctor_report(ctx=context("n", CU130, H200, HostFacts(nvidia_driver="580.95.05", driver_cuda="13.0"))))
    assert named(new, "gpu driver")["status"] == "ok" and ">= torch's CUDA 13.0" in named(new, "gpu driver")["summary"]
    assert named(new, "gpus")["summary"] == "1 seen by torch: NVIDIA H200 (150.0 GB)"


def test_gpus_on_the_machine_that_torch_does_not_see():
    host = HostFacts(
        nvidia_driver="580.95.05",
        driver_cuda="13.0",
        nvidia_gpus=[{"name": "NVIDIA H200", "memory_total_gb": 150.8, "memory_free_gb": 150.1, "compute_cap": "9.0"}],
    )
    report = valid(doctor_report(ctx=context("n", CU130, Devices(), host)))
    assert named(report, "gpus")["status"] == "warn" and "torch sees none" in named(report, "gpus")["summary"]
    assert named(report, "device")["status"] == "fail"


@pytest.mark.parametrize(
    "build, devices, status, words",
    [
        (CU130, H200, "ok", "sm_90 native"),
        (CU130, Devices("cuda", 1, ["NVIDIA GB10"], "sm_121", [128.0], 100.0), "ok", "sm_120 kernels run on sm_121"),
        (
            TorchBuild("2.13.0", "cuda", cuda="13.0", arch_list=["sm_80", "compute_80"]),
            H200,
            "warn",
            "PTX compute_80 is compiled at load time for sm_90",
        ),
        (
            TorchBuild("2.13.0", "cuda", cuda="13.0", arch_list=["sm_100", "sm_120"]),
            H200,
            "fail",
            "nothing in sm_100, sm_120 runs on sm_90",
        ),
        (THEROCK, STRIX, "ok", "gfx1151 native"),
    ],
)
def test_arch_item(build, devices, status, words):
    report = valid(
        doctor_report(ctx=context("n", build, devices, HostFacts(nvidia_driver="580.95.05", driver_cuda="13.0")))
    )
    assert named(report, "arch")["status"] == status and words in named(report, "arch")["summary"]


def test_unified_memory_two_readings_of_one_pool():
    agree = valid(doctor_report(ctx=context("x", THEROCK, STRIX, HostFacts(**AMD))))
    assert named(agree, "unified memory")["status"] == "ok"
    apart = valid(
        doctor_report(
            ctx=context(
                "s",
                CU130,
                Devices("cuda", 1, ["NVIDIA GB10"], "sm_121", [128.0], 4.0),
                HostFacts(nvidia_driver="580.95.05", driver_cuda="13.0", mem_available_gb=90.0),
            )
        )
    )
    um = named(apart, "unified memory")
    assert (
        um["status"] == "warn"
        and "MemAvailable 90.0 GB, torch.cuda.mem_get_info free 4.0 GB" in um["summary"]
        and "vLLM" in um["action"]
    )
    assert not any(
        i["name"] == "unified memory" for i in doctor_report(ctx=context("n", CU130, H200, HostFacts()))["items"]
    )


@pytest.mark.parametrize(
    "facts, env, status, words",
    [
        (AMD, {}, "ok", "HIP 7.11.0, arch gfx1151, kernel 6.18.4"),
        ({**AMD, "kfd_present": False}, {}, "fail", "no /dev/kfd"),
        ({**AMD, "kernel": "6.14.0-29-generic"}, {}, "warn", "kernel 6.14.0-29-generic is older than 6.18.4"),
        (AMD, {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}, "warn", "HSA_OVERRIDE_GFX_VERSION=11.0.0 is set"),
    ],
)
def test_rocm_item(facts, env, status, words, monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    report = valid(doctor_report(ctx=context("x", THEROCK, STRIX, HostFacts(**facts))))
    assert named(report, "rocm")["status"] == status and words in named(report, "rocm")["summary"]


def test_rocm_node_this_user_cannot_open(tmp_path):
    from grpolab.environment.machine import DeviceNode

    host = HostFacts(**AMD, device_nodes=[DeviceNode("/dev/kfd", "render", 110, False, False)])
    rocm = named(valid(doctor_report(ctx=context("x", THEROCK, STRIX, host))), "rocm")
    assert (
        rocm["status"] == "fail"
        and "/dev/kfd present but not usable" in rocm["summary"]
        and "render group" in rocm["action"]
    )


def installed(name):
    return importlib.metadata.version(name)


def test_lock_drift_names_what_a_later_pip_install_replaced(tmp_path, monkeypatch):
    lock = tmp_path / "lock.txt"
    monkeypatch.setenv("GRPOLAB_LOCK_FILE", str(lock))
    lines = {"torch": installed("torch"), "trl": installed("trl"), "packaging": installed("packaging")}
    lock.write_text("".join(f"{n}=={v} \\\n    --hash=sha256:{'0' * 64}\n" for n, v in lines.items()))
    clean = named(valid(doctor_report("c")), "lock drift")
    assert clean["status"] == "ok" and "all 3 packages of lock.txt" in clean["summary"]
    lock.write_text(lock.read_text().replace(f"packaging=={lines['packaging']}", "packaging==1.0"))
    minor = named(doctor_report("c"), "lock drift")
    assert minor["status"] == "warn" and f"packaging {lines['packaging']} (lock 1.0)" in minor["summary"]
    lock.write_text(lock.read_text().replace(f"torch=={lines['torch']}", "torch==2.13.0+rocm7.2"))
    torch = named(doctor_report("c"), "lock drift")
    assert (
        torch["status"] == "fail"
        and f"torch {lines['torch']} (lock 2.13.0+rocm7.2)" in torch["summary"]
        and "re-sync" in torch["action"]
    )


def test_no_lock_to_compare_with(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOLAB_LOCK_FILE", str(tmp_path / "absent.txt"))
    assert named(doctor_report("c"), "lock drift")["status"] == "warn"


def test_environment_variables_with_secrets_masked(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_DoNotPrintThis123")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_NorThisOne456")
    monkeypatch.setenv("VLLM_API_KEY", "sk-NeitherThis789")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("HF_TOKEN_PATH", "/run/secrets/hf_token")  # where the images' token is: shown, it is no secret
    report = valid(doctor_report("c"))
    dumped = json.dumps(report) + render_report(report) + render_report(report, verbose=True)
    for secret in ("DoNotPrintThis", "NorThisOne", "NeitherThis"):
        assert secret not in dumped
    variables = named(report, "environment")["details"]["variables"]
    assert (
        variables["NCCL_DEBUG"] == "INFO"
        and variables["VLLM_API_KEY"] == "<set, value hidden>"
        and variables["HF_TOKEN"] == "<set, value hidden>"
    )
    assert variables["HF_TOKEN_PATH"] == "/run/secrets/hf_token"
    token = named(report, "huggingface token")
    assert "HF_TOKEN" in token["summary"] and "not shown" in token["summary"]


def test_no_token_is_reported():
    assert "no HF_TOKEN" in named(doctor_report("c"), "huggingface token")["summary"]


def test_a_variable_that_hides_every_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert named(doctor_report("n"), "environment")["status"] == "warn"
    assert named(doctor_report("c"), "environment")["status"] == "ok"


def test_vllm_item():
    has_vllm = importlib.util.find_spec("vllm") is not None
    colocate = named(valid(doctor_report("c", rollout="vllm-colocate")), "vllm")
    inprocess = named(doctor_report("c", rollout="inprocess"), "vllm")
    if not has_vllm:
        assert (
            colocate["status"] == "fail"
            and "not installed, but the rollout path is vllm-colocate" in colocate["summary"]
        )
        assert inprocess["status"] == "ok" and "not installed" in inprocess["summary"]


def test_llamacpp_item():
    llama = named(valid(doctor_report("c")), "llama.cpp")
    version = importlib.metadata.version("llama-cpp-python") if importlib.util.find_spec("llama_cpp") else None
    if version:
        assert (
            llama["status"] == "ok"
            and f"llama-cpp-python {version}" in llama["summary"]
            and "GPU offload" in llama["summary"]
        )
        assert "system_info" in llama["details"]
    else:
        assert llama["status"] == "warn"  # track c's lock has it


class Health(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):  # noqa: N802
        self.send_response(self.code if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    servers = []

    def start(code):
        handler = type("H", (Health,), {"code": code})
        server = http.server.HTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()


def test_vllm_server_reachable_only_checked_in_server_mode(health_server):
    assert not any(i["name"] == "vllm server" for i in doctor_report("c")["items"])
    up = named(valid(doctor_report("c", rollout="vllm-server", server_url=health_server(200))), "vllm server")
    assert up["status"] == "ok" and "/health answers 200" in up["summary"]
    sick = named(doctor_report("c", server_url=health_server(503)), "vllm server")
    assert sick["status"] == "fail" and "does not answer" in sick["summary"] and "invoke serve" in sick["action"]
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = named(doctor_report("c", server_url=f"http://127.0.0.1:{port}"), "vllm server")
    assert down["status"] == "fail"


# --- the last smoke test and TRL's range (unchanged rules) -----------------------------------------------------


def test_no_smoke_yet_warns():
    s = named(doctor_report("c"), "last smoke test")
    assert s["status"] == "warn" and "grpolab smoke" in s["action"]


def test_drift_since_last_passing_smoke():
    now = environment_fingerprint()
    old = json.loads(json.dumps(now))
    old["torch_version"] = old["packages"]["torch"] = "2.12.0"
    old["driver"] = "570.1"
    append_run(
        {"kind": "smoke", "status": "passed", "run_id": "r1", "finished_at": "2026-11-01T10:00:00Z", "fingerprint": old}
    )
    s = named(doctor_report("c"), "last smoke test")
    assert s["status"] == "warn"
    assert f"torch 2.12.0 -> {now['torch_version'] or 'absent'}" in s["details"]["drift"]
    assert f"driver 570.1 -> {now['driver'] or 'absent'}" in s["details"]["drift"]
    assert "2026-11-01" in s["summary"]

    append_run(
        {"kind": "smoke", "status": "passed", "run_id": "r2", "finished_at": "2026-11-02T10:00:00Z", "fingerprint": now}
    )
    append_run({"kind": "smoke", "status": "failed", "run_id": "r3", "fingerprint": old})
    s = named(doctor_report("c"), "last smoke test")
    assert s["status"] == "ok" and s["details"]["run_id"] == "r2" and s["details"]["drift"] == []


def declared_vllm_specifiers():
    """TRL's vllm requirement, read from its metadata with a plain regex (independent of the code under test)."""
    for line in importlib.metadata.requires("trl") or []:
        m = re.match(r"vllm\s*([^;]*);.*extra\s*==\s*['\"]vllm['\"]", line)
        if m:
            return {s.strip() for s in m.group(1).split(",") if s.strip()}
    return None


def test_trl_vllm_range_from_installed_metadata():
    try:
        trl_version = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        assert trl_vllm_range() is None and vllm_in_trl_range("0.30.0") is None
        return
    declared = declared_vllm_specifiers()
    text = trl_vllm_range()
    assert set(text.split(",")) == declared
    assert text.startswith(">=")  # lower bound first
    if trl_version == "1.16.0":  # facts.md: trl 1.16.0 declares vllm>=0.22.0,<=0.31.0
        assert text == ">=0.22.0,<=0.31.0"
    for spec in declared:
        bound = re.sub(r"^[<>=!~]+", "", spec)
        if spec.startswith((">=", "<=", "==")):
            assert vllm_in_trl_range(bound) is True
            assert vllm_in_trl_range(bound + "+cu130") is True  # local build tags do not matter
    if any(s.startswith("<=") for s in declared):
        upper = next(re.sub(r"^<=", "", s) for s in declared if s.startswith("<="))
        major, minor, *_ = upper.split(".")
        assert vllm_in_trl_range(f"{major}.{int(minor) + 2}.0") is False
    if any(s.startswith(">=") for s in declared):
        assert vllm_in_trl_range("0.0.1") is False


def test_gpu_scripts_judge_accepts_an_h200_with_a_cu130_torch_and_catches_a_wrong_item():
    """images/gpu/check_doctor.py, which the GPU script runs on a real machine, fed the report of one we lack."""
    sys.path.insert(0, str(REPO / "images" / "gpu"))
    from check_doctor import judge

    facts = {"arch": "sm_90", "arch_list": CU130.arch_list, "cuda": "13.0", "name": "NVIDIA H200", "bf16_native": True}
    good = doctor_report(ctx=context("n", CU130, H200, HostFacts(nvidia_driver="580.95.05", driver_cuda="13.0")))
    good["fingerprint"].update(
        device_type="cuda", device_arch="sm_90", torch_cuda="13.0"
    )  # what the fingerprint reads there
    assert judge(good, facts) == []
    card = next(i for i in good["items"] if i["name"] == "card")
    card["details"]["dtype"]["dtype"] = "float16"  # a card item that moved an Ampere-or-newer card off bfloat16
    assert [p for p in judge(good, facts) if p.startswith("card: expected sm_90 in bfloat16")]
    old_driver = doctor_report(ctx=context("n", CU130, H200, HostFacts(nvidia_driver="550.54", driver_cuda="12.4")))
    old_driver["fingerprint"].update(device_type="cuda", device_arch="sm_90", torch_cuda="13.0")
    assert [p for p in judge(old_driver, facts) if p.startswith("gpu driver: expected ok")]


def test_gpu_script_refuses_without_a_gpu(tmp_path):
    if environment_fingerprint()["device_type"] == "cuda":
        pytest.skip("this machine has a GPU: the script runs for real")
    done = subprocess.run(
        ["bash", str(REPO / "images" / "gpu" / "check_doctor.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "OUT": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 1 and "FAIL  no CUDA GPU visible to torch" in done.stdout


def test_memory_nearly_exhausted():
    low = named(valid(doctor_report(ctx=context(host=HostFacts(mem_total_gb=128.0, mem_available_gb=6.0)))), "memory")
    assert low["status"] == "warn" and "under a tenth is free" in low["summary"]
    assert (
        named(doctor_report(ctx=context(host=HostFacts(mem_total_gb=128.0, mem_available_gb=90.0))), "memory")["status"]
        == "ok"
    )


def test_torch_item_verdicts():
    broken = TorchBuild(
        "2.13.0+cu130", "cuda", cuda="13.0", import_error="OSError: libcudart.so.13: cannot open shared object file"
    )
    assert named(valid(doctor_report(ctx=context("n", broken))), "torch")["status"] == "fail"
    assert (
        "needs a hip build"
        in named(doctor_report(ctx=context("x", CU130, Devices(), HostFacts(**AMD))), "torch")["summary"]
    )
    assert named(doctor_report(ctx=context("c", TorchBuild())), "torch")["summary"] == "torch is not installed"


def test_missing_core_packages_fail():
    report = valid(doctor_report(ctx=context(packages={"trl": None, "peft": None})))
    assert named(report, "packages")["status"] == "fail" and "missing trl, peft" in named(report, "packages")["summary"]


def test_vllm_outside_trls_range_and_a_broken_install():
    if trl_vllm_range() is None:
        pytest.skip("TRL is not installed: no range to judge against")
    outside = named(valid(doctor_report(ctx=context(rollout="inprocess", packages={"vllm": "0.99.0"}))), "vllm")
    assert outside["status"] == "warn" and f"outside TRL's declared range {trl_vllm_range()}" in outside["summary"]
    assert (
        named(doctor_report(ctx=context(rollout="vllm-colocate", packages={"vllm": "0.99.0"})), "vllm")["status"]
        == "fail"
    )
    if importlib.util.find_spec("vllm") is None:
        broken = named(doctor_report(ctx=context(packages={"vllm": "0.30.0"})), "vllm")
        assert broken["status"] == "fail" and "its module is missing" in broken["summary"]


def test_llamacpp_missing_from_a_track_whose_lock_has_it():
    missing = named(valid(doctor_report(ctx=context("c", packages={"llama_cpp_python": None}))), "llama.cpp")
    assert missing["status"] == "warn" and "re-sync" in missing["action"]
    assert named(doctor_report(ctx=context("n", packages={"llama_cpp_python": None})), "llama.cpp")["status"] == "ok"


def test_disk_thresholds_on_this_machines_real_free_space(monkeypatch):
    import grpolab.environment.doctor_setup as doctor_setup

    monkeypatch.setattr(doctor_setup, "DISK_WARN_GB", 1e9)  # more than any disk: the real free space reads as low
    assert named(valid(doctor_report("c")), "disk")["status"] == "warn"
    monkeypatch.setattr(doctor_setup, "DISK_FAIL_GB", 1e9)
    disk = named(doctor_report("c"), "disk")
    assert disk["status"] == "fail" and "HF_HOME" in disk["action"]


def test_gpu_driver_on_an_amd_machine():
    amd = named(
        valid(doctor_report(ctx=context("x", THEROCK, STRIX, HostFacts(**AMD, amdgpu_version="6.16.6")))), "gpu driver"
    )
    assert amd["status"] == "ok" and amd["summary"] == "amdgpu 6.16.6 for gfx1151; torch's HIP 7.11.0"


def image_exists(tag: str) -> bool:
    import shutil

    return (
        shutil.which("docker") is not None
        and subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60).returncode == 0
    )


@pytest.mark.docker
@pytest.mark.skipif(not image_exists("grpolab:c"), reason="no grpolab:c image here (invoke build --track c makes it)")
def test_compose_doctor_on_track_c_prints_the_short_form(tmp_path):
    """`docker compose run doctor` in the track c image, with this checkout's package mounted over the image's."""
    env_file = tmp_path / "env"
    env_file.write_text("COMPOSE_FILE=compose/base.yaml\nLAB_IMAGE=grpolab:c\nLAB_UID=1000\nLAB_GID=1000\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "LAB_", "HF_", "GRPOLAB_", "VLLM_"))}

    def compose_run(*args):
        cmd = [
            "docker",
            "compose",
            "--env-file",
            str(env_file),
            "run",
            "--rm",
            "-T",
            "-v",
            f"{REPO / 'entrypoint'}:/opt/grpolab/entrypoint:ro",
            *args,
        ]
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=clean, timeout=300)

    short = compose_run("doctor")
    assert short.returncode == 0, short.stderr
    as_json = compose_run("doctor", "doctor", "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = valid(json.loads(as_json.stdout))
    lines = short.stdout.splitlines()
    assert lines[0].startswith("grpolab doctor: track c") and report["track"] == "c"
    assert len([line for line in lines if re.match(r"  \[(ok  |warn|FAIL)\] ", line)]) == len(report["items"])
    assert named(report, "device")["status"] == "ok" and "as track c expects" in named(report, "device")["summary"]


# --- the image's kernels table (lockfiles/<track>.kernels.json) for the GPU torch sees ----------------------
GB10 = Devices("cuda", 1, ["NVIDIA GB10"], "sm_121", [128.0], 100.0)
GTX_1080 = Devices("cuda", 1, ["NVIDIA GeForce GTX 1080"], "sm_61", [8.0], 7.5)


def test_kernels_item_names_the_library_that_only_jits_on_gb10():
    report = valid(
        doctor_report(
            ctx=context(
                "s", CU130, GB10, HostFacts(nvidia_driver="580.95.05", driver_cuda="13.0"), rollout="vllm-colocate"
            )
        )
    )
    kernels = named(report, "kernels")
    assert (
        kernels["status"] == "warn"
        and "only JIT-compile on GB10, DGX Spark (compute 12.1) (slow first run)" in kernels["summary"]
    )
    assert any(
        "_vllm_fa2_C.abi3.so (vllm 0.31.0) has no machine code for sm_121" in line
        for line in kernels["details"]["libraries"]
    )


def test_kernels_item_fails_on_a_gpu_the_image_has_no_code_for():
    report = valid(
        doctor_report(
            ctx=context(
                "n", CU130, GTX_1080, HostFacts(nvidia_driver="580.95.05", driver_cuda="13.0"), rollout="vllm-colocate"
            )
        )
    )
    kernels = named(report, "kernels")
    assert kernels["status"] == "fail" and "have no code for GTX 10xx, Pascal (compute 6.1)" in kernels["summary"]
    assert (
        "torch/lib/libtorch_cuda.so (torch 2.13.0) has no code for sm_61: the run fails when it launches one of its "
        "kernels"
        in kernels["details"]["libraries"]
    )


def test_driver_item_gives_the_tables_driver_minimum():
    report = valid(doctor_report(ctx=context("n", CU130, H200, HostFacts(nvidia_driver="575.51.03", driver_cuda=None))))
    driver = named(report, "gpu driver")
    assert (
        driver["status"] == "fail"
        and "older than 580, the oldest that runs this image's CUDA 13 libraries" in driver["summary"]
    )


def test_packages_the_image_leaves_out_are_not_drift_and_the_llamacpp_path_says_how_to_get_them(monkeypatch, tmp_path):
    """The track's image leaves llama-cpp-python out (GRPOLAB_NOT_INSTALLED): not drift, and the llama.cpp item names
    the
    command that builds the image with it, failing only when the run asks for that path."""
    lock = tmp_path / "c.txt"
    installed = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions() if d.metadata["Name"]}
    lock.write_text("".join(f"{name}=={version}\n" for name, version in installed.items()) + "left-out-package==1.0\n")
    monkeypatch.setenv("GRPOLAB_LOCK_FILE", str(lock))
    monkeypatch.setenv("GRPOLAB_NOT_INSTALLED", "left-out-package")
    drift = named(valid(doctor_report(ctx=context("c"))), "lock drift")
    assert drift["status"] == "ok" and "left out of this image on purpose: left-out-package" in drift["summary"]
    monkeypatch.delenv("GRPOLAB_NOT_INSTALLED")
    drift = named(doctor_report(ctx=context("c")), "lock drift")
    assert drift["status"] == "warn" and "left-out-package missing" in drift["summary"]

    monkeypatch.setenv("GRPOLAB_NOT_INSTALLED", "llama-cpp-python")
    left_out = named(valid(doctor_report(ctx=context("c", packages={"llama_cpp_python": None}))), "llama.cpp")
    assert left_out["status"] == "ok" and "`invoke up --rollout llamacpp`" in left_out["action"]
    asked = named(doctor_report(ctx=context("c", rollout="llamacpp", packages={"llama_cpp_python": None})), "llama.cpp")
    assert asked["status"] == "fail" and "`invoke up --rollout llamacpp`" in asked["action"]


def test_the_compilers_the_installed_libraries_run_at_first_use(tmp_path, monkeypatch):
    """Triton compiles its driver in C, vLLM's CPU build its sampler in C++ through inductor: where they are installed,
    the doctor names the compiler each finds, and fails in words where there is none (the images keep them)."""
    from types import SimpleNamespace

    from grpolab.environment.doctor_machine import compilers_item

    def judged(**packages):
        vllm_build = "cpu" if packages.get("vllm") else None
        return compilers_item(SimpleNamespace(fingerprint={"packages": packages, "vllm_build": vllm_build}))

    assert judged(torch="2.15.0") is None  # track c: no Triton, no vLLM
    found = judged(triton="3.7.1", vllm="0.31.0")
    assert found["status"] == "ok" and set(found["details"]["compilers"]) == {"C", "C++"}
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine without compilers, as the images were
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    missing = judged(triton="3.7.1", vllm="0.31.0")
    assert missing["status"] == "fail" and "Triton compiles C at first use and finds no C compiler (gcc, clang)" in (
        missing["summary"]) and "finds no C++ compiler (g++, clang++)" in missing["summary"]
