#!/usr/bin/env python3
"""A full cluster from a generated snapshot, for preemption at scale.

Reads a snapshot written by `wasmgpu policy generate-snapshot` (which lists
no running pod) and writes it with up to five of each node's free GPUs held,
each by a running pod of priority 0 in namespace 0, listed in `running`: the
pending pods (priority 0-2) then mostly fit nowhere without evicting.

    python3 tests/bench/full_cluster.py IN.json OUT.json
"""

import json
import sys


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        snapshot = json.load(f)
    running = []
    for n, node in enumerate(snapshot["nodes"]):
        free = [g for g, gpu in enumerate(node["gpus"])
                if not gpu.get("held") and gpu.get("allocatedMiB", 0) == 0]
        for g in free[:5]:
            gpu = node["gpus"][g]
            gpu["held"] = True
            gpu["allocatedMiB"] = gpu["memoryMiB"]
            running.append({
                "pod": f"ml/run-{len(running)}", "namespace": 0, "tenant": None,
                "priority": 0, "node": n, "gpus": [g], "sharedMiB": 0,
                "startedMs": 1, "gang": None, "evictable": True, "protectedMs": 0,
            })
    snapshot["running"] = running
    with open(sys.argv[2], "w") as f:
        json.dump(snapshot, f)
    print(f"{len(running)} running pods", file=sys.stderr)


if __name__ == "__main__":
    main()
