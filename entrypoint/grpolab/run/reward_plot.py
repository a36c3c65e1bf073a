"""A picture of a lab run: reward per step, with held-out pass@1 before and after."""

from __future__ import annotations

from pathlib import Path


def plot_run(record: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display in containers or CI
    import matplotlib.pyplot as plt

    steps = record.get("steps", [])
    xs = [s["step"] for s in steps]
    figure, reward_axis = plt.subplots(figsize=(8, 4.5), dpi=100)
    reward_axis.plot(xs, [s["reward"] for s in steps], color="tab:blue", label="mean reward (weighted sum)")
    low = [s["reward"] - s["reward_std"] for s in steps]
    high = [s["reward"] + s["reward_std"] for s in steps]
    reward_axis.fill_between(xs, low, high, color="tab:blue", alpha=0.15, label="± mean within-group std")
    reward_axis.set_xlabel("optimiser step")
    reward_axis.set_ylabel("reward")
    before, after = record.get("pass_at_1_before"), record.get("pass_at_1_after")
    if before is not None and after is not None:
        pass_axis = reward_axis.twinx()
        last = xs[-1] if xs else 1
        pass_axis.plot(
            [0, last], [before, after], "o--", color="tab:green", label=f"held-out pass@1 {before:.2f} -> {after:.2f}"
        )
        pass_axis.set_ylabel("held-out pass@1")
        pass_axis.set_ylim(0, 1)
        pass_axis.legend(loc="lower right")
    reward_axis.legend(loc="upper left")
    rollout = record.get("rollout", {})
    stale = " (stale rollouts)" if rollout.get("stale") else ""
    settings = record.get("settings", {})
    reward_axis.set_title(
        f"GRPO lab, track {record.get('track')}: {Path(str(settings.get('model', ''))).name}, rollout "
        f"{rollout.get('path', '?')}{stale}"
    )
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
