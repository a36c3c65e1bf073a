"""What the lab and the host both stand on, all light (no torch): the tracks table's reader, the run log's format
and reader, the server health wait, a file's sha256, the kernels table's verdicts, failures by layer with their exit
statuses, where runs and caches go, durations as people read them, the 25 % band, and the rollout paths' descriptions
with their registry (rollout_paths/: each path's settings, memory terms, disk needs and doctor items; its engine is in
grpolab.rollouts). The host side imports only this package and `grpolab.report`."""
