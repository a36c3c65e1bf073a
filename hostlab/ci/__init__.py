"""What CI runs: the test command, `invoke test`, step by step (`testcommand`), the disk room it makes and watches
(`room`), and the CPU-seconds each part used (`cpuuse`). Never imported by what a learner runs."""
