"""The built-in tiny model: a ~0.5 M parameter Qwen3 that adds two numbers, built offline in about a minute.

It exists so that every track, CPU-only CI included, can run real GRPO on a real (if tiny) language model
with no Hub access, and see held-out pass@1 move. `--model tiny` in the lab means this model.

The recipe, all deterministic from the seed:
1. A byte-level BPE tokenizer (~300 tokens) trained with `tokenizers` on the task's own text. Its
   pre-tokenizer is exactly Qwen2's (the regex Split, "isolated", then ByteLevel without its own regex),
   which puts every digit in a token of its own and lets llama.cpp's "qwen2" pre-tokenizer reproduce our
   tokenisation. ChatML chat template, eos `<|im_end|>`. `<answer>` and `</answer>` are single tokens but
   *ordinary* ones: special tokens are stripped when TRL decodes completions, and the format reward would
   never see them.
2. A Qwen3 from a config (hidden 128, 2 layers, 4 heads, tied embeddings).
3. A supervised warm-up on the train split of grpolab.data's arithmetic problems, stopped as soon as
   validation greedy pass@1 reaches WARMUP_TARGET_PASS_AT_1: good enough that GRPO's groups of 8 mix right
   and wrong answers (the learning signal), bad enough that GRPO has something to improve.

The result is saved with save_pretrained (safetensors) plus grpolab_tiny.json, the build's facts.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from .data import arithmetic_splits
from .paths import cache_dir

TINY_MODEL = "tiny"  # the name users pass as --model
TINY_MODEL_DIRNAME = "tiny-qwen3"
BUILD_FACTS_FILE = "grpolab_tiny.json"
RECIPE_VERSION = 3  # bump when the recipe changes (3: held-out split by unordered pair): ensure_tiny_model() then rebuilds cached copies

# Qwen2's pre-tokenizer regex, verbatim from its tokenizer.json (also llama.cpp's "qwen2" pre-tokenizer).
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ANSWER_TOKENS = ["<answer>", "</answer>"]
BPE_VOCAB_SIZE = 300
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

MODEL_CONFIG = dict(
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=256,
    tie_word_embeddings=True,
)

WARMUP_TARGET_PASS_AT_1 = 0.3
WARMUP_BATCH_SIZE = 64
WARMUP_LEARNING_RATE = 3e-3
WARMUP_MAX_STEPS = 3000
EVAL_EVERY_STEPS = 10
EVAL_ROWS = 200  # validation rows checked while training; the final numbers use the whole split
EVAL_MAX_NEW_TOKENS = 8  # <answer> + up to 3 digits + </answer> + <|im_end|>


def completion_for(answer: str) -> str:
    """The assistant turn the warm-up teaches: the answer in tags, then the end of the turn."""
    return f"<answer>{answer}</answer><|im_end|>"


def build_tokenizer(train_texts: list[str]):
    """A byte-level BPE with Qwen2's pre-tokenizer, wrapped for transformers, with a ChatML template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(train_texts, trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in ANSWER_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=MODEL_CONFIG["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )


def _encode_examples(tokenizer, rows: list[dict]) -> list[tuple[list[int], int]]:
    """(token ids of prompt + completion, number of prompt tokens) for each row."""
    examples = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion_ids = tokenizer(completion_for(row["answer"]), add_special_tokens=False)["input_ids"]
        examples.append((prompt_ids + completion_ids, len(prompt_ids)))
    return examples


