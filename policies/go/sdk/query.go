package sdk

import (
	"sort"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// The read-only questions below about the round's current state read the
// same state Commit updates, so after a placement they answer for what is
// left (and inside PlaceGang's trial, for the trial). GPUs are positions in
// the node's Gpus list, as decisions name them.

// GpuNow is one GPU (or MIG instance) of a node as the round stands: what
// the snapshot said, less what placements committed in this round took.
type GpuNow struct {
	// Reported healthy by the node's agent (and published by it; for a MIG
	// instance, its parent too).
	Healthy bool
	// Held exclusively: by a running pod, or by a placement of this round.
	Held bool
	// Pods sharing it (running, and placed in this round).
	Shares uint32
	// Memory not yet handed out, in MiB.
	FreeMib uint64
	// Its memory, in MiB.
	MemoryMib uint64
	// A whole GPU nobody holds any part of: not held, not shared, none of
	// its MIG instances held. What an exclusive request can take.
	WholeFree bool
	// For a MIG instance: its parent's position in the node's Gpus list.
	MigParent witTypes.Option[uint32]
}

// Parent is MigParent as a value and an ok flag (false for a whole GPU).
func (g GpuNow) Parent() (uint32, bool) { return g.MigParent.SomeOr(0), g.MigParent.IsSome() }

// GpuCount is how many GPUs (MIG instances included) node lists.
func (c *Cluster) GpuCount(node uint32) int { return len(c.nodes[node].gpus) }

// GpuNow is GPU gpu (a position in the node's Gpus list) as the round stands.
func (c *Cluster) GpuNow(node, gpu uint32) GpuNow {
	g := &c.nodes[node].gpus[gpu]
	now := GpuNow{
		Healthy:   g.healthy,
		Held:      g.held,
		Shares:    g.shares,
		FreeMib:   g.free,
		MemoryMib: g.memory,
		WholeFree: g.wholeFree(),
		MigParent: witTypes.None[uint32](),
	}
	if g.migParent >= 0 {
		now.MigParent = witTypes.Some(uint32(g.migParent))
	}
	return now
}

// FreeGpus is the positions of node's whole GPUs that nobody holds any part
// of (healthy, not held, not shared, no MIG instance held), only those whose
// model matches the glob model ("NVIDIA H100*"); "" for any model. Their
// number for "" is FreeWhole.
func (c *Cluster) FreeGpus(node uint32, model string) []uint32 {
	gpus := c.nodes[node].gpus
	out := []uint32{}
	for i := range gpus {
		if !gpus[i].wholeFree() {
			continue
		}
		if model != "" {
			m := gpus[i].model
			if m >= len(c.Snapshot.Models) || !GlobMatch(model, c.Snapshot.Models[m]) {
				continue
			}
		}
		out = append(out, uint32(i))
	}
	return out
}

// FittingGpus is the positions of node's GPUs (or MIG instances) that could
// take w right now, one by one: what PickGpus chooses from. The node fits
// when there are at least Count of them.
func (c *Cluster) FittingGpus(node uint32, w *Want) []uint32 {
	gpus := c.nodes[node].gpus
	out := []uint32{}
	for i := range gpus {
		if gpus[i].fits(w) {
			out = append(out, uint32(i))
		}
	}
	return out
}

// Label is node's value for label key, if it has it. Only labels the policy
// asked for in Describe (Info.LabelKeys) reach it: any other key reads as
// missing.
func (c *Cluster) Label(node uint32, key string) (string, bool) {
	return Label(c.Snapshot, &c.Snapshot.Nodes[node], key)
}

// LabelFree is one value of a node label and how many GPUs on the eligible
// nodes with that value could take a request (FreeByLabel).
type LabelFree struct {
	Value string
	Free  uint32
}

// FreeByLabel is, for each value of node label key (a zone, a rack), how
// many GPUs on w's eligible nodes with that value could take w right now,
// counted one by one as in FittingGpus: free whole GPUs of the model and
// memory for an exclusive request, GPUs with the memory left for a shared
// one, free instances for a MIG one. Eligible nodes without the label are
// left out; values whose nodes have nothing free are listed with 0. Sorted
// by value (byte order), like the Rust SDK's BTreeMap.
func (c *Cluster) FreeByLabel(key string, w *Want) []LabelFree {
	at := map[string]int{}
	out := []LabelFree{}
	for _, node := range c.Eligible(w) {
		value, ok := c.Label(node, key)
		if !ok {
			continue
		}
		free := uint32(0)
		for i := range c.nodes[node].gpus {
			if c.nodes[node].gpus[i].fits(w) {
				free++
			}
		}
		k, seen := at[value]
		if !seen {
			k = len(out)
			at[value] = k
			out = append(out, LabelFree{Value: value})
		}
		out[k].Free += free
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Value < out[b].Value })
	return out
}

// FreeByLabelMap is FreeByLabel as a map from value to count.
func (c *Cluster) FreeByLabelMap(key string, w *Want) map[string]uint32 {
	out := map[string]uint32{}
	for _, e := range c.FreeByLabel(key, w) {
		out[e.Value] = e.Free
	}
	return out
}

// NvlinkGroups is node's NVLink groups: its whole GPUs (MIG instances left
// out) split into connected components of the link graph, GPUs joined by
// NVLink directly or through other GPUs of the node. Every whole GPU is in
// exactly one group (a GPU without links alone); groups are ordered by their
// first GPU, GPUs by position. The GPUs of a group need not be peers of one
// another: see NvlinkClique.
func (c *Cluster) NvlinkGroups(node uint32) [][]uint32 {
	gpus := c.nodes[node].gpus
	var groups [][]uint32
	var ids []int
	for i := range gpus {
		if gpus[i].migParent >= 0 {
			continue
		}
		k := -1
		for j, id := range ids {
			if id == gpus[i].group {
				k = j
				break
			}
		}
		if k < 0 {
			ids = append(ids, gpus[i].group)
			groups = append(groups, nil)
			k = len(groups) - 1
		}
		groups[k] = append(groups[k], uint32(i))
	}
	return groups
}

// AreNvlinkPeers reports whether GPUs a and b (positions) of node are NVLink
// peers: linked directly (either names the other in its Nvlink set).
func (c *Cluster) AreNvlinkPeers(node, a, b uint32) bool {
	return linked(&c.Snapshot.Nodes[node], int(a), int(b))
}

// IsNvlinkClique reports whether the GPUs at gpus are all NVLink peers of
// one another (an NVLink clique). One GPU, or none, is trivially one.
func (c *Cluster) IsNvlinkClique(node uint32, gpus []uint32) bool {
	for k, a := range gpus {
		for _, b := range gpus[k+1:] {
			if !c.AreNvlinkPeers(node, a, b) {
				return false
			}
		}
	}
	return true
}

// NvlinkClique is size GPUs among among (positions of node's GPUs) that are
// all NVLink peers of one another, and true; false when there are none. It
// is the first such set in among's order (so pass the GPUs you prefer
// first), in that order. To find one among the free GPUs, pass FreeGpus or
// FittingGpus. At most the first 64 of among are considered.
func (c *Cluster) NvlinkClique(node uint32, among []uint32, size int) ([]uint32, bool) {
	in := make([]int, len(among))
	for k, g := range among {
		in[k] = int(g)
	}
	found, ok := clique(&c.Snapshot.Nodes[node], in, size)
	if !ok {
		return nil, false
	}
	out := make([]uint32, len(found))
	for k, g := range found {
		out[k] = uint32(g)
	}
	return out, true
}
