package sdk

import (
	"sort"
	"strings"

	"wit_component/sdk/reason"
	. "wit_component/wasmgpu_policy_types"
)

// Preemption by priority: when a pending pod fits nowhere now, find the node
// where evicting the fewest lower-priority pods makes room, and name exactly
// those pods (the host refuses a needless victim).
//
//	eligible node ── running pods there: lower priority, evictable, past
//	     │           their minimum runtime, not yet a victim; a gang
//	     │           member only if every running member of its gang is
//	     │           (lowest priority first, pods in no gang first, then
//	     │           youngest)
//	     ▼
//	release them one by one on a copy of the node until the pod fits (a
//	gang's members on the node together)
//	     ▼
//	victims = those holding a GPU the pod is given (or its MIG parent or
//	instance), each gang among them with all its running members, on any
//	node; best node: fewest victims, then lowest priorities, then lowest
//	position
//
// Exclusive, MIG and DRA requests preempt (a DRA request's devices are found
// on the node as PlaceClaims finds them, and the decision carries its claim
// choices); shared requests (which take part of a GPU) and gang members do
// not, nor pods whose preemptionPolicy is Never.

// Preempt is a preempt decision for w (see above), committed to this round's
// state: its GPUs are taken, its victims may not be named again. ok is false
// when the pod may not preempt or no eviction makes room. The victims are
// running pods of lower priority than w's. For a DRA request the nodes
// searched are those PlaceClaims searches, and the assignment has empty Gpus
// and the claim choices, as PlaceClaims's has.
func (c *Cluster) Preempt(w *Want, fit Fit, nvlink Nvlink) (Decision, bool) {
	if w == nil {
		return Decision{}, false
	}
	priority := w.Request.Priority
	return c.PreemptWhere(w, fit, nvlink, func(pod *Running) bool { return pod.Priority < priority })
}

// PreemptWhere is Preempt with another rule for who may be evicted: running
// pods for which mayEvict holds (and which are evictable, past their minimum
// runtime, not yet a victim; a gang member only when all its gang's running
// members are, and then with all of them). Reclaim names pods of tenants over
// their quota this way, whatever their priority; the host checks the rule it
// applies (docs/POLICIES.md).
func (c *Cluster) PreemptWhere(w *Want, fit Fit, nvlink Nvlink, mayEvict func(*Running) bool) (Decision, bool) {
	if w == nil {
		return Decision{}, false
	}
	r := w.Request
	if r.Preemption == PreemptionPolicy_Never || r.Gang.IsSome() || !w.exclusive() {
		return Decision{}, false
	}
	nodes := c.Eligible(w)
	if w.dra {
		nodes = c.claimNodes(r, w.claims)
	}
	var best *preemption
	for _, node := range nodes {
		option := c.preemptOn(node, w, fit, nvlink, mayEvict)
		if option != nil && (best == nil || option.better(best)) {
			best = option
		}
	}
	if best == nil {
		return Decision{}, false
	}
	c.Commit(best.node, best.gpus, w)
	for _, v := range best.victims {
		c.victimTaken[v] = true
	}
	if !w.dra {
		return Preempt(w.Pod, best.node, best.gpus, best.victims), true
	}
	// A DRA request's devices are named by its claim choices.
	return MakeDecisionPreempt(Preemption{
		Assignment: Assignment{Pod: w.Pod, Node: best.node, Gpus: []uint32{}, Claims: best.claims},
		Victims:    best.victims,
	}), true
}

// preemption is one node's best preemption.
type preemption struct {
	victims []uint32
	// The sum of the victims' priorities.
	priorities int64
	node       uint32
	// Where the preemptor goes once the victims are gone: the GPUs
	// (positions on the node), and for a DRA request the claim choices that
	// name them.
	gpus   []uint32
	claims []ClaimChoice
}

func (a *preemption) better(b *preemption) bool {
	if len(a.victims) != len(b.victims) {
		return len(a.victims) < len(b.victims)
	}
	if a.priorities != b.priorities {
		return a.priorities < b.priorities
	}
	return a.node < b.node
}

