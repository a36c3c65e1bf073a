"""The GRPO lab: a six-layer smoke test, the lab itself, its run log, memory estimate and doctor.

This package runs inside the images and in native venvs. It knows nothing of Docker.
Importing it is cheap: heavy libraries (torch, trl) are imported inside the functions that need them.
"""

__version__ = "0.1.0"
