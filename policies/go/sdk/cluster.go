// The round's state: the snapshot's nodes and what is free on them, the
// pending requests in the order they are served, and Commit, which
// updates the state as placements are made.

package sdk

import (
	"fmt"
	"math"
	"sort"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/wasmgpu_policy_types"
)

// gpuState is one GPU (or MIG instance) of a node as the round stands.
type gpuState struct {
	model  int
	memory uint64
	free   uint64
	held   bool
	shares uint32
	// Healthy and published by the agent (for an instance: its parent too).
	healthy bool
	group   int
	// For a MIG instance: its parent's position (-1: a whole GPU) and profile.
	migParent  int
	migProfile uint32
	// For a whole GPU: how many of its MIG instances are held.
	migHeld uint32
	// For a MIG instance: its parent is held whole or shared.
	parentBusy bool
}

// wholeFree: a whole GPU (not a MIG instance) nobody holds any part of.
func (g *gpuState) wholeFree() bool {
	return g.migParent < 0 && g.healthy && !g.held && g.shares == 0 && g.migHeld == 0 && g.free == g.memory
}

func (g *gpuState) fits(w *Want) bool {
	if !g.healthy || g.held || !w.modelOk[g.model] {
		return false
	}
	switch {
	case w.mig && g.migParent >= 0:
		return w.profile == g.migProfile && !g.parentBusy && g.memory >= w.Shape.MemoryMib
	case w.mig || g.migParent >= 0:
		return false
	case g.migHeld > 0:
		return false
	case w.exclusive():
		return g.shares == 0 && g.free == g.memory && g.memory >= w.Shape.MemoryMib
	default:
		return g.free >= w.Shape.MemoryMib
	}
}

func (g *gpuState) couldEverFit(w *Want) bool {
	if !g.healthy || !w.modelOk[g.model] {
		return false
	}
	switch {
	case w.mig && g.migParent >= 0:
		return w.profile == g.migProfile && g.memory >= w.Shape.MemoryMib
	case !w.mig && g.migParent < 0:
		return g.memory >= w.Shape.MemoryMib
	}
	return false
}

type nodeState struct {
	gpus []gpuState
	// Whole GPUs nobody holds any part of.
	freeWhole uint32
	// Healthy whole GPUs.
	healthy uint32
	hasMig  bool
	// Every GPU has the same model and memory (and none is a MIG instance):
	// exclusive fit checks are then O(1).
	uniform       bool
	uniformModel  int
	uniformMemory uint64
	// Changes on every commit to the node (unique across clones): what
	// pickCached checks its entries against.
	version uint64
}

// pickKey is everything pick's answer depends on besides the node's state.
type pickKey struct {
	node                 uint32
	model, profile       string
	hasModel, hasProfile bool
	memory               uint64
	count                uint32
	sharing              Sharing
	fit                  Fit
	nvlink               Nvlink
}

type pickEntry struct {
	version uint64
	picked  []int
}

// shapeKey is what a request asks for as far as ever fitting goes, with its
// eligible set: requests of one key fit the same nodes once idle.
type shapeKey struct {
	set                  uint32
	model, profile       string
	hasModel, hasProfile bool
	memory               uint64
	count                uint32
}

type everEntry struct {
	fits        int // 0: unknown, 1: no eligible node, 2: never, 3: not now
	cliqueKnown bool
	clique      bool
}

// Cluster is the round state: what is free on each node, updated as the
// policy places pods (Commit), so a policy never hands out the same GPU twice
// in its round. A node's Gpus list holds whole GPUs, each followed by its MIG
// instances; a whole-GPU request takes whole GPUs none of whose instances is
// held, a MIG request free instances of its profile whose parent is not used.
// A GPUResource request takes only GPUs the wasmgpu agent publishes
// (PublishedBy agent or both): a GPU published only by a DRA driver is
// invisible to it, as if absent (it reads as unhealthy). A DRA request (ask
// claims) is placed by PlaceClaims (claims.go), on its claims' candidates
// whoever publishes them.
//
// The query methods (query.go) answer for the state after the commits so far.
type Cluster struct {
	Snapshot     *Snapshot
	nodes        []nodeState
	eligibleSets [][]uint32
	// Caches that commits do not change (shared by clones).
	modelOk map[string][]bool
	ever    map[shapeKey]*everEntry
	// Picks under NvlinkRequire by node state version (shared by clones,
	// as is the clock that numbers the versions).
	picks map[pickKey]pickEntry
	clock *uint64
	// Per node: its running pods, as positions in snapshot.Running.
	runningOn [][]uint32
	// Running pods already named as victims this round.
	victimTaken []bool
	// GPUs each tenant of snapshot.Tenants holds, with this round's commits.
	tenantHeld []uint32
}

