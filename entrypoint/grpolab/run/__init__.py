"""One run, smoke test or lab: the walk every run takes (pipeline), its six layer checks, its record whatever happens,
the trainer (training), the smoke test's calibration and size probe, what to write down before scaling up, the
disk the run writes to, and the lab's reward plot."""
