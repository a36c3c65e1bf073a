"""The lab handed to verl: the bundle's contents (checked here, in our environment), and the bundle checked
against verl's own code in verl's own environment (.venvs/verl-check, made by images/verl-check.sh).

The second half shells out to the bundle's check.py with the verl environment's Python: Hydra composes our
overrides onto verl's installed ppo_trainer.yaml, verl validates the config, verl's RLHFDataset reads our
parquet with the tiny model's tokenizer, and verl's reward loader scores completions with our reward.py.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from grpolab.task import rewards
from grpolab.export import verl
from grpolab.export.verl import export_bundle
from grpolab.export.verl_mapping import MAPPING, NOT_MAPPED, VERL_VERSION, ExportRefused, check_covered, format_override
from grpolab.settings.lab_settings import LabSettings

REPO = Path(__file__).resolve().parents[1]
HUB_MODEL = "Qwen/Qwen3-0.6B"  # exported by name, never downloaded: the export only writes it into the overrides
COMPLETIONS = [
    "<answer>7</answer>",
    "7",
    "<answer>8</answer>",
    "<answer>7</answer> and <answer>7</answer>",
    "",
    "I do not know.",
]


def lab(**changes) -> LabSettings:
    """Small lab settings that verl can take (bfloat16: verl's FSDP trainer has no float32 compute)."""
    values = dict(
        model=HUB_MODEL,
        dtype="bfloat16",
        train_size=16,
        heldout_size=8,
        max_steps=3,
        num_generations=4,
        per_device_train_batch_size=8,
        max_prompt_length=64,
        max_completion_length=16,
        rollout="vllm-colocate",
    )
    values.update(changes)
    return LabSettings(**values)


def overrides(bundle: Path) -> dict[str, str]:
    lines = [line for line in (bundle / "overrides.txt").read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def expected_score(completion: str, answer: str, weights: dict[str, float]) -> float:
    parts = {
        "numeric_reward": rewards.numeric_reward([completion], answer=[answer])[0],
        "format_reward": rewards.format_reward([completion])[0],
    }
    return sum(weight * parts[name] for name, weight in weights.items())


# ---------------------------------------------------------------------------------------------------------
# The mapping and what the export refuses


def test_every_lab_setting_is_mapped_or_explained():
    check_covered()
    assert not {row.setting for row in MAPPING} & set(NOT_MAPPED)


def test_unknown_engine_names_the_supported_ones(tmp_path):
    with pytest.raises(ExportRefused, match="unknown engine 'openrlhf'.*verl"):
        export_bundle(lab(), tmp_path / "bundle", engine="openrlhf")
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"rollout": "llamacpp"}, "rollout 'llamacpp'"),
        ({"rollout": "vllm-server"}, "rollout 'vllm-server'"),
        ({"dtype": "float32"}, "dtype 'float32'"),
        ({"lora_dropout": 0.05}, "lora_dropout"),
        ({"temperature": 0.0}, "temperature"),
        ({"eval_max_new_tokens": 7}, "eval_max_new_tokens"),
        (
            {"reward_weights": {"numeric_reward": 1.0, "rewards_for_tests:length_reward": 0.5}},
            "rewards_for_tests:length_reward",
        ),
    ],
)
def test_refuses_settings_verl_cannot_express(tmp_path, changes, named):
    with pytest.raises(ExportRefused) as refused:
        export_bundle(lab(**changes), tmp_path / "bundle")
    assert named in str(refused.value)
    assert not (tmp_path / "bundle").exists(), "a refused export must write nothing"


def test_every_refusal_is_listed_at_once(tmp_path):
    with pytest.raises(ExportRefused) as refused:
        export_bundle(lab(rollout="llamacpp", dtype="float32", lora_dropout=0.1), tmp_path / "bundle")
    assert all(name in str(refused.value) for name in ("llamacpp", "float32", "lora_dropout"))


