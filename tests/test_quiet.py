"""Quiet runs: a smoke test and a lab on track c (the short lab tests/test_lab.py reads too, trained once: conftest.py
`short_lab`) print no FutureWarning or DeprecationWarning.

Python's default filters apply (as a user's run has them), with one filter added: DeprecationWarning and
PendingDeprecationWarning attributed to our own package (module grpolab or grpolab.*) are always shown. Python's
defaults show those two only for __main__, so without it a deprecated call in our code (the warning points at
its caller) would pass unseen; library-internal deprecations stay hidden as they are for users, while
FutureWarning, shown by default from anywhere, counts from any library. stderr is read whole: a library that
warns at import counts too. What our code passed under a deprecated name is fixed where it is passed; the one
library warning about another library is filtered exactly, with why and when to remove it (grpolab/run/training.py)."""

DEPRECATIONS = ("FutureWarning", "DeprecationWarning", "PendingDeprecationWarning")


def test_a_smoke_test_then_a_short_lab_warn_of_nothing_deprecated(short_lab):
    assert short_lab["returncode"] == 0, short_lab["stdout"][-3000:] + short_lab["stderr"][-3000:]
    assert "smoke test passed" in short_lab["stdout"] and "pass@1" in short_lab["stdout"]  # both ran
    warned = [line for line in short_lab["stderr"].splitlines() if any(kind in line for kind in DEPRECATIONS)]
    assert warned == [], "\n".join(warned)