def _batch(examples, pad_token_id: int):
    """Right-padded input ids, attention mask, and labels that score only the completion."""
    import torch

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (ids, n_prompt) in enumerate(examples):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        labels[i, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
    return input_ids, attention_mask, labels


def build_tiny_model(out_dir, seed: int = 0, progress=print, *, max_steps: int = WARMUP_MAX_STEPS, final_dir=None) -> Path:
    """Build the tiny model into `out_dir` on one CPU thread, whatever the machine has. `final_dir`: where it
    will be once moved there (the progress line names that, not a staging folder).

    A 0.5 M-parameter model gains nothing from more threads, and on a busy 2-core machine OpenMP's
    spin-waiting made each warm-up step up to 10x slower with 2 threads; one thread also makes the
    build's arithmetic (and so its stopping step) the same on every machine.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build_tiny_model(out_dir, seed, progress, max_steps=max_steps, final_dir=final_dir)
    finally:
        torch.set_num_threads(threads)


def _build_tiny_model(out_dir, seed: int = 0, progress=print, *, max_steps: int = WARMUP_MAX_STEPS, final_dir=None) -> Path:
    """Build the tiny model into `out_dir` (created; existing files are overwritten) and return its path.

    The warm-up stops at WARMUP_TARGET_PASS_AT_1 on validation, or at `max_steps` (a cap, and a way for tests
    to build a small untrained copy quickly)."""
    import torch

    started = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    splits = arithmetic_splits()
    torch.manual_seed(seed)

    progress("tiny model: training the tokenizer")
    # The text the model will see, less the special and answer tokens (they are whole tokens of their own).
    texts = [f"user\n{row['prompt'][0]['content']}\nassistant\n{row['answer']}\n" for row in splits["train"]]
    tokenizer = build_tokenizer(texts)
    model = _untrained_model(tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    progress(f"tiny model: Qwen3, {n_params / 1e6:.2f} M parameters, vocabulary {len(tokenizer)}; warm-up until validation pass@1 >= {WARMUP_TARGET_PASS_AT_1}")

    step = _warm_up(model, tokenizer, splits, random.Random(seed), max_steps, progress, started)
    facts = _save(model, tokenizer, splits, out_dir, seed=seed, steps=step, started=started)
    progress(
        f"tiny model: built in {facts['seconds']:.0f} s ({step} steps): validation pass@1 {facts['validation_pass_at_1']:.3f}, "
        f"held-out pass@1 {facts['heldout_pass_at_1']:.3f} -> {final_dir or out_dir}"
    )
    return out_dir


def _untrained_model(tokenizer):
    """A Qwen3 of MODEL_CONFIG's shape for `tokenizer`, ending turns at <|im_end|> (initialised from torch's seed)."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    im_end, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id
    config = Qwen3Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=im_end, pad_token_id=pad, **MODEL_CONFIG)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=pad, bos_token_id=None)
    return model


