"""Which GPUs each locked image has code for: the ELF and fatbin reading of a wheel's shared objects (`elf`), the
kernels table beside a lock and its checks (`table`), and the docs section generated from the tables (`readme`).
Imports hostlab.host and hostlab.locks below it."""
