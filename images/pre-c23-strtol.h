/* Force-included into every C and C++ file of llama.cpp's compile (hostlab/locks/sourcebuilds.py), so that one compile
   serves both the image and the test venv on a Debian 12 host.

   From glibc 2.38 on, a file compiled with _GNU_SOURCE (which g++ always defines) has strtol, strtoul, sscanf and
   their kin renamed to __isoc23_strtol and so on: the C23 versions, which also read "0b101" as binary. Those
   symbols exist only in glibc 2.38 and later, so the libraries compiled in the image (trixie, glibc 2.41) would
   not load on Debian 12 (glibc 2.36). llama.cpp never hands these functions a 0b number; with the older names
   they behave the same for everything it parses. Their only symbols newer than glibc 2.36 were these
   (objdump -T of libllama, libggml-base and libggml-cpu). */
#include <features.h>
#undef __GLIBC_USE_C23_STRTOL
#define __GLIBC_USE_C23_STRTOL 0
