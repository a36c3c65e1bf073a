"""Check a verl bundle offline against the installed verl: no GPU, no Ray, no network.

The export copies this file into every bundle as check.py. Run it with the Python that has verl:

    python3 check.py [--tokenizer DIR] [--override key=value ...] [--samples N]

It does what verl's own launch does before any GPU is touched, with verl's own code:
  1. compose overrides.txt onto verl's installed ppo_trainer.yaml with Hydra (a misspelt key fails here);
  2. run verl's config validation (verl.utils.config.validate_config, as main_ppo does), and, for a model
     on local disk, build verl's model config from it (its config.json and tokenizer, not the weights);
  3. read data/*.parquet through verl's dataset class (create_rl_dataset -> RLHFDataset) with the model's
     tokenizer, dropping over-long prompts as the run would;
  4. load reward.py through verl's reward loader (load_reward_manager) and score a few completions of
     held-out problems through the reward manager, as the trainer does with decoded responses.
It prints one JSON object on its last line. Exit status: 0 all passed, 3 the overrides do not compose,
4 verl's validation refused them, 5 the data, 6 the reward. This file imports nothing from grpolab.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

BUNDLE = Path(__file__).resolve().parent
PLACEHOLDER = "@BUNDLE@"


class CheckFailed(Exception):
    def __init__(self, status: int, step: str, message: str):
        super().__init__(f"[{step}] {message}")
        self.status, self.step = status, step


def read_overrides(bundle: Path = BUNDLE) -> list[str]:
    lines = (bundle / "overrides.txt").read_text().splitlines()
    return [line.replace(PLACEHOLDER, str(bundle)) for line in lines if line.strip() and not line.startswith("#")]


def compose_config(overrides: list[str]):
    """verl's ppo_trainer.yaml with our overrides, composed by Hydra as `main_ppo` would."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(config_name="ppo_trainer", overrides=overrides)
    except Exception as error:  # hydra.errors.ConfigCompositionException, OverrideParseException
        raise CheckFailed(3, "compose", f"{type(error).__name__}: {error}") from error


def validate(config) -> dict:
    """verl's own checks of a composed config: validate_config, then its typed config sections."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    try:
        auto_set_device(config)
        use_ref, use_critic = need_reference_policy(config), need_critic(config)
        validate_config(config=config, use_reference_policy=use_ref, use_critic=use_critic)
        # Sections verl's trainer and rollout workers turn into dataclasses; a bad value (a rollout name) fails here.
        for section in ("algorithm", "actor_rollout_ref.rollout"):
            node = config
            for part in section.split("."):
                node = node[part]
            omega_conf_to_dataclass(node)
        # A model on local disk (the tiny model travels in the bundle): verl's own model config reads its
        # config and tokenizer (not the weights), as every worker does first.
        model_config = None
        if Path(os.path.expanduser(str(config.actor_rollout_ref.model.path))).is_dir():
            from verl.workers.config import HFModelConfig

            model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model, dataclass_type=HFModelConfig)
    except Exception as error:
        raise CheckFailed(4, "validate", f"{type(error).__name__}: {error}") from error
    report = {"reference_model": bool(use_ref), "critic": bool(use_critic)}
    if model_config is not None:
        report["model_architectures"] = list(model_config.architectures)
    return report


def load_tokenizer(config, tokenizer_dir: str | None):
    from verl.utils import hf_tokenizer

    path = tokenizer_dir or config.actor_rollout_ref.model.path
    if not Path(os.path.expanduser(str(path))).exists() and tokenizer_dir is None:
        raise CheckFailed(5, "data", f"the model {path!r} is not a local folder: pass --tokenizer DIR (its tokenizer)")
    return hf_tokenizer(str(path), trust_remote_code=config.data.trust_remote_code)


def read_datasets(config, tokenizer) -> dict:
    """Both parquet files through verl's dataset class, as the trainer builds them."""
    from verl.trainer.ppo.utils import create_rl_dataset

    out = {}
    try:
        for split, files, is_train in (
            ("train", config.data.train_files, True),
            ("heldout", config.data.val_files, False),
        ):
            dataset = create_rl_dataset(files, config.data, tokenizer, None, is_train=is_train)
            if len(dataset) == 0:
                raise ValueError(f"{files}: no rows left (all prompts longer than data.max_prompt_length?)")
            item = dataset[0]
            for key in ("raw_prompt", "data_source", "reward_model"):
                if key not in item:
                    raise ValueError(f"{files}: rows have no {key!r}")
            if not item["reward_model"].get("ground_truth"):
                raise ValueError(f"{files}: reward_model.ground_truth is empty")
            first_prompt = tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False)
            out[split] = {"rows": len(dataset), "first_prompt": first_prompt, "dataset": dataset}
    except CheckFailed:
        raise
    except Exception as error:
        raise CheckFailed(5, "data", f"{type(error).__name__}: {error}") from error
    return out


