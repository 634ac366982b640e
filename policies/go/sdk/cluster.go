package sdk

import (
	"fmt"
	"math"
	"sort"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/sdk/reason"
	. "wit_component/wasmgpu_policy_types"
)

// Fit says which end to prefer when several candidates fit.
type Fit int

const (
	// Tightest prefers the candidate with the least room left that still fits (packing).
	Tightest Fit = iota
	// Loosest prefers the candidate with the most room (spreading).
	Loosest
)

// Shortfall says why a request cannot be placed this round.
type Shortfall struct {
	Kind ShortfallKind
	// What is missing, in words (a reason.Asked or reason.AskedNvlink
	// phrase); empty for NoEligibleNode.
	What string
}

// ShortfallKind is the kind of Shortfall.
type ShortfallKind int

const (
	// NoEligibleNode: the request has no eligible node at all.
	NoEligibleNode ShortfallKind = iota
	// Never: no eligible node could hold it even if all its GPUs were free.
	Never
	// NotNow: some eligible node could hold it once GPUs are released.
	NotNow
)

// Permanent is true when waiting cannot help (the decision is a reject).
func (s Shortfall) Permanent() bool { return s.Kind != NotNow }

// Reason is the shortfall in the SDK's standard words (package reason).
func (s Shortfall) Reason() string {
	switch s.Kind {
	case NoEligibleNode:
		return reason.NoEligibleNode()
	case Never:
		return reason.Never(s.What)
	default:
		return reason.NotNow(s.What)
	}
}

// DescribeRequest is what the request asks for, in words (reason.Asked).
func DescribeRequest(r *Request) string { return reason.Asked(r) }

// DescribeShape is what a GPUResource shape asks for, in words
// (reason.AskedShape).
func DescribeShape(r *GpuShape) string { return reason.AskedShape(r) }

// noProfile is the profile a MIG request gets when no instance of the
// snapshot has the profile it names.
const noProfile = math.MaxUint32

// Want is a pending request prepared for the fit checks (see Cluster.Want).
type Want struct {
	// The request's position in snapshot.Pending: what decisions name.
	Pod     uint32
	Request *Request
	// What it asks for: its GPUResource's shape (NoShape for a DRA request,
	// which fits nowhere through the GPU fit helpers: place it with
	// PlaceClaims).
	Shape   GpuShape
	modelOk []bool
	// For a MIG request: the profile, as an index into snapshot.MigProfiles
	// (noProfile when none has its name).
	mig     bool
	profile uint32
	// A DRA request (ask claims), and its claims.
	dra    bool
	claims []Claim
}

func (w *Want) exclusive() bool { return w.Shape.Sharing == Sharing_Exclusive }

// IsMig is true when the request asks for MIG instances, not whole GPUs.
func (w *Want) IsMig() bool { return w.mig }

// IsExclusiveWhole is true when the request asks for whole GPUs of its own
// (not shares, not MIG instances).
func (w *Want) IsExclusiveWhole() bool { return w.exclusive() && !w.mig }

// UsesNvlink is true when nvlink changes which GPUs the request gets: an
// exclusive request for more than one whole GPU, and nvlink is not
// NvlinkIgnore.
func (w *Want) UsesNvlink(nvlink Nvlink) bool {
	return nvlink != NvlinkIgnore && w.IsExclusiveWhole() && w.Shape.Count > 1
}

// Describe is what the request asks for, in words (reason.Asked).
func (w *Want) Describe() string {
	if w.dra {
		return reason.Asked(w.Request)
	}
	return reason.AskedShape(&w.Shape)
}

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

func addSat32(a, b uint32) uint32 {
	if a > math.MaxUint32-b {
		return math.MaxUint32
	}
	return a + b
}

// Place picks (PickGpus), commits and returns the assign decision; ok is
// false when node does not fit.
func (c *Cluster) Place(node uint32, w *Want, fit Fit, preferNvlink bool) (Decision, bool) {
	return c.PlaceWith(node, w, fit, NvlinkFromBool(preferNvlink))
}

