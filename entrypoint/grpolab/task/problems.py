"""The lab's problems: a built-in arithmetic generator (works offline) or a Hugging Face dataset.

Every row is `{"prompt": [{"role": "user", "content": str}], "answer": str}`: a chat prompt and the
exact final number as a string. The rewards (grpolab.task.rewards) compare a completion's final number with
`answer`; the prompt asks for the number inside `<answer></answer>`.

Dataset names:
- "arithmetic": "What is A plus B?" for A, B in 0..99 (10,000 problems). Short on purpose: it is the
  built-in tiny model's task, and that model has a small vocabulary and context.
- "arithmetic-words": the same (A, B) pairs as short word problems ("Sam has 12 apples and buys 30
  more. ..."), some of them subtractions, with an instruction to put only the final number inside
  <answer></answer>. Meant for real models on GPU tracks.
- a Hugging Face dataset id with `question` and `answer` columns where the answer ends "#### NUMBER"
  (openai/gsm8k). Needs the Hub, or the dataset already in the local datasets cache.

The split of the 10,000 pairs into train / validation / held-out is fixed (seed 0) whatever the lab's
seed, and made by the unordered pair: "A plus B" and its commuted twin "B plus A" are always in the same
split, so the held-out problems are never ones (or twins of ones) the tiny model was warmed up on; the
lab's seed only chooses which training problems a run draws.
"""

from __future__ import annotations

import random
import re

ANSWER_INSTRUCTION = "Put only the final number inside <answer></answer>."

ARITHMETIC = "arithmetic"
ARITHMETIC_WORDS = "arithmetic-words"
BUILTIN_DATASETS = (ARITHMETIC, ARITHMETIC_WORDS)

OPERAND_RANGE = range(100)  # A and B in 0..99
VALIDATION_SIZE = 500
HELDOUT_SIZE = 1000  # the rest (8,500) is train
SPLIT_SEED = 0  # the split the lab and the tiny model share

# Word-problem templates: (text with {name} {a} {b} {item}, operation). Subtractions get a >= b.
_WORD_TEMPLATES = (
    ("{name} has {a} {item} and buys {b} more. How many {item} does {name} have?", "+"),
    ("{name} picked {a} {item} in the morning and {b} in the afternoon. How many {item} did {name} pick?", "+"),
    ("A box holds {a} {item}. {name} adds {b} {item}. How many {item} are in the box now?", "+"),
    ("{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?", "-"),
    ("There were {a} {item} on the table. {name} took {b}. How many {item} are left?", "-"),
)
_NAMES = ("Sam", "Ana", "Lee", "Mia", "Omar", "Kim")
_ITEMS = ("apples", "pencils", "cookies", "stickers", "marbles", "books")


class DatasetUnavailable(ValueError):
    """A Hugging Face dataset could not be loaded (no Hub access, unknown id, unexpected columns)."""


def same_question_key(a: int, b: int) -> tuple[int, int]:
    """What makes two problems the same question: the unordered pair. "A plus B" and "B plus A" have one
    answer, and a word-problem subtraction takes the larger operand first whichever order the pair came in."""
    return (min(a, b), max(a, b))


def _split_pairs(seed: int) -> dict[str, list[tuple[int, int]]]:
    """The 10,000 ordered pairs, split so that both orders of a pair land in the same split.

    The unordered pairs are shuffled with `seed`, then dealt whole (both orders together) into held-out,
    then validation, while each has room, and train: the sizes stay exact because the 100 pairs with A == B
    are one problem each.
    """
    keys = sorted({same_question_key(a, b) for a in OPERAND_RANGE for b in OPERAND_RANGE})
    random.Random(seed).shuffle(keys)
    room = {"heldout": HELDOUT_SIZE, "validation": VALIDATION_SIZE}
    splits: dict[str, list[tuple[int, int]]] = {"train": [], "validation": [], "heldout": []}
    for a, b in keys:
        pairs = [(a, b)] if a == b else [(a, b), (b, a)]
        name = next((name for name, left in room.items() if left >= len(pairs)), "train")
        if name in room:
            room[name] -= len(pairs)
        splits[name].extend(pairs)
    for pairs in splits.values():
        random.Random(seed).shuffle(pairs)  # the two orders of a pair need not sit side by side
    return splits


