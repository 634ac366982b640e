#!/usr/bin/env bash
# On a GPU node: compares what `wasmgpu agent --once` reads through NVML with
# what nvidia-smi reports (uuid, name, memory, PCI bus id, driver version), and
# lists the CDI names `nvidia-ctk` knows when the container toolkit is there.
# Usage: tests/gpu/nvml-check.sh [path/to/wasmgpu] [folder for the readings]
set -euo pipefail
bin=${1:-wasmgpu}
out=${2:-$(mktemp -d)}
mkdir -p "$out"

command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: run this on a GPU node" >&2; exit 2; }
nvidia-smi -L | tee "$out/nvidia-smi-L.txt"
nvidia-smi -q -x >"$out/nvidia-smi.xml"
nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,driver_version,mig.mode.current \
  --format=csv,noheader,nounits >"$out/nvidia-smi.csv"

"$bin" agent --once | tee "$out/agent-once.txt"
"$bin" agent --once --output json >"$out/agent-once.json"

python3 - "$out/nvidia-smi.csv" "$out/agent-once.json" <<'PY'
import csv, json, sys
smi = [[c.strip() for c in row] for row in csv.reader(open(sys.argv[1]))]
reading = json.load(open(sys.argv[2]))["reading"]
gpus = {g["index"]: g for g in reading["gpus"]}
bad = []
if len(gpus) != len(smi):
    bad.append(f"GPU count: nvidia-smi {len(smi)}, agent {len(gpus)}")
for index, uuid, name, mem_mib, bus, driver, mig in smi:
    g = gpus.get(int(index))
    if g is None:
        bad.append(f"GPU {index}: missing from the agent's reading"); continue
    checks = [
        ("uuid", uuid, g["uuid"]),
        ("name", name, g["name"]),
        ("memory MiB", int(mem_mib), g["memoryTotalBytes"] // (1 << 20)),
        ("PCI bus id", bus.upper(), g["pciBusId"].upper()),
        ("driver", driver, reading["driverVersion"]),
    ]
    for what, want, got in checks:
        ok = want == got
        print(f"GPU {index} {what:<11} nvidia-smi={want!s:<45} agent={got!s:<45} {'ok' if ok else 'DIFFERENT'}")
        if not ok:
            bad.append(f"GPU {index} {what}: nvidia-smi {want}, agent {got}")
    print(f"GPU {index} MIG mode    nvidia-smi={mig} agent={g['migMode']}")
if bad:
    print("\n".join(["MISMATCH:"] + bad)); sys.exit(1)
print(f"agent and nvidia-smi agree on {len(smi)} GPU(s)")
PY

if command -v nvidia-ctk >/dev/null; then
  nvidia-ctk cdi list | tee "$out/cdi-list.txt"
else
  echo "nvidia-ctk not installed: CDI names not checked"
fi
