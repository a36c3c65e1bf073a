"""`python -m grpolab.bench COMMAND`: the measurement and proof commands (grpolab.bench.commands)."""

import sys

from .commands import main

# The guard matters: vLLM's CPU build starts helper processes with "spawn", which re-imports the main module.
if __name__ == "__main__":
    sys.exit(main())
