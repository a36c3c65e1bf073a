"""Judge `grpolab doctor --json` from a CUDA machine against what torch and nvidia-smi themselves report there.

usage: python3 check_doctor.py DOCTOR_JSON    (prints PASS/FAIL lines; exit status = number of failures)
Called by check_doctor.sh; importable on any machine (tests feed it reports of machines we lack).
"""

import json
import sys


def expectations(torch_facts: dict) -> list[tuple[str, str, list[str]]]:
    """(item, status, words its summary must hold) for a CUDA machine whose torch sees device 0."""
    arch, archs, cuda, name = torch_facts["arch"], torch_facts["arch_list"], torch_facts["cuda"], torch_facts["name"]
    native = arch in archs
    return [
        ("gpu driver", "ok", [f">= torch's CUDA {cuda}"]),
        ("gpus", "ok", [name]),
        ("torch", "ok", [f"cuda {cuda} build"]),
        ("device", "ok", [f"cuda:0 {name} ({arch}, kernels from"]),
        (
            "arch",
            "ok" if native or any(a.startswith("sm_") for a in archs) else "warn",
            [f"{arch} native" if native else arch],
        ),
    ]


def judge(report: dict, torch_facts: dict) -> list[str]:
    """Failures, one sentence each; [] when every CUDA item said the right thing."""
    items = {i["name"]: i for i in report["items"]}
    failures = []
    for name, status, words in expectations(torch_facts):
        got = items.get(name)
        if got is None:
            failures.append(f"no {name!r} item")
        elif got["status"] != status or not all(w in got["summary"] for w in words):
            failures.append(f"{name}: expected {status} with {words}, got {got['status']}: {got['summary']}")
    card = items.get("card")
    if card is None:
        failures.append("no 'card' item (the card's verdict for the track's default path and dtype)")
    else:
        want = "bfloat16" if torch_facts.get("bf16_native") else "float16"
        got = card["details"]["dtype"]["dtype"]
        if card["details"]["gpu"] != torch_facts["arch"] or (card["details"]["dtype"]["asked"] == "bfloat16" and got
                                                              != want and card["details"]["attention"]):
            failures.append(f"card: expected {torch_facts['arch']} in {want} (torch: bfloat16 native "
                            f"{torch_facts.get('bf16_native')}), got {card['summary']}")
    fp = report["fingerprint"]
    if (fp["device_type"], fp["device_arch"], fp["torch_cuda"]) != ("cuda", torch_facts["arch"], torch_facts["cuda"]):
        failures.append(f"fingerprint says {fp['device_type']} {fp['device_arch']} CUDA {fp['torch_cuda']}")
    return failures


def torch_facts_here() -> dict:
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return {
        "arch": f"sm_{major}{minor}",
        "arch_list": torch.cuda.get_arch_list(),
        "cuda": torch.version.cuda,
        "name": torch.cuda.get_device_name(0),
        # what vLLM's dtype check stands on: bfloat16 computed by the card itself, not emulated
        "bf16_native": torch.cuda.is_bf16_supported(including_emulation=False),
    }


if __name__ == "__main__":
    facts = torch_facts_here()
    print(f"torch says: {facts}")
    problems = judge(json.load(open(sys.argv[1])), facts)
    for problem in problems:
        print(f"FAIL  {problem}")
    if not problems:
        print(f"PASS  every CUDA item agrees with torch: {facts['name']} {facts['arch']}, CUDA {facts['cuda']}")
    sys.exit(len(problems))