def test_dataset_without_answer_column_is_refused(tmp_path, monkeypatch):
    def no_answers(name, train_size, heldout_size, seed=0):
        rows = {"prompt": [[{"role": "user", "content": "What is 1 plus 2?"}]], "solution": ["3"]}
        return datasets.Dataset.from_dict(rows), datasets.Dataset.from_dict(rows)

    monkeypatch.setattr(verl, "load_lab_datasets", no_answers)  # a dataset of the user's, without the answer column
    with pytest.raises(ExportRefused, match="'answer'"):
        export_bundle(lab(), tmp_path / "bundle")


def test_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "old.txt").write_text("x")
    with pytest.raises(ExportRefused, match="not empty"):
        export_bundle(lab(), tmp_path / "bundle")


# ---------------------------------------------------------------------------------------------------------
# The bundle


@pytest.fixture(scope="module")
def hub_bundle(tmp_path_factory) -> Path:
    return export_bundle(lab(), tmp_path_factory.mktemp("verl") / "bundle")


def test_bundle_has_every_part(hub_bundle):
    for name in ("README.md", "overrides.txt", "run.sh", "ray.sh", "reward.py", "check.py", "settings.json",
                 "data/train.parquet", "data/heldout.parquet"):
        assert (hub_bundle / name).is_file(), name
    assert json.loads((hub_bundle / "settings.json").read_text())["settings"]["lora_rank"] == 16


def test_parquet_is_verl_rl_data(hub_bundle):
    from grpolab.task.problems import load_lab_datasets

    settings = lab()
    train, heldout = load_lab_datasets(settings.dataset, settings.train_size, settings.heldout_size, settings.seed)
    for split, source in (("train", train), ("heldout", heldout)):
        rows = pq.read_table(hub_bundle / f"data/{split}.parquet").to_pylist()
        assert len(rows) == len(source)
        for row, lab_row in zip(rows, source):
            assert row["prompt"] == lab_row["prompt"]  # the chat list, as the lab's trainer sees it
            assert row["data_source"] == "arithmetic"
            assert row["reward_model"] == {"style": "rule", "ground_truth": lab_row["answer"]}
            assert row["extra_info"]["split"] == split


def test_overrides_map_the_lab(hub_bundle):
    o = overrides(hub_bundle)
    assert o["algorithm.adv_estimator"] == "grpo"
    # beta 0: no KL anywhere, so verl loads no reference model
    assert o["algorithm.use_kl_in_reward"] == "false" and o["actor_rollout_ref.actor.use_kl_loss"] == "false"
    assert "actor_rollout_ref.actor.kl_loss_coef" not in o
    assert o["actor_rollout_ref.model.path"] == HUB_MODEL
    assert (o["actor_rollout_ref.model.lora_rank"], o["actor_rollout_ref.model.lora_alpha"]) == ("16", "32")
    assert o["actor_rollout_ref.model.target_modules"] == "all-linear"
    assert o["actor_rollout_ref.rollout.name"] == "vllm" and o["actor_rollout_ref.rollout.load_format"] == "safetensors"
    assert o["actor_rollout_ref.rollout.n"] == "4"
    assert o["data.max_response_length"] == "16" and o["data.max_prompt_length"] == "64"
    assert o["trainer.total_training_steps"] == "3"
    assert o["actor_rollout_ref.actor.optim.lr"] == "1e-05"
    assert o["data.train_batch_size"] == "2"  # 8 completions per GPU per step = 2 prompts x 4 rollouts
    assert o["trainer.v1.trainer_mode"] == "sync"  # the async modes never deliver the adapter (verl#7495)
    # since verl 0.9 only reward.custom_reward_function counts
    assert o["reward.custom_reward_function.path"] == "@BUNDLE@/reward.py"
    assert o["reward.custom_reward_function.name"] == "compute_score"
    assert not any(key.startswith("custom_reward_function") for key in o)
    assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == ("1", "1")


def test_override_values_use_hydra_grammar():
    assert format_override("k", True) == "k=true" and format_override("k", 1e-05) == "k=1e-05"
    assert format_override("k", ["q_proj", "v_proj"]) == "k=[q_proj,v_proj]"
    assert format_override("k", "Qwen/Qwen3-1.7B") == "k=Qwen/Qwen3-1.7B"
    assert format_override("k", "a b,c") == "k='a b,c'"  # quoted: Hydra would split or reject it bare


