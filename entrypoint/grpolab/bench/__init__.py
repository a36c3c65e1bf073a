"""Measurement and proof, apart from the product: what the host's benchmarks and CI run in the lab, through their own
entry point `python -m grpolab.bench COMMAND` (commands.py), never through a learner's `grpolab` and never imported by
a product module. The memory benchmark's cases (and a case's shape saved as a folder); plain TRL on the lab's settings,
for the speed benchmark; the tiny model's smoke test before a lab on another model, for the projection benchmark;
CI's proof that an exported verl bundle trains, with verl on one machine's CPU (verl_cpu_proof.py)."""
