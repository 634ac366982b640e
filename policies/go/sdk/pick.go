// Picking the GPUs on a chosen node: the tightest or loosest fit, and for
// a multi-GPU exclusive request, NVLink peers.

package sdk

import (
	"sort"
)

// PickGpus is PickGpusWith with the older preferNvlink flag: true is
// NvlinkPrefer, false NvlinkIgnore.
func (c *Cluster) PickGpus(node uint32, w *Want, fit Fit, preferNvlink bool) []uint32 {
	return c.PickGpusWith(node, w, fit, NvlinkFromBool(preferNvlink))
}

// PickGpusWith chooses Count units on node for w, as positions in the node's
// Gpus list (ascending); nil when the node does not fit.
//
//   - An exclusive request for more than one whole GPU follows nvlink:
//     NvlinkPrefer takes the GPUs from one NVLink group (connected, not
//     necessarily all peers of one another), the tightest group that holds
//     the request for Tightest, the largest for Loosest, and falls back to
//     the first free GPUs when no group holds it; NvlinkRequire takes GPUs
//     that are all NVLink peers of one another (the first such set in the
//     tightest, or largest, group that has one) and gives nil when there is
//     none, never falling back; NvlinkIgnore takes the first free GPUs.
//   - A shared request takes the GPUs with the least (Tightest) or most
//     (Loosest) free memory.
//   - A MIG request takes instances of parents with the fewest (most)
//     instances still free.
func (c *Cluster) PickGpusWith(node uint32, w *Want, fit Fit, nvlink Nvlink) []uint32 {
	var picked []int
	if nvlink == NvlinkRequire && w.UsesNvlink(nvlink) {
		picked = c.pickCached(node, w, fit, nvlink)
	} else {
		picked = c.pick(node, w, fit, nvlink)
	}
	if picked == nil {
		return nil
	}
	out := make([]uint32, len(picked))
	for k, i := range picked {
		out[k] = uint32(i)
	}
	return out
}

// pickCached is pick, remembered until the next commit to the node: a
// Require search for a clique on every eligible node is the costly part of
// ChooseNodeWith.
func (c *Cluster) pickCached(node uint32, w *Want, fit Fit, nvlink Nvlink) []int {
	s := &w.Shape
	key := pickKey{node: node, memory: s.MemoryMib, count: s.Count, sharing: s.Sharing, fit: fit, nvlink: nvlink}
	if s.Model.IsSome() {
		key.model, key.hasModel = s.Model.Some(), true
	}
	if s.MigProfile.IsSome() {
		key.profile, key.hasProfile = s.MigProfile.Some(), true
	}
	version := c.nodes[node].version
	if e, ok := c.picks[key]; ok && e.version == version {
		return e.picked
	}
	picked := c.pick(node, w, fit, nvlink)
	c.picks[key] = pickEntry{version, picked}
	return picked
}

func (c *Cluster) pick(node uint32, w *Want, fit Fit, nvlink Nvlink) []int {
	gpus := c.nodes[node].gpus
	count := int(w.Shape.Count)
	cand := make([]int, 0, len(gpus))
	for i := range gpus {
		if gpus[i].fits(w) {
			cand = append(cand, i)
		}
	}
	if len(cand) < count {
		return nil
	}
	switch {
	case w.mig:
		// Pack (or spread) instances by how many of their parent's instances
		// are still free: fewest free first packs them onto the fewest
		// parents. Stable: ties keep position order.
		key := make(map[int]int, len(cand))
		for _, i := range cand {
			for j := range gpus {
				if gpus[j].migParent == gpus[i].migParent && !gpus[j].held {
					key[i]++
				}
			}
		}
		sort.SliceStable(cand, func(a, b int) bool {
			if fit == Tightest {
				return key[cand[a]] < key[cand[b]]
			}
			return key[cand[a]] > key[cand[b]]
		})
	case w.exclusive():
		if nvlink == NvlinkRequire && count > 1 {
			return c.pickClique(node, cand, count, fit)
		}
		if nvlink == NvlinkPrefer && count > 1 {
			// The NVLink groups among the candidates, in order of first
			// appearance; the first of the tightest (loosest) that holds
			// count wins.
			bestGroup, bestSize := -1, 0
			for k, i := range cand {
				group := gpus[i].group
				seen := false
				for _, j := range cand[:k] {
					if gpus[j].group == group {
						seen = true
						break
					}
				}
				if seen {
					continue
				}
				size := 0
				for _, j := range cand {
					if gpus[j].group == group {
						size++
					}
				}
				if size < count {
					continue
				}
				if bestGroup < 0 || (fit == Tightest && size < bestSize) || (fit == Loosest && size > bestSize) {
					bestGroup, bestSize = group, size
				}
			}
			if bestGroup >= 0 {
				kept := cand[:0]
				for _, i := range cand {
					if gpus[i].group == bestGroup {
						kept = append(kept, i)
					}
				}
				cand = kept
			}
		}
	default:
		sort.SliceStable(cand, func(a, b int) bool {
			if fit == Tightest {
				return gpus[cand[a]].free < gpus[cand[b]].free
			}
			return gpus[cand[a]].free > gpus[cand[b]].free
		})
	}
	cand = cand[:count]
	sort.Ints(cand)
	return cand
}

// pickClique is count of cand (free GPUs of node) that are all NVLink peers
// of one another: groups are tried tightest (loosest) first, as NvlinkPrefer
// orders them, and the first clique of the first group that has one wins.
func (c *Cluster) pickClique(node uint32, cand []int, count int, fit Fit) []int {
	gpus := c.nodes[node].gpus
	type groupSize struct{ group, size int }
	var groups []groupSize
	for _, i := range cand {
		found := false
		for k := range groups {
			if groups[k].group == gpus[i].group {
				groups[k].size++
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, groupSize{gpus[i].group, 1})
		}
	}
	kept := groups[:0]
	for _, g := range groups {
		if g.size >= count {
			kept = append(kept, g)
		}
	}
	sort.SliceStable(kept, func(a, b int) bool {
		if fit == Tightest {
			return kept[a].size < kept[b].size
		}
		return kept[a].size > kept[b].size
	})
	n := &c.Snapshot.Nodes[node]
	for _, g := range kept {
		var members []int
		for _, i := range cand {
			if gpus[i].group == g.group {
				members = append(members, i)
			}
		}
		if found, ok := clique(n, members, count); ok {
			return found
		}
	}
	return nil
}
