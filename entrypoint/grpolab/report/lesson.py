"""The lesson's figures per track, and what a report row says beside them (`grpolab report --against-lesson`):
its smoke test's wall clock, rollout path and peak memory against what the lesson predicts for its track."""

from __future__ import annotations

from ..common.durations import duration

# The lesson's figures per track ("What each track can run", the two memory diagrams, "The first run on a new
# machine"), quoted for --against-lesson. The memory figures are the sums of the lesson's own diagram rows
# without the operating system's share and the free space: 16 GB diagram (Qwen3-1.7B, rank 16, 8 rollouts of
# 512 tokens) 3.4 + 3.4 + 0.3 + 0.7 + 2 = 9.8 GB, or 6.4 GB at beta 0; 128 GB diagram (Qwen3-4B, vLLM colocate
# at 0.3) 8 + 8 + 0.5 + 38.4 + 4 = 58.9 GB, or 50.9 GB at beta 0.
LESSON_SMOKE = "ten steps of a 0.6B model take a couple of minutes on any track"
LESSON_SMOKE_S = 180  # "a couple of minutes", read as at most three
LESSON_TRACKS = {
    "s": {
        "rollout": "vllm-colocate",
        "memory_gb": (50.9, 58.9),
        "memory": "128 GB diagram, Qwen3-4B with vLLM colocate: 50.9 GB at beta 0, 58.9 GB with a reference model",
    },
    "n": {
        "rollout": "vllm-colocate",
        "memory_gb": (6.4, 9.8),
        "memory": "16 GB diagram, Qwen3-1.7B: 6.4 GB at beta 0 ('a 16 GB card runs it with beta at zero'), 9.8 GB with "
                  "a reference model",
    },
    "x": {
        "rollout": "inprocess",
        "memory_gb": (6.4, 9.8),
        "memory": "16 GB diagram, Qwen3-1.7B in-process: 6.4 GB at beta 0, 9.8 GB with a reference model",
    },
    "m": {
        "rollout": "inprocess",
        "memory_gb": None,
        "memory": "no diagram for MPS float32 (float32 doubles the weight terms); 'expect this to be the slowest of "
                  "the four tracks'",
    },
}


def against_lesson(row: dict) -> str:
    """What the lesson predicts for the row's track, and whether this machine agrees."""
    lesson = LESSON_TRACKS.get(row["track"])
    if lesson is None:
        return f"track {row['track']} is not one of the lesson's four tracks; smoke: {smoke_verdict(row)}"
    parts = [f"smoke: {smoke_verdict(row)}"]
    same = "agrees" if lesson["rollout"] == row["rollout"] else "differs"
    parts.append(f"rollout: lesson {lesson['rollout']} ({same})")
    measured, band = row["peak_memory_gb_measured"], lesson["memory_gb"]
    if band is None or measured is None:
        parts.append(f"memory: {lesson['memory']}")
    else:
        low, high = band
        verdict = "inside" if low <= measured <= high else "below" if measured < low else "above"
        parts.append(f"memory: lesson {low:g}-{high:g} GB, ours {measured:.2f} GB ({verdict}; {lesson['memory']})")
    return "; ".join(parts)


def smoke_verdict(row: dict) -> str:
    seconds = row["smoke_wall_clock_s"]
    if seconds is None:
        return "no passing smoke test"
    agrees = "agrees" if seconds <= LESSON_SMOKE_S else "slower than the lesson says"
    return f"lesson a couple of minutes, ours {duration(seconds)} ({agrees})"
