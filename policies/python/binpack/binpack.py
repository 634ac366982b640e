"""binpack: fills the fullest node that still fits, so pods land on as few
nodes as possible and whole nodes stay free for large jobs. Within a node, a
multi-GPU exclusive request takes the smallest NVLink group that holds it; a
shared request takes the GPUs with the least free memory that fits. A DRA
request (ask `claims`) goes to the node with the fewest idle whole GPUs left
after its devices are picked (`Cluster.place_claims`). It reads no node
labels. It decides byte for byte what the Rust binpack (policies/binpack)
decides.

Parameters (config.json, all optional), those of the Rust binpack:

    {"nvlink": "prefer", "preemption": true}

`nvlink`: "prefer" (the default) keeps a multi-GPU exclusive request in one
NVLink group when a node has one that holds it, else takes any free GPUs;
"require" gives it only GPUs that are all NVLink peers of one another, and
leaves it waiting otherwise; "ignore" disregards NVLink. The older
`"preferNvlink": true | false` still reads as "prefer" | "ignore".
`preemption` (default true): a pod that fits nowhere now evicts the fewest
pods of lower priority that make room (lowest priority first, then
youngest); false leaves it waiting.
"""

from typing import List

from wasmgpu_policy import Fit, export_policy, info, place_each
from wit_world.imports import types as t


def describe() -> t.Info:
    # No label keys: binpack reads none.
    return info("binpack", "0.3.0", "Fill the fullest node that fits first; fewest nodes touched")


def allocate(snapshot: t.Snapshot) -> List[t.Decision]:
    return place_each(snapshot, Fit.TIGHTEST)


# The component's exports (componentize-py looks for `WitWorld`).
WitWorld = export_policy(describe, allocate)
