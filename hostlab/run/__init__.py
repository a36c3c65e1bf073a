"""The commands that span concerns: `invoke lock` over every track (`lock`: the locks, their kernels tables and the
stand-in base they are resolved in), `invoke up` (`up`), a lab in a native venv (`lab`), TRL's vLLM server
(`serve`) and verl's trainer on this machine's CPU (`verl_cpu`). Imports every host package below it but ci and
bench."""
