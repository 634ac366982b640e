// Binpack, the Go SDK's policy: it fills the fullest node that still fits,
// so pods land on as few nodes as possible and whole nodes stay free for
// large jobs. Within a node, a multi-GPU exclusive request takes the smallest
// NVLink group that holds it; a shared request takes the GPUs with the least
// free memory that fits. It reads no node labels. A DRA request (ask claims)
// goes to the node with the fewest idle whole GPUs left once its claims'
// devices are taken (sdk.Cluster.PlaceClaims). It decides what the Rust
// binpack decides (sdk.PlaceEach).
//
// Parameters (config.json, all optional), as the Rust binpack's:
//
//	{"nvlink": "prefer", "preemption": true}
//
// nvlink: "prefer" (the default) keeps a multi-GPU exclusive request in one
// NVLink group when a node has one that holds it, else takes any free GPUs
// of the node; "require" gives it only GPUs that are all NVLink peers of one
// another and leaves it waiting otherwise; "ignore" disregards NVLink. The
// older "preferNvlink": true | false reads as "prefer" | "ignore".
// preemption (default true): a pod that fits nowhere now evicts the fewest
// pods of lower priority that make room; false leaves it waiting.
package main

import (
	"wit_component/component"
	"wit_component/sdk"
	. "wit_component/wasmgpu_policy_types"
)

// The component's exports are this policy's Describe and Allocate.
func init() { component.Export(Describe, Allocate) }

// main is never called (the component is a library), but Go wants one.
func main() {}

// Describe says who the policy is (no label keys: binpack reads none).
func Describe() Info {
	return sdk.NewInfo("binpack", "0.3.0", "Fill the fullest node that fits first; fewest nodes touched")
}

// Allocate decides one round.
func Allocate(snapshot Snapshot) []Decision {
	return sdk.PlaceEach(&snapshot, sdk.Tightest)
}