// NewCluster indexes the snapshot.
func NewCluster(s *Snapshot) *Cluster {
	c := &Cluster{Snapshot: s, modelOk: map[string][]bool{}, ever: map[shapeKey]*everEntry{}, picks: map[pickKey]pickEntry{}, clock: new(uint64)}
	c.nodes = make([]nodeState, len(s.Nodes))
	for i := range s.Nodes {
		c.nodes[i] = newNodeState(&s.Nodes[i], len(s.Models))
	}
	for _, set := range s.EligibleSets {
		var out []uint32
		for _, n := range SetMembers(set) {
			if int(n) < len(s.Nodes) {
				out = append(out, n)
			}
		}
		c.eligibleSets = append(c.eligibleSets, out)
	}
	c.runningOn = make([][]uint32, len(s.Nodes))
	for r := range s.Running {
		if n := s.Running[r].Node; int(n) < len(s.Nodes) {
			c.runningOn[n] = append(c.runningOn[n], uint32(r))
		}
	}
	c.victimTaken = make([]bool, len(s.Running))
	c.tenantHeld = make([]uint32, len(s.Tenants))
	for t := range s.Tenants {
		c.tenantHeld[t] = s.Tenants[t].Holding
	}
	return c
}

func newNodeState(node *Node, models int) nodeState {
	gpus := node.Gpus
	// NVLink groups: union-find over positions, a link joining both ends;
	// a group is named by its lowest position.
	up := make([]int, len(gpus))
	for i := range up {
		up[i] = i
	}
	find := func(i int) int {
		for up[i] != i {
			up[i] = up[up[i]]
			i = up[i]
		}
		return i
	}
	for i := range gpus {
		for _, peer := range peerPositions(node, i) {
			a, b := find(i), find(peer)
			if a != b {
				up[max(a, b)] = min(a, b)
			}
		}
	}
	st := nodeState{gpus: make([]gpuState, len(gpus))}
	for i := range gpus {
		g := &gpus[i]
		free := uint64(0)
		if g.MemoryMib > g.AllocatedMib {
			free = g.MemoryMib - g.AllocatedMib
		}
		s := gpuState{
			model:   min(int(g.Model), models),
			memory:  g.MemoryMib,
			free:    free,
			held:    g.Held,
			shares:  g.SharedOwners,
			healthy: g.Healthy && g.PublishedBy != Publisher_DraDriver,
			group:   find(i),
			// An instance naming a parent out of range reads as a whole GPU.
			migParent: -1,
		}
		if g.Mig.IsSome() && int(g.Mig.Some().Parent) < len(gpus) {
			s.migParent = int(g.Mig.Some().Parent)
			s.migProfile = g.Mig.Some().Profile
			st.hasMig = true
		}
		st.gpus[i] = s
	}
	if st.hasMig {
		for i := range st.gpus {
			g := &st.gpus[i]
			if g.migParent < 0 {
				continue
			}
			p := &st.gpus[g.migParent]
			g.parentBusy = p.held || p.shares > 0 || p.free < p.memory
			// An instance takes its parent's health.
			g.healthy = g.healthy && p.healthy
			if g.held {
				p.migHeld++
			}
		}
	}
	if len(st.gpus) > 0 && !st.hasMig {
		first := st.gpus[0]
		st.uniform = true
		for i := range st.gpus {
			if st.gpus[i].model != first.model || st.gpus[i].memory != first.memory {
				st.uniform = false
				break
			}
		}
		st.uniformModel, st.uniformMemory = first.model, first.memory
	}
	for i := range st.gpus {
		if st.gpus[i].wholeFree() {
			st.freeWhole++
		}
		if st.gpus[i].healthy && st.gpus[i].migParent < 0 {
			st.healthy++
		}
	}
	return st
}