def arithmetic_row(a: int, b: int) -> dict:
    """The tiny model's problem: a short prompt and the sum as the answer."""
    return {"prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}], "answer": str(a + b)}


def word_problem_row(a: int, b: int) -> dict:
    """A word problem for the pair (a, b): template, name and item chosen from the pair, so it is deterministic."""
    template, op = _WORD_TEMPLATES[(a * 7 + b * 3) % len(_WORD_TEMPLATES)]
    if op == "-" and a < b:
        a, b = b, a
    name, item = _NAMES[(a + 2 * b) % len(_NAMES)], _ITEMS[(3 * a + b) % len(_ITEMS)]
    question = template.format(name=name, a=a, b=b, item=item)
    answer = a + b if op == "+" else a - b
    return {"prompt": [{"role": "user", "content": f"{question} {ANSWER_INSTRUCTION}"}], "answer": str(answer)}


def arithmetic_splits(seed: int = SPLIT_SEED, style: str = ARITHMETIC) -> dict[str, list[dict]]:
    """All 10,000 problems as disjoint "train" (8,500), "validation" (500) and "heldout" (1,000) lists.
    `style` is "arithmetic" (the tiny model's short prompt) or "arithmetic-words". The split is by the
    unordered pair {A, B} (same_question_key), so no held-out problem has a twin, in either order or
    style, in train or validation."""
    make_row = {ARITHMETIC: arithmetic_row, ARITHMETIC_WORDS: word_problem_row}[style]
    return {name: [make_row(a, b) for a, b in pairs] for name, pairs in _split_pairs(seed).items()}


def gsm8k_answer(answer_text: str) -> str:
    """The final number of a GSM8K-style answer ("... #### 1,234" -> "1234")."""
    if "####" not in answer_text:
        raise ValueError(f"expected an answer ending '#### NUMBER', got {answer_text[-80:]!r}")
    return re.sub(r"[,\s$]", "", answer_text.rsplit("####", 1)[1])


def hf_row_to_lab(row: dict) -> dict:
    """Map a GSM8K-style row (`question`, `answer` "... #### 42") to the lab's prompt/answer row."""
    return {
        "prompt": [{"role": "user", "content": f"{row['question'].strip()}\n{ANSWER_INSTRUCTION}"}],
        "answer": gsm8k_answer(row["answer"]),
    }


def _load_hf(name: str, train_size: int, heldout_size: int, seed: int):
    import datasets

    config = "main" if name == "openai/gsm8k" else None
    try:
        loaded = datasets.load_dataset(name, config)
    except Exception as err:  # offline, unknown id, no permission: all end the same way for the user
        raise DatasetUnavailable(
            f"could not load the dataset {name!r} from the Hugging Face Hub ({type(err).__name__}: {err}). "
            "Without Hub access (or with HF_HUB_OFFLINE=1) a Hub dataset can't be loaded offline unless it is "
            f"already in the local datasets cache; --dataset {ARITHMETIC} works offline."
        ) from err
    train_split = "train" if "train" in loaded else next(iter(loaded))
    heldout_split = "test" if "test" in loaded else None
    columns = set(loaded[train_split].column_names)
    if not {"question", "answer"} <= columns:
        raise DatasetUnavailable(
            f"dataset {name!r} has columns {sorted(columns)}; the lab needs 'question' and 'answer' "
            "(answer ending '#### NUMBER', as in openai/gsm8k)"
        )
    train = loaded[train_split].shuffle(seed=seed)
    if heldout_split is None:  # no test split: hold out the tail of the shuffled train split
        heldout = train.select(range(len(train) - heldout_size, len(train)))
        train = train.select(range(len(train) - heldout_size))
    else:
        heldout = loaded[heldout_split]
    train = train.select(range(min(train_size, len(train))))
    heldout = heldout.select(range(min(heldout_size, len(heldout))))
    drop = lambda ds: [c for c in ds.column_names if c not in ("prompt", "answer")]  # noqa: E731
    return (
        train.map(hf_row_to_lab, remove_columns=drop(train)),
        heldout.map(hf_row_to_lab, remove_columns=drop(heldout)),
    )


def load_lab_datasets(name: str, train_size: int, heldout_size: int, seed: int = 0):
    """(train, heldout) as `datasets.Dataset` with columns `prompt` (chat list) and `answer` (str).

    Built-in names ("arithmetic", "arithmetic-words"): train is `train_size` problems drawn with `seed` from
    the fixed train split; heldout is the first `heldout_size` problems of the fixed held-out split (the same
    problems for every seed, so pass@1 is comparable across runs). Anything else is a Hugging Face dataset id.
    """
    import datasets

    if name not in BUILTIN_DATASETS:
        return _load_hf(name, train_size, heldout_size, seed)
    splits = arithmetic_splits(SPLIT_SEED, style=name)
    if train_size > len(splits["train"]) or heldout_size > len(splits["heldout"]):
        raise ValueError(
            f"{name} has {len(splits['train'])} training and {len(splits['heldout'])} held-out problems; "
            f"asked for {train_size} and {heldout_size}"
        )
    train = random.Random(seed).sample(splits["train"], train_size)
    heldout = splits["heldout"][:heldout_size]
    as_dataset = lambda rows: datasets.Dataset.from_dict(  # noqa: E731  (columns exist even when empty)
        {"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows]}
    )
    return as_dataset(train), as_dataset(heldout)