// PreemptionBlocked says why w could not preempt although pods of lower
// priority run where it may go: how many a PodDisruptionBudget protects now
// (reason.PreemptionBlocked), and how many are within their minimum runtime,
// with when the first is past it (reason.PreemptionMinimumRuntime), joined by
// "; ". ok is false when none is (or w may never preempt). PlaceEach appends
// it to the wait reason, after "; ".
func (c *Cluster) PreemptionBlocked(w *Want) (string, bool) {
	if w == nil || w.Request.Preemption == PreemptionPolicy_Never {
		return "", false
	}
	protected, young := 0, 0
	var first uint64
	for _, node := range c.Eligible(w) {
		for _, r := range c.runningOn[node] {
			pod := &c.Snapshot.Running[r]
			if pod.Priority >= w.Request.Priority {
				continue
			}
			if !pod.Evictable {
				protected++
			} else if pod.ProtectedMs > 0 {
				if young == 0 || pod.ProtectedMs < first {
					first = pod.ProtectedMs
				}
				young++
			}
		}
	}
	var why []string
	if protected > 0 {
		why = append(why, reason.PreemptionBlocked(protected))
	}
	if young > 0 {
		// Whole seconds, rounded up (Rust's div_ceil, without overflow).
		seconds := first / 1000
		if first%1000 != 0 {
			seconds++
		}
		why = append(why, reason.PreemptionMinimumRuntime(young, seconds))
	}
	if len(why) == 0 {
		return "", false
	}
	return strings.Join(why, "; "), true
}

// OverTenantLimit is a wait for w when its tenant (snapshot.Tenants) could
// not take its GPUs without passing its limit, counting this round's
// commits: the host would refuse the assignment. ok is false when it may. A
// DRA request counts Want.Devices (its first alternatives); PlaceClaims
// checks what it actually picks too.
func (c *Cluster) OverTenantLimit(w *Want) (Decision, bool) {
	if w == nil || w.Request.Tenant.IsNone() {
		return Decision{}, false
	}
	t := int(w.Request.Tenant.Some())
	if t >= len(c.Snapshot.Tenants) {
		return Decision{}, false
	}
	tenant := &c.Snapshot.Tenants[t]
	if tenant.Limit.IsNone() {
		return Decision{}, false
	}
	limit := tenant.Limit.Some()
	held := uint32(0)
	if t < len(c.tenantHeld) {
		held = c.tenantHeld[t]
	}
	needs := w.Devices()
	if addSat32(held, needs) <= limit {
		return Decision{}, false
	}
	return Wait(w.Pod, reason.TenantLimit(tenant.Name, held, limit, needs)), true
}

// TenantHeld is the GPUs tenant (an index into snapshot.Tenants) holds, with
// this round's commits.
func (c *Cluster) TenantHeld(tenant uint32) uint32 {
	if int(tenant) < len(c.tenantHeld) {
		return c.tenantHeld[tenant]
	}
	return 0
}

// candidates is the running pods w may evict on node, in eviction order:
// lowest priority first, pods in no gang first, then youngest, then by name.
// A gang member is one only when every running member of its gang may go.
func (c *Cluster) candidates(node uint32, mayEvict func(*Running) bool) []uint32 {
	running := c.Snapshot.Running
	mayGo := func(r uint32) bool {
		pod := &running[r]
		return mayEvict(pod) && pod.Evictable && pod.ProtectedMs == 0 && !c.victimTaken[r]
	}
	var found []uint32
	for _, r := range c.runningOn[node] {
		if !mayGo(r) {
			continue
		}
		all := true
		if members, ok := c.gangOf(r); ok {
			for _, m := range members {
				if !mayGo(m) {
					all = false
					break
				}
			}
		}
		if all {
			found = append(found, r)
		}
	}
	sort.SliceStable(found, func(i, j int) bool {
		a, b := &running[found[i]], &running[found[j]]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if a.Gang.IsSome() != b.Gang.IsSome() {
			return b.Gang.IsSome()
		}
		if a.StartedMs != b.StartedMs {
			return a.StartedMs > b.StartedMs
		}
		return a.Pod < b.Pod
	})
	return found
}

// gangOf is the running members of running pod r's gang (positions in
// snapshot.Running); ok is false when it is in none.
func (c *Cluster) gangOf(r uint32) ([]uint32, bool) {
	g := c.Snapshot.Running[r].Gang
	if g.IsNone() || int(g.Some()) >= len(c.Snapshot.Gangs) {
		return nil, false
	}
	return c.Snapshot.Gangs[g.Some()].Running, true
}