def test_beta_and_cluster_shape(tmp_path):
    bundle = export_bundle(
        lab(beta=0.04, lora_target_modules="q_proj,v_proj"), tmp_path / "b", nodes=2, gpus_per_node=4
    )
    o = overrides(bundle)
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "true" and o["actor_rollout_ref.actor.kl_loss_coef"] == "0.04"
    assert o["algorithm.use_kl_in_reward"] == "false"
    assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == ("2", "4")
    assert o["data.train_batch_size"] == "16"  # 8 completions per GPU x 8 GPUs / 4 rollouts per prompt
    assert o["actor_rollout_ref.model.target_modules"] == "[q_proj,v_proj]"
    assert "GPUS_PER_NODE:-4" in (bundle / "ray.sh").read_text()


def test_reward_module_is_our_code_and_runs_without_grpolab(hub_bundle, tmp_path):
    text = (hub_bundle / "reward.py").read_text()
    assert inspect.getsource(rewards) in text, "reward.py must carry grpolab/task/rewards.py unchanged"
    weights = lab().reward_weights
    # -I: isolated (no PYTHONPATH, no user site, no cwd on sys.path), so grpolab cannot be imported there.
    script = textwrap.dedent(f"""
        import importlib.util, json, sys
        spec = importlib.util.spec_from_file_location("bundle_reward", {str(hub_bundle / "reward.py")!r})
        module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
        assert "grpolab" not in sys.modules
        scores = [module.compute_score("arithmetic", c, "7", extra_info={{"index": 0}}) for c in {COMPLETIONS!r}]
        print(json.dumps(scores))
    """)
    done = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True, timeout=300
    )
    results = json.loads(done.stdout)
    for completion, result in zip(COMPLETIONS, results):
        assert result["score"] == pytest.approx(expected_score(completion, "7", weights)), completion
        assert result["acc"] == rewards.numeric_reward([completion], answer=["7"])[0]
    assert [r["acc"] for r in results] == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]


def test_run_sh_passes_every_override(hub_bundle, tmp_path):
    """run.sh with a stand-in python3 that prints its arguments: every override arrives, @BUNDLE@ filled in."""
    for script in ("run.sh", "ray.sh"):
        subprocess.run(["bash", "-n", str(hub_bundle / script)], check=True, timeout=60)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(hub_bundle / "run.sh"), "trainer.logger=[console,file]"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    args = done.stdout.splitlines()
    assert args[:2] == ["-m", "verl.trainer.main_ppo"]
    expected = [f"{k}={v}".replace("@BUNDLE@", str(hub_bundle)) for k, v in overrides(hub_bundle).items()]
    assert args[2:] == expected + ["trainer.logger=[console,file]"]


def test_readme_says_what_maps_how_far_it_was_run_and_what_comes_after(hub_bundle):
    readme = (hub_bundle / "README.md").read_text()
    assert "run by verl on a CPU, not yet on a GPU" in readme
    assert "IMAGE verl-result" in readme and "verl-metrics.jsonl" in readme
    for row in MAPPING:
        assert f"`{row.setting}`" in readme
        for key in row.verl_keys:
            assert f"`{key}`" in readme
    for name in NOT_MAPPED:
        assert f"`{name}`" in readme


def test_the_cpu_runner_stays_out_of_the_bundle(hub_bundle):
    """What verl needs on a CPU (CI's proof harness, grpolab/bench/verl_cpu_proof.py: its platform, Ray's fake GPU,
    the patches) is added by the runner at run time, never written into a bundle: a cluster's run carries none of it,
    and nothing of the product imports it (tests/test_cli_light.py)."""
    cpu_only = ("verl_cpu", "grpolab-cpu", "VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_USE_EXTERNAL_MODULES",
                "num_gpus", "VLLM_CPU", "trainer.device=cpu", "num_data_storage_units", "enforce_eager")
    for path in hub_bundle.rglob("*"):
        if path.is_file() and path.suffix in (".txt", ".sh", ".py", ".md", ".json"):
            text = path.read_text()
            assert not [word for word in cpu_only if word in text], path.name
    runner = (REPO / "entrypoint" / "grpolab" / "bench" / "verl_cpu_proof.py").read_text()
    assert all(word in runner for word in ("grpolab-cpu", "VERL_PLATFORM", "num_gpus=1", "enforce_eager"))