// PlaceWith picks (PickGpusWith, under nvlink), commits and returns the
// assign decision; ok is false when node does not fit.
func (c *Cluster) PlaceWith(node uint32, w *Want, fit Fit, nvlink Nvlink) (Decision, bool) {
	positions := c.PickGpusWith(node, w, fit, nvlink)
	if positions == nil {
		return Decision{}, false
	}
	c.Commit(node, positions, w)
	return Assign(w.Pod, node, positions), true
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

// Shortfall says why w fits on none of its eligible nodes (for a DRA
// request, ClaimsShortfall).
func (c *Cluster) Shortfall(w *Want) Shortfall {
	if w.dra {
		return c.ClaimsShortfall(w)
	}
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

// ShortfallWith is Shortfall for a request placed under nvlink. With
// NvlinkRequire (for a request it applies to), what is missing is Count GPUs
// that are all NVLink peers of one another (reason.AskedNvlink): NotNow when
// an eligible node has such a set once idle, Never when none has.
func (c *Cluster) ShortfallWith(w *Want, nvlink Nvlink) Shortfall {
	s := c.Shortfall(w)
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

// Unplaced is wait (GPUs may free up) or reject (it can never fit) for a
// request placed nowhere (for a DRA request, ClaimsUnplaced).
func (c *Cluster) Unplaced(w *Want) Decision { return c.UnplacedWith(w, NvlinkPrefer) }

// UnplacedWith is Unplaced for a request placed under nvlink: with
// NvlinkRequire the reason says the GPUs must be NVLink peers (see
// ShortfallWith). For a DRA request it is ClaimsUnplaced.
func (c *Cluster) UnplacedWith(w *Want, nvlink Nvlink) Decision {
	if w.dra {
		return c.ClaimsUnplaced(w)
	}
	s := c.ShortfallWith(w, nvlink)
	if s.Permanent() {
		return Reject(w.Pod, s.Reason())
	}
	return Wait(w.Pod, s.Reason())
}

type left struct {
	want      *Want
	shortfall Shortfall
}

// PlaceGang is PlaceGangWith with the older preferNvlink flag: true is
// NvlinkPrefer, false NvlinkIgnore.
func (c *Cluster) PlaceGang(gang uint32, fit Fit, preferNvlink bool) []Decision {
	return c.PlaceGangWith(gang, fit, NvlinkFromBool(preferNvlink))
}

// PlaceGangWith places the pending members of gang (an index into
// snapshot.Gangs) all together or not at all: each member, in order, goes
// where ChooseNodeWith and PickGpusWith put it under nvlink, on a trial copy
// of the round's state. When enough fit to reach the gang's MinMember with
// the members already bound, the trial becomes the state and the members
// that fit are assigned (the others wait); otherwise nothing is committed
// and every member waits, with the reason. A member that can never fit is
// rejected on its own reason; when without such members the gang could
// never reach MinMember, every member is rejected, naming the one that fits
// nowhere. The host applies a gang's assignments on the same rule. A DRA
// member (ask claims) gets no decision and is not placed; it counts as a
// member that may fit later.
func (c *Cluster) PlaceGangWith(gang uint32, fit Fit, nvlink Nvlink) []Decision {
	if int(gang) >= len(c.Snapshot.Gangs) {
		return nil
	}
	g := &c.Snapshot.Gangs[gang]
	pending := c.Snapshot.Pending
	var members []uint32
	for _, p := range g.Pending {
		if int(p) < len(pending) {
			members = append(members, p)
		}
	}
	sort.SliceStable(members, func(a, b int) bool {
		return compareRequests(&pending[members[a]], &pending[members[b]]) < 0
	})
	dra := 0
	kept := members[:0]
	for _, p := range members {
		if _, ok := Shape(&pending[p]); ok {
			kept = append(kept, p)
		} else {
			dra++
		}
	}
	members = kept
	need := 0
	if g.MinMember > g.Bound {
		need = int(g.MinMember - g.Bound)
	}
	trial := c.Clone()
	var placed []Decision
	var lefts []left
	for _, pod := range members {
		w := trial.Want(pod)
		var d Decision
		ok := false
		if node, found := trial.ChooseNodeWith(w, fit, nvlink); found {
			d, ok = trial.PlaceWith(node, w, fit, nvlink)
		}
		if ok {
			placed = append(placed, d)
		} else {
			lefts = append(lefts, left{w, trial.ShortfallWith(w, nvlink)})
		}
	}
	// Members that can never fit are rejected on their own; the gang waits
	// for the others as long as they could still reach its MinMember.
	var never, later []left
	for _, l := range lefts {
		if l.shortfall.Permanent() {
			never = append(never, l)
		} else {
			later = append(later, l)
		}
	}
	if len(placed)+len(later)+dra < need {
		why := reason.GangShort(g.Name, len(placed), need, g.Bound, g.MinMember)
		if len(never) > 0 {
			why = reason.GangNever(g.Name, never[0].want.Request.Pod, never[0].shortfall.Reason())
		}
		out := make([]Decision, 0, len(members))
		for _, d := range placed {
			out = append(out, Reject(d.Assign().Pod, why))
		}
		for _, l := range later {
			out = append(out, Reject(l.want.Pod, why))
		}
		for _, l := range never {
			out = append(out, Reject(l.want.Pod, why))
		}
		return out
	}
	var rejected []Decision
	for _, l := range never {
		rejected = append(rejected, Reject(l.want.Pod, l.shortfall.Reason()))
	}
	if len(placed) >= need {
		*c = *trial
		why := reason.GangPlacedWithout(g.Name, len(placed), need)
		for _, l := range later {
			placed = append(placed, Wait(l.want.Pod, why))
		}
		return append(placed, rejected...)
	}
	why := reason.GangShort(g.Name, len(placed), need, g.Bound, g.MinMember)
	out := make([]Decision, 0, len(members))
	for _, d := range placed {
		out = append(out, Wait(d.Assign().Pod, why))
	}
	for _, l := range later {
		out = append(out, Wait(l.want.Pod, why))
	}
	return append(out, rejected...)
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
