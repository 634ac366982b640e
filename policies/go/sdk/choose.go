// Choosing a node for a request, and why nothing fits (Shortfall).

package sdk

import (
	"wit_component/sdk/reason"
)

// ChooseNode is the eligible node that fits w with the least (Tightest) or
// most (Loosest) headroom; ties go to the lowest position. ok is false when
// none fits.
func (c *Cluster) ChooseNode(w *Want, fit Fit) (node uint32, ok bool) {
	var bestRoom uint64
	for _, n := range c.Eligible(w) {
		// MIG requests fit only nodes that list instances.
		if (w.mig && !c.nodes[n].hasMig) || !c.Fits(n, w) {
			continue
		}
		room := c.Headroom(n, w)
		if !ok || (fit == Tightest && room < bestRoom) || (fit == Loosest && room > bestRoom) {
			node, bestRoom, ok = n, room, true
		}
	}
	return node, ok
}

// ChooseNodeWith is ChooseNode for a request placed under nvlink. Only
// NvlinkRequire changes the choice (for a request it applies to, see
// Want.UsesNvlink): a node fits when it has Count free GPUs that are all
// NVLink peers of one another.
func (c *Cluster) ChooseNodeWith(w *Want, fit Fit, nvlink Nvlink) (node uint32, ok bool) {
	if nvlink != NvlinkRequire || !w.UsesNvlink(nvlink) {
		return c.ChooseNode(w, fit)
	}
	var bestRoom uint64
	for _, n := range c.Eligible(w) {
		if !c.Fits(n, w) || c.pickCached(n, w, fit, nvlink) == nil {
			continue
		}
		room := c.Headroom(n, w)
		if !ok || (fit == Tightest && room < bestRoom) || (fit == Loosest && room > bestRoom) {
			node, bestRoom, ok = n, room, true
		}
	}
	return node, ok
}

func (c *Cluster) everOf(w *Want) *everEntry {
	s := &w.Shape
	key := shapeKey{set: w.Request.EligibleSet, memory: s.MemoryMib, count: s.Count}
	if s.Model.IsSome() {
		key.model, key.hasModel = s.Model.Some(), true
	}
	if s.MigProfile.IsSome() {
		key.profile, key.hasProfile = s.MigProfile.Some(), true
	}
	e, ok := c.ever[key]
	if !ok {
		e = &everEntry{}
		c.ever[key] = e
	}
	return e
}

// gpuShortfall is Shortfall for a GPUResource request.
func (c *Cluster) gpuShortfall(w *Want) Shortfall {
	e := c.everOf(w)
	if e.fits == 0 {
		e.fits = c.everFits(w)
	}
	switch e.fits {
	case 1:
		return Shortfall{Kind: NoEligibleNode}
	case 3:
		return Shortfall{Kind: NotNow, What: w.Describe()}
	default:
		return Shortfall{Kind: Never, What: w.Describe()}
	}
}

// everFits: 1 when no node is eligible, 3 when an eligible node could hold
// w once idle, else 2.
func (c *Cluster) everFits(w *Want) int {
	eligible := c.Eligible(w)
	if len(eligible) == 0 {
		return 1
	}
	count := int(w.Shape.Count)
	for _, n := range eligible {
		st := &c.nodes[n]
		if st.uniform && !w.mig {
			if w.modelOk[st.uniformModel] && st.uniformMemory >= w.Shape.MemoryMib && int(st.healthy) >= count {
				return 3
			}
			continue
		}
		could := 0
		for i := range st.gpus {
			if st.gpus[i].couldEverFit(w) {
				could++
			}
		}
		if could >= count {
			return 3
		}
	}
	return 2
}

// gpuShortfallWith is ShortfallWith for a GPUResource request.
func (c *Cluster) gpuShortfallWith(w *Want, nvlink Nvlink) Shortfall {
	s := c.gpuShortfall(w)
	if nvlink != NvlinkRequire || !w.UsesNvlink(nvlink) || s.Kind != NotNow {
		return s
	}
	e := c.everOf(w)
	if !e.cliqueKnown {
		e.clique, e.cliqueKnown = c.everClique(w), true
	}
	what := reason.AskedShape(&w.Shape) + " that are all NVLink peers of one another"
	if e.clique {
		return Shortfall{Kind: NotNow, What: what}
	}
	return Shortfall{Kind: Never, What: what}
}

// everClique: an eligible node has, once idle, Count GPUs that could hold w
// and are all NVLink peers of one another.
func (c *Cluster) everClique(w *Want) bool {
	count := int(w.Shape.Count)
	for _, n := range c.Eligible(w) {
		gpus := c.nodes[n].gpus
		var able []int
		for i := range gpus {
			if gpus[i].couldEverFit(w) {
				able = append(able, i)
			}
		}
		if len(able) >= count {
			if _, ok := clique(&c.Snapshot.Nodes[n], able, count); ok {
				return true
			}
		}
	}
	return false
}