# verl's two modules the harness imports, stood in for where verl is not installed: enough to load the harness and
# reach its refusals, which come before verl runs.
VERL_STAND_IN = textwrap.dedent("""
    import sys, types
    for name in ("verl", "verl.plugin", "verl.plugin.platform", "verl.plugin.platform.platform_base",
                 "verl.plugin.platform.platform_manager"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["verl.plugin.platform.platform_base"].PlatformBase = object
    sys.modules["verl.plugin.platform.platform_manager"].PlatformRegistry = types.SimpleNamespace(
        register=lambda platform: lambda cls: cls)
    from grpolab.bench.commands import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("argv, refusal", [
    (["--steps", "0"], "FAILED [input] --steps 0: verl trains at least 1 step"),
    (["--steps", "1", "trainer.seed=1"], "run.sh does not exist: make the bundle with `invoke export --engine verl`"),
])
def test_the_cpu_proof_refuses_before_verl_runs(tmp_path, argv, refusal):
    """CI's harness through its command, `python -m grpolab.bench verl-cpu`, verl stood in: a bad --steps or a folder
    that is no bundle is one [input] line and exit status 2, and nothing is written into the folder."""
    pytest.importorskip("torch")
    pytest.importorskip("psutil")
    proc = subprocess.run([sys.executable, "-c", VERL_STAND_IN, "verl-cpu", str(tmp_path), *argv], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO / "entrypoint")}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and refusal in proc.stderr, proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_tiny_model_travels_in_the_bundle(tiny_model_path, tmp_path):
    bundle = export_bundle(lab(model="tiny"), tmp_path / "bundle")
    assert overrides(bundle)["actor_rollout_ref.model.path"] == "@BUNDLE@/model"
    assert (bundle / "model" / "config.json").is_file() and (bundle / "model" / "tokenizer.json").is_file()


# ---------------------------------------------------------------------------------------------------------
# Against verl's own code, in its own environment


@pytest.fixture(scope="session")
def verl_python() -> Path:
    """.venvs/verl-check's Python, made (or found up to date) by images/verl-check.sh."""
    venv = Path(os.environ.get("GRPOLAB_VERL_VENV", REPO / ".venvs" / "verl-check"))
    done = subprocess.run(
        ["bash", str(REPO / "images" / "verl-check.sh")], capture_output=True, text=True, check=False, timeout=3600
    )
    if done.returncode != 0:
        pytest.skip(
            "the verl check environment could not be created (images/verl-check.sh): "
            f"{(done.stderr or done.stdout)[-800:]}"
        )
    return venv / "bin" / "python"


def run_check(verl_python: Path, bundle: Path, *args: str) -> tuple[int, dict, str]:
    done = subprocess.run(
        [str(verl_python), str(bundle / "check.py"), *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false"},
    )
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines else {}
    return done.returncode, report, done.stderr[-3000:]


@pytest.mark.slow
def test_bundle_passes_verl_own_checks(verl_python, tiny_model_path, tmp_path):
    settings = lab(model="tiny")
    bundle = export_bundle(settings, tmp_path / "bundle")
    status, report, stderr = run_check(verl_python, bundle, "--samples", "3")
    assert status == 0 and report["passed"], f"{report.get('error')}\n{stderr}"
    assert report["verl"] == VERL_VERSION
    # beta 0: no reference model; verl's model config reads the tiny model that travels in the bundle
    assert report["validate"] == {
        "reference_model": False,
        "critic": False,
        "model_architectures": ["Qwen3ForCausalLM"],
    }
    assert report["rows"] == {"train": settings.train_size, "heldout": settings.heldout_size}  # no prompt dropped
    assert report["first_prompt"].startswith("<|im_start|>user\nWhat is ")  # the tiny model's chat template
    assert report["reward_function"] == f"{bundle}/reward.py:compute_score"
    assert len(report["scores"]) == 3 * 4
    for scored in report["scores"]:
        completion, answer = scored["completion"], scored["ground_truth"]
        assert scored["score"] == pytest.approx(expected_score(completion, answer, settings.reward_weights)), scored
        assert scored["acc"] == rewards.numeric_reward([completion], answer=[answer])[0]
    assert [s["acc"] for s in report["scores"][:4]] == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.slow
def test_kl_bundle_for_two_nodes_passes_verl_validation(verl_python, tiny_model_path, tmp_path):
    bundle = export_bundle(lab(model="tiny", beta=0.04), tmp_path / "bundle", nodes=2, gpus_per_node=4)
    status, report, stderr = run_check(verl_python, bundle, "--samples", "1")
    assert status == 0 and report["passed"], f"{report.get('error')}\n{stderr}"
    assert report["validate"]["reference_model"] is True  # beta > 0: verl loads the reference model


@pytest.mark.slow
def test_a_misspelt_key_fails_to_compose(verl_python, hub_bundle):
    status, report, _ = run_check(verl_python, hub_bundle, "--override", "actor_rollout_ref.rollout.nn=8")
    assert status == 3 and report["failed"] == "compose"
    assert "actor_rollout_ref.rollout.nn" in report["error"]


def test_export_command_line_refuses_and_writes(tmp_path):
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "entrypoint")}
    refused = subprocess.run(
        [sys.executable, "-m", "grpolab", "export", "--engine", "openrlhf", "--out", str(tmp_path / "x")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2 and "the supported engines are verl" in refused.stderr
    assert not (tmp_path / "x").exists()
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpolab",
            "export",
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--out",
            str(tmp_path / "b"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    overrides = (tmp_path / "b" / "overrides.txt").read_text()
    assert "trainer.nnodes=2" in overrides and "trainer.n_gpus_per_node=4" in overrides
    (tmp_path / "a-file").write_text("")  # a bundle folder that cannot be made, even by root
    unwritable = subprocess.run(
        [sys.executable, "-m", "grpolab", "export", "--out", str(tmp_path / "a-file" / "bundle")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert unwritable.returncode == 15 and "Traceback" not in unwritable.stderr, unwritable.stderr
    assert (
        f"FAILED [runlog] could not write the verl bundle at {tmp_path / 'a-file' / 'bundle'}: Not a directory"
        in unwritable.stderr
    )


def cluster_image_current() -> str:
    """Why the cluster image can't be used here ("" when it can): built by `invoke build --track cluster`."""
    sys.path.insert(0, str(REPO))
    from grpolab.common.tracks import get_track

    from hostlab.host import engine
    from hostlab.locks.lockfile import lock_path, lock_sha256

    if not engine.running():
        return "no Docker engine reachable"
    image = engine.image_or_none("grpolab:cluster")
    if image is None:
        return "grpolab:cluster not built here (`invoke build --track cluster`, about 10 GB)"
    if image.labels.get("io.grpolab.lock.sha256") != lock_sha256(lock_path(get_track("cluster"))):
        return "grpolab:cluster was built from an older lock"
    return ""


@pytest.mark.slow
@pytest.mark.docker
def test_bundle_passes_verl_own_checks_in_the_cluster_image(tiny_model_path, tmp_path):
    # The image the cluster runs, not only the check venv: same verl, its own Python (3.13) and pins, no network.
    why = cluster_image_current()
    if why:
        pytest.skip(why)
    bundle = export_bundle(lab(model="tiny"), tmp_path / "bundle")
    for path in [tmp_path, *tmp_path.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)  # the image runs as uid 1000
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{bundle}:/bundle", "-e", "VLLM_LOGGING_LEVEL=ERROR",
         "grpolab:cluster", "shell", "-c", "python /bundle/check.py --samples 2"],
        capture_output=True, text=True, timeout=900, check=False,
    )
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines else {}
    assert done.returncode == 0 and report.get("passed"), f"{report.get('error')}\n{done.stderr[-3000:]}"
    assert report["verl"] == VERL_VERSION and report["reward_function"] == "/bundle/reward.py:compute_score"
    assert report["validate"]["model_architectures"] == ["Qwen3ForCausalLM"]
