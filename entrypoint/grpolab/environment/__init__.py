"""What the machine gives the lab: which PyTorch build and device, the machine's facts, which vLLM is installed and
the range TRL declares for it, the run log's environment fingerprint, and `grpolab doctor` (doctor.py: the report,
its order and the rollout paths' items; doctor_machine.py and doctor_setup.py: the other items by layer;
doctor_context.py: the Context and item() they share)."""
