package sdk

import (
	"sort"

	. "wit_component/wasmgpu_policy_types"
)

// NamespaceUsage is the GPUs one namespace holds now (Usage).
type NamespaceUsage struct {
	// The namespace.
	Namespace string
	// Whole GPUs held exclusively by its pods.
	ExclusiveGpus uint32
	// Memory held through shared GPUs, in MiB (a shared pod's SharedMib on
	// each of its GPUs).
	SharedMib uint64
	// MIG instances held by its pods.
	MigInstances uint32
}

// Usage is what each namespace with running pods holds, counted from
// snapshot.Running, sorted by namespace: the shape fair-share policies weigh
// tenants by.
func Usage(s *Snapshot) []NamespaceUsage {
	by := make([]NamespaceUsage, len(s.Namespaces))
	for i, ns := range s.Namespaces {
		by[i].Namespace = ns
	}
	for r := range s.Running {
		pod := &s.Running[r]
		if int(pod.Namespace) >= len(by) {
			continue
		}
		u := &by[pod.Namespace]
		var node *Node
		if int(pod.Node) < len(s.Nodes) {
			node = &s.Nodes[pod.Node]
		}
		for _, g := range pod.Gpus {
			mig := node != nil && int(g) < len(node.Gpus) && node.Gpus[g].Mig.IsSome()
			switch {
			case pod.SharedMib > 0:
				if u.SharedMib+pod.SharedMib < u.SharedMib {
					u.SharedMib = ^uint64(0)
				} else {
					u.SharedMib += pod.SharedMib
				}
			case mig:
				u.MigInstances = addSat32(u.MigInstances, 1)
			default:
				u.ExclusiveGpus = addSat32(u.ExclusiveGpus, 1)
			}
		}
	}
	out := []NamespaceUsage{}
	for _, u := range by {
		if u.ExclusiveGpus+u.MigInstances > 0 || u.SharedMib > 0 {
			out = append(out, u)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Namespace < out[b].Namespace })
	return out
}
