"""One run, smoke test or lab: the walk every run takes (pipeline: its prepare and evaluate steps; pipeline_shapes:
the smoke test's and the lab's shapes of it; pipeline_train: its roll-out-and-train step and the smoke test's
calibration; pipeline_record: what its record step writes down and keeps), its six layer checks, its record whatever
happens, the trainer (training), the smoke test's calibration and size probe, what to write down before scaling up,
the disk the run writes to, and the lab's reward plot."""
