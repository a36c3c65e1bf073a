"""The built-in tiny model: a ~0.5 M parameter Qwen3 that adds two numbers, committed to the repository.

It exists so that every track, CPU-only CI included, can run real GRPO on a real (if tiny) language model
with no Hub access, and see held-out pass@1 move. `--model tiny` in the lab means this model.

It is a fixture, made once with the recipe below and committed in entrypoint/tiny-model/ (weights, tokenizer,
config; the images carry it with entrypoint/): no run trains a model. The recipe is deterministic on one
machine but not across CPUs (float kernels differ between instruction sets, AVX-512 or not, and the warm-up
stopped at 610 steps on one machine and 1200 on another), so building it at first use gave each machine its
own "tiny" model. FIXTURE_SHA256 is the one place its hashes live; every load checks them.

The recipe (`grpolab tiny-model --rebuild --out DIR` runs it and prints the new hashes), deterministic from the seed:
1. A byte-level BPE tokenizer (~300 tokens) trained with `tokenizers` on the task's own text. Its
   pre-tokenizer is exactly Qwen2's (the regex Split, "isolated", then ByteLevel without its own regex),
   which puts every digit in a token of its own and lets llama.cpp's "qwen2" pre-tokenizer reproduce our
   tokenisation. ChatML chat template, eos `<|im_end|>`. `<answer>` and `</answer>` are single tokens but
   *ordinary* ones: special tokens are stripped when TRL decodes completions, and the format reward would
   never see them.
2. A Qwen3 from a config (hidden 128, 2 layers, 4 heads, tied embeddings; a 1024-token context, which costs
   no parameters with RoPE and covers track c's prompt plus completion, so vLLM takes the model as it is).
3. A supervised warm-up on the train split of grpolab.task.problems's arithmetic problems, stopped as soon as
   validation greedy pass@1 reaches WARMUP_TARGET_PASS_AT_1: good enough that GRPO's groups of 8 mix right
   and wrong answers (the learning signal), bad enough that GRPO has something to improve.

The result is saved with save_pretrained (safetensors) plus grpolab_tiny.json, the build's facts.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from ..task.problems import arithmetic_splits
from ..common.filehash import sha256_of_file
from ..common.paths import TINY_MODEL_DIR, TINY_MODEL_RELATIVE

TINY_MODEL = "tiny"  # the name users pass as --model
BUILD_FACTS_FILE = "grpolab_tiny.json"
RECIPE_VERSION = 4  # bump when the recipe changes (4: a 1024-token context; 3: held-out split by unordered pair)

# The committed model, beside the package (entrypoint/tiny-model/), and the sha256 of each of its files: the one
# place they are written. `grpolab tiny-model --rebuild` prints a new dict for a regenerated model.
FIXTURE_DIR = TINY_MODEL_DIR
FIXTURE_RELATIVE = TINY_MODEL_RELATIVE
FIXTURE_FILES = (
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    BUILD_FACTS_FILE,
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)  # what a build writes
FIXTURE_SHA256 = {
    "chat_template.jinja": "2eefca287a0f008b170ce31bc2c4dabb398a64eb74716bf64db5d9a21da50da9",
    "config.json": "3d4357c85002dba0e745c6e4e9f41417db8ba92314533cd1ccad76cb492bd4e8",
    "generation_config.json": "3c26e8f5e008bd93bd9b7aad28b2a200961276c2953f44b4654269549e1a30e2",
    "grpolab_tiny.json": "bfa7ef16c70c1a729966ab7153db34cfd6625db0971d386c1ec04af55aff2416",
    "model.safetensors": "fb79d1beace2efce883012c4e85f74bbd29c398801c834e190e9f2fba332165f",
    "tokenizer.json": "1b7131eaa824afe0681fa34192bb1fd3873042da370429397ff8e910fd2437dc",
    "tokenizer_config.json": "650f365f8e34d5d0a9b092fa7d03ad4c3c121ac1ff011754dc3e399ded323944",
}

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
    max_position_embeddings=1024,
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


def build_tiny_model(
    out_dir, seed: int = 0, progress=print, *, max_steps: int = WARMUP_MAX_STEPS, final_dir=None
) -> Path:
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


def _build_tiny_model(
    out_dir, seed: int = 0, progress=print, *, max_steps: int = WARMUP_MAX_STEPS, final_dir=None
) -> Path:
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
    progress(
        f"tiny model: Qwen3, {n_params / 1e6:.2f} M parameters, vocabulary {len(tokenizer)}; warm-up until validation "
        f"pass@1 >= {WARMUP_TARGET_PASS_AT_1}"
    )

    step = _warm_up(model, tokenizer, splits, random.Random(seed), max_steps, progress, started)
    facts = _save(model, tokenizer, splits, out_dir, seed=seed, steps=step, started=started)
    progress(
        f"tiny model: built in {facts['seconds']:.0f} s ({step} steps): validation pass@1 "
        f"{facts['validation_pass_at_1']:.3f}, "
        f"held-out pass@1 {facts['heldout_pass_at_1']:.3f} -> {final_dir or out_dir}"
    )
    return out_dir


def _untrained_model(tokenizer):
    """A Qwen3 of MODEL_CONFIG's shape for `tokenizer`, ending turns at <|im_end|> (initialised from torch's seed)."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    im_end, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id
    config = Qwen3Config(
        vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=im_end, pad_token_id=pad, **MODEL_CONFIG
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=pad, bos_token_id=None)
    return model


