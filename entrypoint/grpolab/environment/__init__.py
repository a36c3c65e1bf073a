"""What the machine gives the lab: which PyTorch build and device, the machine's facts, which vLLM is installed and
the range TRL declares for it, the run log's environment fingerprint, and `grpolab doctor`."""