// group is r's gang's running members, or r alone when it is in none.
func (c *Cluster) group(r uint32) []uint32 {
	if members, ok := c.gangOf(r); ok {
		return members
	}
	return []uint32{r}
}

// fitsOn is where w goes on node as the round's state stands: the GPUs pick
// picks (positions on the node), or for a DRA request the devices PlaceClaims
// would choose there, with the claim choices; ok is false when it fits
// nowhere there.
func (c *Cluster) fitsOn(node uint32, w *Want, fit Fit, nvlink Nvlink) (gpus []int, claims []ClaimChoice, ok bool) {
	if w.dra {
		claims, ok = c.solveOn(node, w.claims, useFree)
		if !ok {
			return nil, nil, false
		}
		for _, g := range choicePositions(claims) {
			gpus = append(gpus, int(g))
		}
		return gpus, claims, true
	}
	gpus = c.pick(node, w, fit, nvlink)
	return gpus, []ClaimChoice{}, gpus != nil
}

// preemptOn is the preemption on node, if evicting candidates makes room.
func (c *Cluster) preemptOn(node uint32, w *Want, fit Fit, nvlink Nvlink, mayEvict func(*Running) bool) *preemption {
	candidates := c.candidates(node, mayEvict)
	if len(candidates) == 0 {
		return nil
	}
	running := c.Snapshot.Running
	st := &c.nodes[node]
	saved := append([]gpuState(nil), st.gpus...)
	released := make([]bool, len(running))
	last, picked, claims := -1, []int(nil), []ClaimChoice(nil)
	for k, victim := range candidates {
		// A gang member goes with its gang: its mates here free their GPUs
		// at the same time.
		for _, r := range c.group(victim) {
			if running[r].Node == node && !released[r] {
				released[r] = true
				release(st.gpus, &running[r])
			}
		}
		if gpus, chosen, ok := c.fitsOn(node, w, fit, nvlink); ok {
			last, picked, claims = k, gpus, chosen
			break
		}
	}
	st.gpus = saved
	if last < 0 {
		return nil
	}
	nodeGpus := c.Snapshot.Nodes[node].Gpus
	option := &preemption{node: node, victims: []uint32{}, claims: claims}
	named := make(map[uint32]bool)
	for _, v := range candidates[:last+1] {
		members := c.group(v)
		// A gang is needed when any of its members here is.
		needed := false
		for _, m := range members {
			if running[m].Node == node && touches(nodeGpus, &running[m], picked) {
				needed = true
				break
			}
		}
		if !needed {
			continue
		}
		for _, m := range members {
			if !named[m] {
				named[m] = true
				option.victims = append(option.victims, m)
				option.priorities += int64(running[m].Priority)
			}
		}
	}
	option.gpus = make([]uint32, len(picked))
	for k, g := range picked {
		option.gpus[k] = uint32(g)
	}
	return option
}

// release frees what pod holds in gpus (a node's state).
func release(gpus []gpuState, pod *Running) {
	for _, p := range pod.Gpus {
		g := int(p)
		if g >= len(gpus) {
			continue
		}
		gpu := &gpus[g]
		if pod.SharedMib > 0 {
			if gpu.shares > 0 {
				gpu.shares--
			}
			free := gpu.free + pod.SharedMib
			if free < gpu.free { // overflow: saturate
				free = ^uint64(0)
			}
			gpu.free = min(free, gpu.memory)
			continue
		}
		gpu.held = false
		gpu.free = gpu.memory
		if gpu.migParent >= 0 {
			if parent := &gpus[gpu.migParent]; parent.migHeld > 0 {
				parent.migHeld--
			}
			continue
		}
		for j := range gpus {
			if gpus[j].migParent == g {
				gpus[j].parentBusy = false
			}
		}
	}
}

// touches reports whether pod holds one of picked (positions on the node),
// the parent of a picked MIG instance, or an instance of a picked whole GPU.
func touches(node []Gpu, pod *Running, picked []int) bool {
	parentOf := func(g int) int {
		if g < len(node) && node[g].Mig.IsSome() {
			return int(node[g].Mig.Some().Parent)
		}
		return -1
	}
	for _, h := range pod.Gpus {
		held := int(h)
		for _, p := range picked {
			if p == held || parentOf(p) == held || parentOf(held) == p {
				return true
			}
		}
	}
	return false
}
