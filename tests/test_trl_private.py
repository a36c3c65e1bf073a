"""TRL's private names the lab relies on (grpolab/run/trl_private.py), checked against the installed TRL: the locked
one, in every venv and image that runs these tests. A TRL upgrade that renames, removes or re-signs one of them
fails here naming it and the TRL version it was read from, not as a silently wrong time split or sync check."""

import ast
import inspect
import re
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")  # the host's test venv has no TRL; every lab venv and image does

from trl import GRPOTrainer  # noqa: E402
from trl.generation.vllm_generation import VLLMGeneration  # noqa: E402
from trl.trainer import grpo_trainer  # noqa: E402

from grpolab.run import trl_private  # noqa: E402
from grpolab.run.trl_private import (  # noqa: E402
    CALLED_BY,
    OVERRIDDEN_METHODS,
    READ_ATTRIBUTES,
    TRL_VERSION_READ,
    TimedGRPOTrainer,
    logged_train_metrics,
)

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "entrypoint" / "grpolab"
READ_FROM = f"read from TRL {TRL_VERSION_READ} in grpolab/run/trl_private.py; TRL {trl.__version__} is installed"
# Python's own class attributes, on every class: not overrides of TRL's.
CLASS_BOOKKEEPING = {"__module__", "__qualname__", "__doc__", "__firstlineno__", "__static_attributes__", "__dict__",
                     "__weakref__", "__annotations__"}


def test_every_track_locks_the_trl_version_the_private_names_were_read_from():
    pins = {path.name: re.search(r"^trl==([^\s\\]+)", path.read_text(), re.MULTILINE)
            for path in sorted((REPO / "lockfiles").glob("*.txt"))}
    others = {name: pin.group(1) for name, pin in pins.items() if pin and pin.group(1) != TRL_VERSION_READ}
    assert not others, (
        f"{others} lock another TRL than grpolab/run/trl_private.py was read from ({TRL_VERSION_READ}): read its "
        "private names again from that TRL, then update TRL_VERSION_READ and the table")


@pytest.mark.parametrize("name", sorted(OVERRIDDEN_METHODS))
def test_each_overridden_method_is_on_grpotrainer_with_the_recorded_parameters(name):
    method = getattr(GRPOTrainer, name, None)
    assert callable(method), f"GRPOTrainer.{name} is gone, which TimedGRPOTrainer overrides ({READ_FROM})"
    parameters = tuple(inspect.signature(method).parameters)
    assert parameters == OVERRIDDEN_METHODS[name], (
        f"GRPOTrainer.{name}'s parameters changed: {parameters}, recorded {OVERRIDDEN_METHODS[name]} ({READ_FROM})")


@pytest.mark.parametrize("name", sorted(CALLED_BY))
def test_trl_still_calls_each_overridden_method_where_it_was_read(name):
    caller = getattr(GRPOTrainer, CALLED_BY[name], None)
    assert callable(caller), f"GRPOTrainer.{CALLED_BY[name]} is gone, from which TRL called {name} ({READ_FROM})"
    assert f"self.{name}(" in inspect.getsource(caller), (
        f"GRPOTrainer.{CALLED_BY[name]} no longer calls self.{name}(: the lab's override would count nothing "
        f"({READ_FROM})")


@pytest.mark.parametrize("name", sorted(READ_ATTRIBUTES))
def test_each_private_attribute_is_still_set_and_filled_where_the_lab_reads_it(name):
    source = inspect.getsource(grpo_trainer)
    missing = [line for line in READ_ATTRIBUTES[name] if line not in source]
    assert not missing, (
        f"GRPOTrainer.{name} is no longer set or filled as the lab reads it: not found {missing} ({READ_FROM})")


def test_the_subclass_overrides_only_what_the_table_records():
    overriding = {name for name in vars(TimedGRPOTrainer)
                  if name not in CLASS_BOOKKEEPING and hasattr(GRPOTrainer, name)}
    assert overriding == set(OVERRIDDEN_METHODS), (
        f"TimedGRPOTrainer overrides {sorted(overriding)} of GRPOTrainer; the table records "
        f"{sorted(OVERRIDDEN_METHODS)} ({READ_FROM})")


def test_trl_still_syncs_vllm_through_its_weight_sync_client_which_the_sync_ledger_follows():
    # rollouts/vllm_sync.py learns which step's weights vLLM holds by wrapping this method, not from _last_loaded_step.
    source = inspect.getsource(grpo_trainer)
    assert callable(getattr(VLLMGeneration, "sync_weights", None)), f"VLLMGeneration.sync_weights is gone ({READ_FROM})"
    assert "self.vllm_generation = VLLMGeneration(" in source, f"GRPOTrainer.vllm_generation moved ({READ_FROM})"
    assert "self.vllm_generation.sync_weights()" in source, (
        f"GRPOTrainer no longer syncs vLLM through vllm_generation.sync_weights() ({READ_FROM})")


def private_names_read(path: Path, private_names: set[str]) -> list[str]:
    """`receiver.name` in a file, for each of TRL's private names whose receiver is not the class's own `self`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        own = isinstance(getattr(node, "value", None), ast.Name) and node.value.id == "self"
        if isinstance(node, ast.Attribute) and node.attr in private_names and not own:
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: .{node.attr}")
    return found


# Known, and the bench's to move: its generation timer and phase marker wrap trainer._generate on an instance.
BENCH_WRAPS_GENERATE = {"bench/plain_trl.py", "bench/memory_cases.py"}


def test_no_lab_module_but_trl_private_reads_trls_private_names():
    private_names = set(OVERRIDDEN_METHODS) | set(READ_ATTRIBUTES) | {"_last_loaded_step"}
    reads = [read for path in sorted(PACKAGE.rglob("*.py")) if path != Path(trl_private.__file__)
             for read in private_names_read(path, private_names)
             if not (read.split(":")[0] in BENCH_WRAPS_GENERATE and read.endswith("._generate"))]
    assert reads == [], f"TRL's private names read outside grpolab/run/trl_private.py: {reads}"


# PEFT reads transformers' deprecated is_gradient_checkpointing (run/training.py filters it the same way for runs).
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_real_step_calls_the_overrides_and_on_step_end_still_sees_the_steps_own_metrics(tiny_model_path, tmp_path):
    """Two in-process steps of the tiny model: TRL calls the overridden _generate, and at on_step_end its metrics
    hold this step's values (the sync ledger reads them there; GRPOTrainer.log clears them only afterwards)."""
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig

    from grpolab.task.problems import arithmetic_splits

    seen = []

    class AtStepEnd(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            seen.append(len(logged_train_metrics(trainer).get("reward", [])))

    # transformers 5.24+ names it activation_checkpointing (the old name warns); track cv's 5.17 has only the old one.
    fields = GRPOConfig.__dataclass_fields__
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      logging_steps=1, disable_tqdm=True, seed=0, **{checkpointing: False})
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_path),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    trainer = TimedGRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)], args=args,
                               train_dataset=Dataset.from_list(arithmetic_splits()["train"][:8]),
                               processing_class=AutoTokenizer.from_pretrained(tiny_model_path), callbacks=[AtStepEnd()])
    trainer.train()
    assert trainer.generation_seconds > 0, f"TRL did not call TimedGRPOTrainer._generate ({READ_FROM})"
    assert seen == [1, 1], (
        f"at on_step_end TRL's metrics held {seen} reward values per step, not the step's own one ({READ_FROM})")