def _warm_up(model, tokenizer, splits: dict, rng: random.Random, max_steps: int, progress, started: float) -> int:
    """Supervised steps on the train split until validation pass@1 reaches the target (or `max_steps`);
    the number of steps taken."""
    import torch

    from .evaluate import pass_at_1

    train = _encode_examples(tokenizer, splits["train"])
    eval_rows = splits["validation"][:EVAL_ROWS]
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARMUP_LEARNING_RATE, weight_decay=0.0)
    order: list[int] = []
    step, val_pass = 0, 0.0
    model.train()
    while step < max_steps:
        if len(order) < WARMUP_BATCH_SIZE:  # a fresh deterministic shuffle each epoch
            epoch = list(range(len(train)))
            rng.shuffle(epoch)
            order.extend(epoch)
        batch_ids, order = order[:WARMUP_BATCH_SIZE], order[WARMUP_BATCH_SIZE:]
        input_ids, attention_mask, labels = _batch([train[i] for i in batch_ids], tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % EVAL_EVERY_STEPS == 0:
            val_pass = pass_at_1(model, tokenizer, eval_rows, max_new_tokens=EVAL_MAX_NEW_TOKENS)
            progress(f"tiny model: step {step:4d}  loss {loss.item():.3f}  validation pass@1 {val_pass:.3f}  ({time.monotonic() - started:.0f} s)")
            if val_pass >= WARMUP_TARGET_PASS_AT_1:
                return step
    progress(f"tiny model: stopped at the step limit {max_steps} with validation pass@1 {val_pass:.3f}")
    return step


def _save(model, tokenizer, splits: dict, out_dir: Path, *, seed: int, steps: int, started: float) -> dict:
    """Score the warmed-up model on the whole validation and held-out splits, save it, and write the build's
    facts (returned) last: their file marks a finished build."""
    import tokenizers
    import torch
    import transformers

    from .evaluate import pass_at_1

    warmup_seconds = time.monotonic() - started
    validation_pass = pass_at_1(model, tokenizer, splits["validation"], max_new_tokens=EVAL_MAX_NEW_TOKENS)
    heldout_pass = pass_at_1(model, tokenizer, splits["heldout"], max_new_tokens=EVAL_MAX_NEW_TOKENS)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    _name_tokenizer_class(out_dir / "tokenizer_config.json")
    facts = {
        "recipe": RECIPE_VERSION,
        "seed": seed,
        "steps": steps,
        "seconds": round(time.monotonic() - started, 1),
        "warmup_seconds": round(warmup_seconds, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "target_validation_pass_at_1": WARMUP_TARGET_PASS_AT_1,
        "validation_pass_at_1": validation_pass,
        "heldout_pass_at_1": heldout_pass,
        "eval_max_new_tokens": EVAL_MAX_NEW_TOKENS,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }
    (out_dir / BUILD_FACTS_FILE).write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def _name_tokenizer_class(tokenizer_config: Path) -> None:
    """transformers 5 writes its own class name, TokenizersBackend, which transformers 4 (and tools that
    pin it, such as llama.cpp's converters) can't load; PreTrainedTokenizerFast loads in both."""
    config = json.loads(tokenizer_config.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer_config.write_text(json.dumps(config, indent=2) + "\n")


def tiny_model_dir() -> Path:
    return cache_dir() / "models" / TINY_MODEL_DIRNAME


def is_complete(path: Path) -> bool:
    """A finished build of the current recipe: weights, tokenizer and the build facts written last."""
    try:
        facts = json.loads((path / BUILD_FACTS_FILE).read_text())
    except (OSError, ValueError):
        return False
    return facts.get("recipe") == RECIPE_VERSION and all(
        (path / name).is_file() for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json")
    )


def ensure_tiny_model(progress=print, *, max_steps: int = WARMUP_MAX_STEPS) -> Path:
    """cache_dir()/models/tiny-qwen3, built first if missing, incomplete or from an older recipe.

    The build goes into a temporary sibling folder that is renamed into place only when finished, so an
    interrupted build, or one that ran out of disk, is never mistaken for a finished one (and is removed).
    A cache that can't be written (full, or owned by another user) is the input layer's failure, saying which.
    """
    target = tiny_model_dir()
    if is_complete(target):
        return target
    progress(f"tiny model: not built yet at {target}; building it (about a minute, once)")
    try:
        return _build_into_place(target, progress, max_steps)
    except Exception as error:  # noqa: BLE001 - only write errors become a layer failure; the rest is re-raised
        os_error = as_os_error(error)
        if os_error is None:
            raise
        raise cache_write_failure(target, os_error) from error


def _build_into_place(target: Path, progress, max_steps: int) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{TINY_MODEL_DIRNAME}.building-", dir=target.parent))
    try:
        build_tiny_model(staging, progress=progress, max_steps=max_steps, final_dir=target)
        if is_complete(target):  # another process finished first: keep theirs
            return target
        if target.exists():
            shutil.rmtree(target)  # an incomplete or outdated build
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would hide the model from other users of a shared cache
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def as_os_error(error: Exception) -> OSError | None:
    """The OSError behind a write failure: itself, or the one safetensors reports only in words ("os error 27")."""
    import re

    if isinstance(error, OSError):
        return error
    found = re.search(r"I/O error: .*\(os error (\d+)\)", str(error))
    return OSError(int(found.group(1)), os.strerror(int(found.group(1)))) if found else None


def cache_write_failure(target: Path, error: OSError):
    """The cache is full, or not this user's: which, and what to do. Nothing half-written was kept."""
    import errno

    from .errors import LayerFailure

    folder = target.parent
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        what = f"this user (uid {os.getuid()}) may not write the cache folder {folder} ({error.strerror})"
        action = (f"give the cache to this user (`sudo chown -R {os.getuid()}:{os.getgid()} {cache_dir()}`) or point "
                  "GRPOLAB_CACHE_DIR elsewhere; in a container, the cache volume must belong to the user the "
                  "container runs as (`docker volume rm` the cache volume and it is made again)")  # fmt: skip
    else:
        what = f"could not write the tiny model into {folder} ({error.strerror or error}): the disk may be full"
        action = f"free space where the cache lives (`df -h {folder}`) or point GRPOLAB_CACHE_DIR elsewhere"
    return LayerFailure("input", what + "; nothing half-written was kept", action)


def resolve_model_name(name: str) -> str:
    """The path or Hub id to load: "tiny" means the built-in model (built on first use)."""
    return str(ensure_tiny_model()) if name == TINY_MODEL else name
