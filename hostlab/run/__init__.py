"""The commands that span concerns: `invoke lock` over every track (`lock`: the locks, their kernels tables and the
stand-in base they are resolved in), `invoke up` (`up`), a lab in a native venv (`lab`), TRL's vLLM server
(`serve`), verl's trainer on this machine's CPU (`verl_cpu`), and the lock a learner's first build makes where the
track's index is one our machines can't reach (`learner_lock`). Imports every host package below it but ci and
bench."""