def _warm_up(model, tokenizer, splits: dict, rng: random.Random, max_steps: int, progress, started: float) -> int:
    """Supervised steps on the train split until validation pass@1 reaches the target (or `max_steps`);
    the number of steps taken."""
    import torch

    from ..task.evaluate import pass_at_1

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
            progress(
                f"tiny model: step {step:4d}  loss {loss.item():.3f}  validation pass@1 {val_pass:.3f}  "
                f"({time.monotonic() - started:.0f} s)"
            )
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

    from ..task.evaluate import pass_at_1

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
    """The committed model: entrypoint/tiny-model/ in the repository, /opt/grpolab/entrypoint/tiny-model/ in images."""
    return FIXTURE_DIR


def fixture_hashes(folder: Path) -> dict[str, str]:
    """{file name: sha256} of the files a build writes (the form of FIXTURE_SHA256)."""
    return {
        path.name: sha256_of_file(path)
        for path in sorted(Path(folder).iterdir())
        if path.is_file() and path.name in FIXTURE_FILES
    }


def verify_tiny_model(folder: Path | None = None) -> Path:
    """The committed model's folder, once every file in it has the sha256 that FIXTURE_SHA256 gives it; else the
    input layer's failure naming the file and what to do. (About 2 MB: hashing it costs milliseconds.)"""
    from ..common.errors import LayerFailure

    folder = Path(folder or tiny_model_dir())
    restore = (f"restore the committed files (`git checkout -- {FIXTURE_RELATIVE}` in the repository, or rebuild the "
               "image); if you regenerated the model on purpose (`grpolab tiny-model --rebuild`), commit its files and "
               "put the hashes it printed into FIXTURE_SHA256 in grpolab/model/tiny.py")
    missing = [str(folder / name) for name in FIXTURE_SHA256 if not (folder / name).is_file()]
    if missing:
        raise LayerFailure(
            "input",
            f"the built-in tiny model is incomplete: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
            "missing",
            restore,
        )
    for name, expected in FIXTURE_SHA256.items():
        path = folder / name
        found = sha256_of_file(path)
        if found != expected:
            raise LayerFailure(
                "input",
                f"the built-in tiny model's {path} has sha256 {found}, not the committed {expected}: "
                "the file was changed or damaged",
                restore,
            )
    return folder


def rebuild_tiny_model(out_dir, progress=print, *, max_steps: int = WARMUP_MAX_STEPS) -> dict[str, str]:
    """Make the model again with the recipe into `out_dir` (a folder of its own, never the committed one) and
    print the hashes that FIXTURE_SHA256 would take; returns them."""
    out_dir = Path(out_dir)
    if out_dir.resolve() == tiny_model_dir().resolve():
        raise ValueError(
            f"rebuild into a folder of its own, not over the committed model ({out_dir}); copy it over once checked"
        )
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"{out_dir} is not empty: rebuild into a new folder")
    build_tiny_model(out_dir, progress=progress, max_steps=max_steps)
    for path in out_dir.iterdir():
        path.chmod(0o644)  # safetensors writes 0600: the images' user (not the builder) must read the committed files
    hashes = fixture_hashes(out_dir)
    progress(f"tiny model rebuilt into {out_dir}; model.safetensors sha256 {hashes['model.safetensors']}")
    progress(f"to make it the committed model: copy {out_dir}/* over {FIXTURE_RELATIVE}/ and set FIXTURE_SHA256 in "
             "entrypoint/grpolab/model/tiny.py to:")
    progress("FIXTURE_SHA256 = {\n" + "".join(f'    "{name}": "{digest}",\n' for name, digest in hashes.items()) + "}")
    return hashes


def resolve_model_name(name: str) -> str:
    """The path or Hub id to load: "tiny" means the committed model (its hashes checked). A local folder with a
    config.json and no weights is refused here, before anything loads."""
    if name == TINY_MODEL:
        return str(verify_tiny_model())
    refuse_folder_without_weights(name)
    return name


WEIGHT_PATTERNS = ("*.safetensors", "*.bin")  # what from_pretrained loads weights from


def refuse_folder_without_weights(name: str) -> None:
    from ..common.errors import LayerFailure

    folder = Path(name).expanduser()
    if not folder.is_dir():
        return  # a Hub id (or a path that does not exist: the loader says so)
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        has = ", ".join(sorted(p.name for p in folder.iterdir())[:8]) or "nothing"
        raise LayerFailure(
            "input",
            f"--model {name}: the folder holds no weights (no *.safetensors or *.bin; it holds {has})",
            "point --model at a folder saved with save_pretrained (config.json, tokenizer and *.safetensors), a Hub "
            "id, or tiny",
        )