def sample_completions(ground_truth: str) -> list[str]:
    """Completions that separate the rewards: right, right without the tag, wrong, no number."""
    try:
        wrong = str(int(ground_truth) + 1)
    except ValueError:
        wrong = ground_truth + "1"
    return [f"<answer>{ground_truth}</answer>", ground_truth, f"<answer>{wrong}</answer>", "I do not know."]


def score_samples(config, tokenizer, heldout, samples: int) -> list[dict]:
    """Score completions of held-out problems through verl's reward loader and reward manager."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager

    try:
        custom = get_custom_reward_fn(config)
        if custom is None:
            raise ValueError("reward.custom_reward_function.path is not set: verl would fall back to its own scorers")
        manager = load_reward_manager(config, tokenizer)
        results = []
        for index in range(min(samples, len(heldout))):
            item = heldout[index]
            ground_truth = item["reward_model"]["ground_truth"]
            prompt_ids = tokenizer(item["raw_prompt"][-1]["content"], add_special_tokens=False)["input_ids"]
            for text in sample_completions(ground_truth):
                # As the rollout hands it over: response tokens ending in EOS, which decoding drops.
                response_ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                data = DataProto.from_dict(
                    tensors={
                        "prompts": torch.tensor([prompt_ids]),
                        "responses": torch.tensor([response_ids]),
                        "attention_mask": torch.ones(1, len(prompt_ids) + len(response_ids), dtype=torch.long),
                    },
                    non_tensors={
                        "data_source": np.array([item["data_source"]], dtype=object),
                        "reward_model": np.array([item["reward_model"]], dtype=object),
                        "extra_info": np.array([dict(item["extra_info"])], dtype=object),
                    },
                )
                scored = manager.loop.run_until_complete(manager.run_single(data))
                info = {k: float(v) for k, v in scored["reward_extra_info"].items() if isinstance(v, (int, float))}
                results.append(
                    {"ground_truth": ground_truth, "completion": text, "score": float(scored["reward_score"]), **info}
                )
    except Exception as error:
        raise CheckFailed(6, "reward", f"{type(error).__name__}: {error}") from error
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", help="a folder with the model's tokenizer (default: the model path, if local)")
    parser.add_argument("--override", action="append", default=[], help="one more Hydra override (repeatable)")
    parser.add_argument("--samples", type=int, default=3, help="held-out problems to score (4 completions each)")
    args = parser.parse_args(argv)

    report: dict = {"bundle": str(BUNDLE), "passed": False}
    try:
        import verl

        report["verl"] = getattr(verl, "__version__", "?")
        overrides = read_overrides() + args.override
        config = compose_config(overrides)
        report["overrides"] = len(overrides)
        report["validate"] = validate(config)
        tokenizer = load_tokenizer(config, args.tokenizer)
        data = read_datasets(config, tokenizer)
        report["rows"] = {split: d["rows"] for split, d in data.items()}
        report["first_prompt"] = data["heldout"]["first_prompt"]
        report["reward_function"] = (
            f"{config.reward.custom_reward_function.path}:{config.reward.custom_reward_function.name}"
        )
        report["scores"] = score_samples(config, tokenizer, data["heldout"]["dataset"], args.samples)
        report["passed"] = True
        status = 0
    except CheckFailed as failure:
        traceback.print_exc()
        report.update(failed=failure.step, error=str(failure))
        status = failure.status
    print(json.dumps(report))
    return status


if __name__ == "__main__":
    sys.exit(main())
