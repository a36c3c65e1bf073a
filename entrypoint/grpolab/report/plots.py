"""The report's pictures, for what people would rather look at than read. Each plot is FIGURE_PX pixels and is
written only when the runs hold something to draw; each function returns its path, or None."""

from __future__ import annotations

import math
from pathlib import Path

FIGURE_INCHES, DPI = (10, 6), 100
FIGURE_PX = (FIGURE_INCHES[0] * DPI, FIGURE_INCHES[1] * DPI)
MEMORY_BAND = 0.15  # the ±15% around a perfect prediction the memory plot shades


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on hosts, in containers or in CI
    import matplotlib.pyplot as plt

    return plt


def save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)
    pyplot().close(figure)
    return path


def row_label(row: dict) -> str:
    return f"{row['track']} · {row['machine']} · {row['rollout']}"


def reward_per_step(lab_runs: list[dict], machine_of, path: Path) -> Path | None:
    """Mean reward per logged step of every passing lab run, overlaid, one panel per track."""
    runs = [run for run in lab_runs if run.get("steps")]
    if not runs:
        return None
    tracks = sorted({str(run.get("track")) for run in runs})
    columns = min(3, len(tracks))
    plt = pyplot()
    figure, axes = plt.subplots(math.ceil(len(tracks) / columns), columns, figsize=FIGURE_INCHES, squeeze=False)
    for axis, track in zip(axes.flat, tracks):
        for run in (r for r in runs if str(r.get("track")) == track):
            steps = [s for s in run["steps"] if isinstance(s, dict) and "reward" in s]
            rollout = run.get("rollout", {}).get("path", "?") if isinstance(run.get("rollout"), dict) else "?"
            axis.plot([s["step"] for s in steps], [s["reward"] for s in steps], marker=".",
                      label=f"{machine_of(run)} · {rollout} · {str(run.get('run_id', ''))[:15]}")
        axis.set_title(f"track {track}")
        axis.set_xlabel("optimiser step")
        axis.set_ylabel("mean reward")
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(tracks):]:
        axis.set_visible(False)
    figure.suptitle("Reward per step, every passing lab run")
    figure.tight_layout()
    return save(figure, path)


def time_split(rows: list[dict], path: Path) -> Path | None:
    """Seconds per step as stacked bars: generation, reward, update."""
    rows = [row for row in rows if row["lab_seconds_per_step"] is not None]
    if not rows:
        return None
    plt = pyplot()
    figure, axis = plt.subplots(figsize=FIGURE_INCHES)
    labels = [row_label(row) for row in rows]
    left = [0.0] * len(rows)
    for part, color in (("generation_s", "tab:blue"), ("reward_s", "tab:orange"), ("update_s", "tab:green")):
        widths = [row[part] or 0.0 for row in rows]
        axis.barh(labels, widths, left=left, height=0.6, color=color, label=part.removesuffix("_s"))
        left = [a + b for a, b in zip(left, widths)]
    axis.set_xlabel("seconds per optimiser step (lab, mean over logged steps)")
    axis.set_title("Where a step's time goes")
    axis.invert_yaxis()
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
    figure.tight_layout()
    return save(figure, path)


def peak_memory(points: list[tuple[str, float, float]], path: Path) -> Path | None:
    """Predicted against measured peak memory per run (label, predicted GB, measured GB), with the ±15% band."""
    points = [p for p in points if p[1] and p[2]]
    if not points:
        return None
    plt = pyplot()
    figure, axis = plt.subplots(figsize=FIGURE_INCHES)
    values = [v for _, predicted, measured in points for v in (predicted, measured)]
    low, high = min(values) / 2, max(values) * 2
    line = [low, high]
    axis.plot(line, line, color="grey", linewidth=1, label="measured = predicted")
    axis.fill_between(line, [v * (1 - MEMORY_BAND) for v in line], [v * (1 + MEMORY_BAND) for v in line],
                      color="grey", alpha=0.2, label=f"±{MEMORY_BAND:.0%}")
    for label in dict.fromkeys(p[0] for p in points):
        mine = [p for p in points if p[0] == label]
        axis.scatter([p[1] for p in mine], [p[2] for p in mine], label=label, zorder=3)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlim(low, high)
    axis.set_ylim(low, high)
    axis.set_xlabel("predicted peak, GB (the estimate before the run)")
    axis.set_ylabel("measured peak, GB")
    axis.set_title("Peak memory: measured against the arithmetic, per run")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return save(figure, path)


def pass_at_1(rows: list[dict], path: Path) -> Path | None:
    """Held-out pass@1 before and after training, per row, grouped by track."""
    rows = sorted((row for row in rows if row["pass_at_1_before"] is not None), key=lambda row: row["track"])
    if not rows:
        return None
    plt = pyplot()
    figure, axis = plt.subplots(figsize=FIGURE_INCHES)
    positions = range(len(rows))
    before = axis.bar(
        [p - 0.2 for p in positions],
        [row["pass_at_1_before"] for row in rows],
        width=0.4,
        label="before",
        color="tab:grey",
    )
    after = axis.bar(
        [p + 0.2 for p in positions],
        [row["pass_at_1_after"] or 0.0 for row in rows],
        width=0.4,
        label="after",
        color="tab:green",
    )
    for bars in (before, after):
        axis.bar_label(bars, fmt="%.2f")
    axis.set_xticks(list(positions), [row_label(row) for row in rows], rotation=15, ha="right", fontsize=8)
    axis.set_xlim(-0.6, max(len(rows), 4) - 0.4)  # a lone row keeps bars of the usual width
    axis.set_ylim(0, 1)
    axis.set_ylabel("held-out pass@1 (greedy)")
    axis.set_title("pass@1 before and after GRPO, per track")
    axis.legend()
    figure.tight_layout()
    return save(figure, path)
