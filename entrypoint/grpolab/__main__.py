import sys

from .cli import main

# The guard matters: vLLM's CPU build starts helper processes with "spawn", which re-imports the main module.
if __name__ == "__main__":
    sys.exit(main())
