"""The task the lab trains on: the problems and their splits, the reward functions, which rewards a run uses, and
held-out pass@1. Stands on nothing else of the lab's."""
