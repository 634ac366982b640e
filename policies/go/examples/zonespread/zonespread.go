// Package zonespread is a complete small policy written with the Go SDK's
// query API (the one policies/go/README.md shows): each pod goes to the zone
// (node label topology.kubernetes.io/zone) with the most GPUs that could take
// it now, a pod of several whole GPUs only on GPUs that are all NVLink peers
// of one another, and only on GPUs with at least config.json's minFreeMib of
// memory free. Nodes without the label are not used.
//
// To ship it, hand these two functions to component.Export in a main
// package's init, as the starter of `wasmgpu policy new NAME --lang go` does
// with its own, and build that module with build.sh --policy DIR.
package zonespread

import (
	"sort"

	"wit_component/sdk"
	. "wit_component/wasmgpu_policy_types"
)

// ZoneKey is the node label the policy spreads over; Describe asks for it.
const ZoneKey = "topology.kubernetes.io/zone"

// Params is config.json, all optional: {"minFreeMib": 20000}.
type Params struct {
	// GPUs with less memory free than this (MiB) are not used.
	MinFreeMib uint64 `json:"minFreeMib" wasmgpu:"min=0,max=1048576"`
}

// Describe says who the policy is and which node label it reads.
func Describe() Info {
	return sdk.NewInfo("zone-spread", "0.1.0", "Spread pods across zones, multi-GPU pods on NVLink peers", ZoneKey)
}

// Allocate decides one round. An invalid config.json fails it.
func Allocate(snapshot Snapshot) []Decision {
	var params Params
	sdk.MustParseConfig(snapshot.Config, &params)
	c := sdk.NewCluster(&snapshot)
	var decisions []Decision
	for _, pod := range c.PendingInOrder() { // DRA requests are left out: they wait
		w := c.Want(pod)
		d, ok := place(c, w, params.MinFreeMib)
		if !ok {
			// wait or reject in the standard words (which know nothing of
			// the zones or the floor).
			d = c.UnplacedWith(w, sdk.NvlinkRequire)
		}
		decisions = append(decisions, d)
	}
	return decisions
}

// place commits w to the first zone, roomiest first, that has a node with
// GPUs for it, and returns the assignment.
func place(c *sdk.Cluster, w *sdk.Want, floor uint64) (Decision, bool) {
	zones := c.FreeByLabel(ZoneKey, w) // sorted by zone name
	sort.SliceStable(zones, func(a, b int) bool { return zones[a].Free > zones[b].Free })
	for _, zone := range zones {
		for _, node := range c.Eligible(w) {
			if value, ok := c.Label(node, ZoneKey); !ok || value != zone.Value {
				continue
			}
			if gpus, ok := pick(c, node, w, floor); ok {
				c.Commit(node, gpus, w) // later questions see these GPUs taken
				return sdk.Assign(w.Pod, node, gpus), true
			}
		}
	}
	return Decision{}, false
}

// pick is Count of the node's GPUs that could take w now and have floor MiB
// free: for several whole GPUs, the first set of NVLink peers.
func pick(c *sdk.Cluster, node uint32, w *sdk.Want, floor uint64) ([]uint32, bool) {
	var roomy []uint32
	for _, g := range c.FittingGpus(node, w) {
		if c.GpuNow(node, g).FreeMib >= floor {
			roomy = append(roomy, g)
		}
	}
	count := int(w.Shape.Count)
	if len(roomy) < count {
		return nil, false
	}
	if w.IsExclusiveWhole() && count > 1 {
		return c.NvlinkClique(node, roomy, count)
	}
	return roomy[:count], true
}