func compareRequests(a, b *Request) int {
	if a.Priority != b.Priority {
		if a.Priority > b.Priority {
			return -1
		}
		return 1
	}
	if a.CreatedMs != b.CreatedMs {
		if a.CreatedMs < b.CreatedMs {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Pod, b.Pod)
}

// PendingInOrder is the pending positions of the GPUResource requests in the
// order they should be served: higher priority first, then older, then by
// pod name (a total order). DRA requests (ask claims) are left out: see
// DraPending, and AllPendingInOrder for both in one order.
func (c *Cluster) PendingInOrder() []uint32 { return c.pendingInOrder(pendingGpus) }

// DraPending is the pending positions of the DRA requests (ask claims), in
// the order of PendingInOrder. The GPU fit helpers do not place them;
// PlaceClaims does (a policy that decides none of them leaves them
// waiting).
func (c *Cluster) DraPending() []uint32 { return c.pendingInOrder(pendingDra) }

// AllPendingInOrder is the pending positions of every request, GPUResource
// and DRA alike, in the order of PendingInOrder (priority, then age, then
// pod name): the two lists above merged, what PlaceEach serves.
func (c *Cluster) AllPendingInOrder() []uint32 { return c.pendingInOrder(pendingAll) }

// Which pending requests pendingInOrder lists.
const (
	pendingGpus = iota
	pendingDra
	pendingAll
)

func (c *Cluster) pendingInOrder(which int) []uint32 {
	p := c.Snapshot.Pending
	var order []uint32
	for i := range p {
		_, gpus := Shape(&p[i])
		if which == pendingAll || gpus == (which == pendingGpus) {
			order = append(order, uint32(i))
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return compareRequests(&p[order[a]], &p[order[b]]) < 0 })
	return order
}

// ModelMask says, for each entry of snapshot.Models, whether the glob (or no
// glob) accepts it; one more entry, false, stands for a model out of range.
func (c *Cluster) ModelMask(glob witTypes.Option[string]) []bool {
	key := "\x00any"
	if glob.IsSome() {
		key = glob.Some()
	}
	if mask, ok := c.modelOk[key]; ok {
		return mask
	}
	mask := make([]bool, len(c.Snapshot.Models)+1)
	for i, m := range c.Snapshot.Models {
		mask[i] = glob.IsNone() || GlobMatch(glob.Some(), m)
	}
	c.modelOk[key] = mask
	return mask
}

// Want prepares the request at pending position pod for the checks below.
// A DRA request (ask claims; Want.IsDra) gets NoShape, which no GPU fits:
// PlaceClaims places it, and Shortfall and Unplaced say why it cannot be
// placed (ClaimsShortfall, ClaimsUnplaced).
func (c *Cluster) Want(pod uint32) *Want {
	r := &c.Snapshot.Pending[pod]
	shape, ok := Shape(r)
	if !ok {
		return &Want{Pod: pod, Request: r, Shape: NoShape, modelOk: c.noModel(), dra: true, claims: Claims(r)}
	}
	w := &Want{Pod: pod, Request: r, Shape: shape, modelOk: c.ModelMask(shape.Model)}
	if shape.MigProfile.IsSome() {
		w.mig, w.profile = true, noProfile
		for i, p := range c.Snapshot.MigProfiles {
			if p == shape.MigProfile.Some() {
				w.profile = uint32(i)
				break
			}
		}
	}
	return w
}

// noModel is a model mask that accepts no model (a DRA request's).
func (c *Cluster) noModel() []bool {
	const key = "\x00none"
	if mask, ok := c.modelOk[key]; ok {
		return mask
	}
	mask := make([]bool, len(c.Snapshot.Models)+1)
	c.modelOk[key] = mask
	return mask
}

// Eligible is the node positions the request may run on, ascending
// (positions past the end dropped).
func (c *Cluster) Eligible(w *Want) []uint32 {
	set := int(w.Request.EligibleSet)
	if set >= len(c.eligibleSets) {
		return nil
	}
	return c.eligibleSets[set]
}

// EligibleCount is how many nodes the request may run on.
func (c *Cluster) EligibleCount(w *Want) int { return len(c.Eligible(w)) }

// IsEligible reports whether w may run on node (a position): it is in the
// request's eligible set.
func (c *Cluster) IsEligible(w *Want, node uint32) bool {
	sets := c.Snapshot.EligibleSets
	set := int(w.Request.EligibleSet)
	return set < len(sets) && int(node) < len(c.nodes) && InSet(sets[set], node)
}

// NodeCount is the number of nodes in the snapshot.
func (c *Cluster) NodeCount() int { return len(c.nodes) }

// NodeName is the node's name.
func (c *Cluster) NodeName(node uint32) string { return c.Snapshot.Nodes[node].Name }

// FreeWhole is the number of whole GPUs on node nobody holds any part of.
func (c *Cluster) FreeWhole(node uint32) int { return int(c.nodes[node].freeWhole) }

// Healthy is the number of healthy whole GPUs on node a GPUResource request
// may take (published by the agent).
func (c *Cluster) Healthy(node uint32) int { return int(c.nodes[node].healthy) }

// Fits is true when node has Count units that fit w right now.
func (c *Cluster) Fits(node uint32, w *Want) bool {
	st := &c.nodes[node]
	count := w.Shape.Count
	if w.IsExclusiveWhole() {
		if st.freeWhole < count {
			return false
		}
		if st.uniform {
			return w.modelOk[st.uniformModel] && st.uniformMemory >= w.Shape.MemoryMib
		}
	}
	if count == 0 {
		return true
	}
	fitting := uint32(0)
	for i := range st.gpus {
		if st.gpus[i].fits(w) {
			fitting++
			if fitting >= count {
				return true
			}
		}
	}
	return false
}

// Headroom is the room left on node for requests like w: free whole GPUs for
// an exclusive request, free instances of the profile for a MIG request, free
// MiB on the GPUs a shared request could share.
func (c *Cluster) Headroom(node uint32, w *Want) uint64 {
	st := &c.nodes[node]
	if !w.mig && w.exclusive() {
		return uint64(st.freeWhole)
	}
	room := uint64(0)
	for i := range st.gpus {
		if g := &st.gpus[i]; g.fits(w) {
			if w.mig {
				room++
			} else {
				room += g.free
			}
		}
	}
	return room
}

// Commit records that w took the units at positions on node.
func (c *Cluster) Commit(node uint32, positions []uint32, w *Want) {
	st := &c.nodes[node]
	*c.clock++
	st.version = *c.clock
	for _, p := range positions {
		i := int(p)
		g := &st.gpus[i]
		if g.migParent >= 0 {
			g.held = true
			g.free = 0
			parent := &st.gpus[g.migParent]
			if parent.wholeFree() {
				st.freeWhole--
			}
			parent.migHeld++
			continue
		}
		if g.wholeFree() {
			st.freeWhole--
		}
		if w.exclusive() {
			g.held = true
			g.free = 0
		} else {
			g.shares++
			if g.free > w.Shape.MemoryMib {
				g.free -= w.Shape.MemoryMib
			} else {
				g.free = 0
			}
		}
		if st.hasMig {
			for j := range st.gpus {
				if st.gpus[j].migParent == i {
					st.gpus[j].parentBusy = true
				}
			}
		}
	}
	if w.Request.Tenant.IsSome() {
		if t := int(w.Request.Tenant.Some()); t < len(c.tenantHeld) {
			c.tenantHeld[t] = addSat32(c.tenantHeld[t], uint32(min(len(positions), math.MaxUint32)))
		}
	}
}

// Clone is a copy whose placements do not touch this one (for trials).
func (c *Cluster) Clone() *Cluster {
	copy := *c
	copy.nodes = make([]nodeState, len(c.nodes))
	for i, st := range c.nodes {
		st.gpus = append([]gpuState(nil), st.gpus...)
		copy.nodes[i] = st
	}
	copy.victimTaken = append([]bool(nil), c.victimTaken...)
	copy.tenantHeld = append([]uint32(nil), c.tenantHeld...)
	return &copy
}

// GpuNames is the GPUs at positions on node named for logs (a policy sees
// no UUIDs): node/gpu<index>, and node/gpu<index>/mig<k> for the k-th entry
// after its parent.
func (c *Cluster) GpuNames(node uint32, positions []uint32) []string {
	n := &c.Snapshot.Nodes[node]
	out := make([]string, 0, len(positions))
	for _, p := range positions {
		g := &n.Gpus[p]
		if g.Mig.IsSome() {
			out = append(out, fmt.Sprintf("%s/gpu%d/mig%d", n.Name, g.Index, int(p)-int(g.Mig.Some().Parent)-1))
		} else {
			out = append(out, fmt.Sprintf("%s/gpu%d", n.Name, g.Index))
		}
	}
	return out
}
