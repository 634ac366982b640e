package sdk

// DRA requests: a pod asking through ResourceClaims gets, on one eligible
// node, for every request of every claim, Count distinct free candidates
// of one of its alternatives, within the claims' matchAttribute and
// distinctAttribute constraints. The host holds the choices to the rules
// of wasmgpu_contract's validate/claims.rs; this search only makes choices
// those rules accept. It is the Rust SDK's (policies/sdk/src/cluster/
// claims.rs), decision for decision and word for word.
//
//	nodes: eligible ones with a candidate of the pod's first request
//	  │  on each node, claim by claim (what earlier claims took is excluded,
//	  │  no backtracking across claims):
//	  │    alternative vectors in order (request 0's most significant; an
//	  │    alternative with fewer usable candidates than its count skipped)
//	  │      × matchAttribute values, ascending, per constraint
//	  │        → depth-first pick: requests in order, candidates in
//	  │          (node, gpu) order, distinctAttribute values once each;
//	  │          the first complete pick wins
//	  ▼
//	the node with the fewest (Tightest) or most (Loosest) idle whole GPUs
//	left after the pick; ties to the lowest index
//	  ▼
//	commit (held exclusively, counted against the tenant) ─▶ assign with
//	one ClaimChoice per (claim, request)

import (
	"math"
	"sort"

	"wit_component/sdk/reason"
	. "wit_component/wasmgpu_policy_types"
)

// searchSteps is the search steps (one device tried for one slot, or one
// combination of alternatives and matchAttribute values tried) allowed per
// claim and node; past them the node counts as not fitting the claim.
const searchSteps = 4096

// draUse says which candidates the search may take.
type draUse int

const (
	// useFree: those free as the round stands (and healthy).
	useFree draUse = iota
	// useHealthy: every healthy one, as if the node were idle.
	useHealthy
)

// gpuValue is a device's value under a constraint.
type gpuValue struct{ gpu, value uint32 }

// bound is one constraint of a claim on one node.
type bound struct {
	distinct bool
	// Per request of the claim: whether the constraint binds it (all of
	// them when the constraint names none).
	binds []bool
	// The node's devices that have a value, sorted by gpu; the first value
	// listed for a device wins, as on the host.
	values []gpuValue
}

func newBound(constraint *Constraint, requests int, node uint32) bound {
	binds := make([]bool, requests)
	if len(constraint.Requests) == 0 {
		for r := range binds {
			binds[r] = true
		}
	}
	for _, r := range constraint.Requests {
		if uint64(r) < uint64(requests) {
			binds[r] = true
		}
	}
	var values []gpuValue
	for _, v := range constraint.Values {
		if v.Device.Node == node {
			values = append(values, gpuValue{v.Device.Gpu, v.Value})
		}
	}
	sort.SliceStable(values, func(a, b int) bool { return values[a].gpu < values[b].gpu })
	kept := values[:0]
	for i, v := range values {
		if i == 0 || v.gpu != values[i-1].gpu {
			kept = append(kept, v)
		}
	}
	return bound{distinct: constraint.Distinct, binds: binds, values: kept}
}

// value is gpu's value under the constraint; ok is false when it has none.
func (b *bound) value(gpu uint32) (value uint32, ok bool) {
	at := sort.Search(len(b.values), func(i int) bool { return b.values[i].gpu >= gpu })
	if at < len(b.values) && b.values[at].gpu == gpu {
		return b.values[at].value, true
	}
	return 0, false
}

// optValue is a matchAttribute value chosen for a constraint, or none (no
// restriction); none orders first.
type optValue struct {
	some  bool
	value uint32
}

func (a optValue) less(b optValue) bool {
	if a.some != b.some {
		return !a.some
	}
	return a.value < b.value
}

// claimOnNode is one claim on one node, as the search sees it.
type claimOnNode struct {
	claim  *Claim
	bounds []bound
	// Per request, per alternative: the usable candidates (positions, in
	// candidate order) that do not clash with what earlier claims took and
	// have a value for every constraint binding the request.
	options [][][]uint32
}

// matchValues is, per constraint, the values to try under alternatives
// (wanting counts): for a matchAttribute constraint, the values its
// requests' options have, ascending; a single none (no restriction) for a
// distinctAttribute one, or a matchAttribute one whose requests want no
// device.
func (on *claimOnNode) matchValues(alternatives, counts []int) [][]optValue {
	out := make([][]optValue, len(on.bounds))
	for bi := range on.bounds {
		b := &on.bounds[bi]
		wanted := 0
		for r := range counts {
			if b.binds[r] {
				wanted += counts[r]
			}
		}
		if b.distinct || wanted == 0 {
			out[bi] = []optValue{{}}
			continue
		}
		var values []optValue
		for r := range counts {
			if !b.binds[r] {
				continue
			}
			for _, g := range on.options[r][alternatives[r]] {
				v, ok := b.value(g)
				values = append(values, optValue{ok, v})
			}
		}
		sort.Slice(values, func(i, j int) bool { return values[i].less(values[j]) })
		kept := values[:0]
		for i, v := range values {
			if i == 0 || v != values[i-1] {
				kept = append(kept, v)
			}
		}
		out[bi] = kept
	}
	return out
}

// allowed is, per request, its options under alternatives that have, for
// every constraint binding it whose value is chosen (values), that value.
func (on *claimOnNode) allowed(alternatives []int, values []optValue) [][]uint32 {
	out := make([][]uint32, len(alternatives))
	for r := range alternatives {
		list := []uint32{}
		for _, g := range on.options[r][alternatives[r]] {
			keep := true
			for bi := range on.bounds {
				b, v := &on.bounds[bi], values[bi]
				if !b.binds[r] || !v.some {
					continue
				}
				if got, ok := b.value(g); !ok || got != v.value {
					keep = false
					break
				}
			}
			if keep {
				list = append(list, g)
			}
		}
		out[r] = list
	}
	return out
}

// picker is the state of one depth-first pick.
type picker struct {
	cluster *Cluster
	node    uint32
	bounds  []bound
	counts  []int
	// Per request: the candidates allowed in this attempt.
	allowed [][]uint32
	picked  [][]uint32
	// Per constraint: the values the picks of its requests use so far.
	used  [][]uint32
	steps *uint32
}

// fill fills request r from its k-th device on, trying its allowed
// candidates from position from.
func (p *picker) fill(r, k, from int) bool {
	if r == len(p.counts) {
		return true
	}
	if k == p.counts[r] {
		return p.fill(r+1, 0, 0)
	}
	need := p.counts[r] - k
	for i := from; i+need <= len(p.allowed[r]); i++ {
		if *p.steps == 0 {
			return false
		}
		*p.steps--
		g := p.allowed[r][i]
		if p.fits(r, g) {
			p.take(r, g)
			if p.fill(r, k+1, i+1) {
				return true
			}
			p.untake(r, g)
		}
	}
	return false
}

// fits: g clashes with no device picked so far, and its value is new to
// every distinctAttribute constraint binding r.
func (p *picker) fits(r int, g uint32) bool {
	for _, list := range p.picked {
		for _, q := range list {
			if p.cluster.clash(p.node, q, g) {
				return false
			}
		}
	}
	for bi := range p.bounds {
		b := &p.bounds[bi]
		if !b.distinct || !b.binds[r] {
			continue
		}
		v, ok := b.value(g)
		if !ok {
			return false
		}
		for _, u := range p.used[bi] {
			if u == v {
				return false
			}
		}
	}
	return true
}

func (p *picker) take(r int, g uint32) {
	p.picked[r] = append(p.picked[r], g)
	for bi := range p.bounds {
		if v, ok := p.bounds[bi].value(g); ok && p.bounds[bi].binds[r] {
			p.used[bi] = append(p.used[bi], v)
		}
	}
}

func (p *picker) untake(r int, g uint32) {
	p.picked[r] = p.picked[r][:len(p.picked[r])-1]
	for bi := range p.bounds {
		if _, ok := p.bounds[bi].value(g); ok && p.bounds[bi].binds[r] {
			p.used[bi] = p.used[bi][:len(p.used[bi])-1]
		}
	}
}

// advance moves digits (each below its length) to the next combination,
// the last digit fastest; false after the last one.
func advance(digits []int, length func(int) int) bool {
	for d := len(digits) - 1; d >= 0; d-- {
		digits[d]++
		if digits[d] < length(d) {
			return true
		}
		digits[d] = 0
	}
	return false
}

// PlaceClaims places the DRA request w (a pod asking through claims, see
// Want.Claims): on an eligible node, every request of every claim gets
// Count distinct free, healthy candidates of one of its alternatives, no
// device (nor a whole GPU and one of its MIG instances) twice in the pod,
// within the claims' constraints; see the comment at the top of claims.go
// for the search. Among the nodes that fit, fit chooses: Tightest the one
// with the fewest idle whole GPUs left after the placement (whatever
// publishes them), Loosest the most; ties go to the lowest position. The
// devices are committed as held exclusively and counted against the pod's
// tenant (a node where the pick would pass the tenant's limit does not
// fit). The decision is an assign with empty Gpus and one ClaimChoice per
// (claim, request), claims then requests in order. A pod whose claims are
// all allocated already (no claims) goes to the best eligible node by the
// same measure, with no devices. ok is false for a GPUResource request or
// when no node fits now (see ClaimsShortfall).
func (c *Cluster) PlaceClaims(w *Want, fit Fit) (Decision, bool) {
	if w == nil || !w.dra {
		return Decision{}, false
	}
	claims := w.claims
	allowance, limited := c.tenantAllowance(w.Request)
	found := false
	var bestLeft, bestNode uint32
	var best []ClaimChoice
	for _, node := range c.claimNodes(w.Request, claims) {
		choices, ok := c.solveOn(node, claims, useFree)
		if !ok {
			continue
		}
		positions := choicePositions(choices)
		if limited && uint32(len(positions)) > allowance {
			continue
		}
		left := c.idleWholeAfter(node, positions)
		better := !found || (fit == Tightest && left < bestLeft) || (fit == Loosest && left > bestLeft)
		if better {
			found, bestLeft, bestNode, best = true, left, node, choices
		}
	}
	if !found {
		return Decision{}, false
	}
	c.Commit(bestNode, choicePositions(best), w)
	return MakeDecisionAssign(Assignment{Pod: w.Pod, Node: bestNode, Gpus: []uint32{}, Claims: best}), true
}

// choicePositions is the devices of choices, in order.
func choicePositions(choices []ClaimChoice) []uint32 {
	positions := []uint32{}
	for _, ch := range choices {
		positions = append(positions, ch.Gpus...)
	}
	return positions
}

// ClaimsShortfall says why the DRA request w fits no eligible node now:
// NoEligibleNode; Never when no eligible node could take it even with
// every healthy candidate free; else NotNow. The phrase names the first
// request (claims, then requests, in order) that no eligible node can give
// its count of candidates for any alternative (reason.ClaimRequest, with
// its first alternative's count and candidates on eligible nodes), or,
// when each could alone, the whole pod (reason.ClaimsTogether). For a
// GPUResource request it is Shortfall.
func (c *Cluster) ClaimsShortfall(w *Want) Shortfall {
	s, _, _ := c.claimsDiagnosis(w)
	return s
}

// ClaimsUnplaced is the decision for a DRA request no node takes this
// round: reject when ClaimsShortfall is permanent, else wait; the reason
// is the shortfall's, and when one request is short now, "; " and
// reason.ClaimsMostFree (the most candidates of its first alternative free
// on one eligible node). For a GPUResource request it is Unplaced.
func (c *Cluster) ClaimsUnplaced(w *Want) Decision {
	if !w.dra {
		return c.gpuUnplacedWith(w, NvlinkPrefer)
	}
	s, detail, ok := c.claimsDiagnosis(w)
	why := s.Reason()
	if ok {
		why += "; " + detail
	}
	if s.Permanent() {
		return Reject(w.Pod, why)
	}
	return Wait(w.Pod, why)
}

// claimsDiagnosis is ClaimsShortfall, with the detail of ClaimsUnplaced
// (ok is false when there is none).
func (c *Cluster) claimsDiagnosis(w *Want) (s Shortfall, detail string, ok bool) {
	if !w.dra {
		return c.gpuShortfall(w), "", false
	}
	claims := w.claims
	if len(c.eligibleOf(w.Request)) == 0 {
		return Shortfall{Kind: NoEligibleNode}, "", false
	}
	ever := false
	for _, n := range c.claimNodes(w.Request, claims) {
		if _, ok := c.solveOn(n, claims, useHealthy); ok {
			ever = true
			break
		}
	}
	use := useHealthy
	if ever {
		use = useFree
	}
	what, most, found := c.bottleneck(w.Request, claims, use)
	if !found {
		constrained := false
		for i := range claims {
			if len(claims[i].Constraints) > 0 {
				constrained = true
				break
			}
		}
		what = reason.ClaimsTogether(reason.Asked(w.Request), constrained)
	}
	if !ever {
		return Shortfall{Kind: Never, What: what}, "", false
	}
	if found {
		return Shortfall{Kind: NotNow, What: what}, reason.ClaimsMostFree(most), true
	}
	return Shortfall{Kind: NotNow, What: what}, "", false
}

// bottleneck is the first request of claims that no eligible node can give
// its count of use candidates for any alternative: its phrase, and the
// most such candidates of its first alternative on one node.
func (c *Cluster) bottleneck(request *Request, claims []Claim, use draUse) (what string, most uint32, found bool) {
	for ci := range claims {
		claim := &claims[ci]
		for qi := range claim.Requests {
			q := &claim.Requests[qi]
			fits := false
			for _, a := range q.Alternatives {
				if _, most := c.tally(request, a.Candidates, use); most >= a.Count {
					fits = true
					break
				}
			}
			if fits {
				continue
			}
			var count, total uint32
			if len(q.Alternatives) > 0 {
				a := q.Alternatives[0]
				count = a.Count
				total, most = c.tally(request, a.Candidates, use)
			}
			return reason.ClaimRequest(claim.Name, q.Name, count, total), most, true
		}
	}
	return "", 0, false
}

// tally is, of candidate set set: how many candidates sit on nodes request
// may use, and the most use ones on one such node.
func (c *Cluster) tally(request *Request, set uint32, use draUse) (total, most uint32) {
	runNode, run := uint32(math.MaxUint32), uint32(0)
	for _, g := range c.candidateSet(set) {
		known := int(g.Node) < len(c.nodes) && int(g.Gpu) < len(c.nodes[g.Node].gpus)
		if !known || !c.isEligible(request, g.Node) {
			continue
		}
		total++
		if c.draUsable(g.Node, g.Gpu, use) {
			if runNode == g.Node {
				run++
			} else {
				runNode, run = g.Node, 1
			}
			most = max(most, run)
		}
	}
	return total, most
}

// tenantAllowance is the GPUs the tenant of request may still take under
// its limit, counting this round's commits; limited is false without a
// limit.
func (c *Cluster) tenantAllowance(request *Request) (allowance uint32, limited bool) {
	if request.Tenant.IsNone() {
		return 0, false
	}
	t := int(request.Tenant.Some())
	if t >= len(c.Snapshot.Tenants) || c.Snapshot.Tenants[t].Limit.IsNone() {
		return 0, false
	}
	limit := c.Snapshot.Tenants[t].Limit.Some()
	held := uint32(0)
	if t < len(c.tenantHeld) {
		held = c.tenantHeld[t]
	}
	if held >= limit {
		return 0, true
	}
	return limit - held, true
}

// eligibleOf is the nodes request may run on, ascending (positions past
// the end dropped). Shared: do not change it.
func (c *Cluster) eligibleOf(request *Request) []uint32 {
	set := int(request.EligibleSet)
	if set >= len(c.eligibleSets) {
		return nil
	}
	return c.eligibleSets[set]
}

// isEligible reports whether request may run on node.
func (c *Cluster) isEligible(request *Request, node uint32) bool {
	sets := c.Snapshot.EligibleSets
	set := int(request.EligibleSet)
	return set < len(sets) && int(node) < len(c.nodes) && InSet(sets[set], node)
}

// candidateSet is candidate set set (empty when out of range).
func (c *Cluster) candidateSet(set uint32) []GpuRef {
	sets := c.Snapshot.CandidateSets
	if int(set) >= len(sets) {
		return nil
	}
	return sets[set]
}

// candidatesOn is the candidates of set set on node (the set is sorted by
// node).
func (c *Cluster) candidatesOn(set, node uint32) []GpuRef {
	all := c.candidateSet(set)
	start := sort.Search(len(all), func(i int) bool { return all[i].Node >= node })
	rest := all[start:]
	end := sort.Search(len(rest), func(i int) bool { return rest[i].Node != node })
	return rest[:end]
}

// claimNodes is the nodes to search for a pod with claims: its eligible
// nodes, and of those only the ones with a candidate of its first request
// when every alternative of that request wants at least one device.
func (c *Cluster) claimNodes(request *Request, claims []Claim) []uint32 {
	var first *ClaimRequest
	for i := range claims {
		if len(claims[i].Requests) > 0 {
			first = &claims[i].Requests[0]
			break
		}
	}
	bySets := first != nil
	if first != nil {
		for _, a := range first.Alternatives {
			if a.Count == 0 {
				bySets = false
				break
			}
		}
	}
	var nodes []uint32
	if bySets {
		for _, a := range first.Alternatives {
			for _, g := range c.candidateSet(a.Candidates) {
				nodes = append(nodes, g.Node)
			}
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	} else {
		nodes = c.eligibleOf(request)
	}
	kept := []uint32{}
	for i, n := range nodes {
		if i > 0 && n == nodes[i-1] {
			continue
		}
		if int(n) < len(c.nodes) && c.isEligible(request, n) {
			kept = append(kept, n)
		}
	}
	return kept
}

// draUsable reports whether device gpu of node may be given to a DRA
// request: healthy (a MIG instance with its parent), and for useFree free
// for exclusive use as the round stands (not held, not shared, all its
// memory free; a whole GPU with none of its MIG instances held, an
// instance with its parent not in use). Whoever publishes it.
func (c *Cluster) draUsable(node, gpu uint32, use draUse) bool {
	gpus := c.Snapshot.Nodes[node].Gpus
	if int(gpu) >= len(gpus) {
		return false
	}
	info := &gpus[gpu]
	var parent *Gpu
	if info.Mig.IsSome() {
		p := info.Mig.Some().Parent
		if int(p) >= len(gpus) {
			return false
		}
		parent = &gpus[p]
	}
	if !info.Healthy || (parent != nil && !parent.Healthy) {
		return false
	}
	if use == useHealthy {
		return true
	}
	g := &c.nodes[node].gpus[gpu]
	busy := g.migHeld > 0
	if g.migParent >= 0 {
		busy = g.parentBusy
	}
	return !g.held && g.shares == 0 && g.free >= g.memory && !busy
}

// clash reports whether devices a and b of node cannot both be given: the
// same device, or a whole GPU and one of its MIG instances.
func (c *Cluster) clash(node, a, b uint32) bool {
	gpus := c.nodes[node].gpus
	parent := func(g uint32) int {
		if int(g) < len(gpus) {
			return gpus[g].migParent
		}
		return -1
	}
	return a == b || parent(a) == int(b) || parent(b) == int(a)
}

// idleWholeAfter is the idle whole GPUs of node (healthy, whoever
// publishes them, nobody holding any part) that stay idle when positions
// are taken.
func (c *Cluster) idleWholeAfter(node uint32, positions []uint32) uint32 {
	gpus := c.nodes[node].gpus
	info := c.Snapshot.Nodes[node].Gpus
	idle := uint32(0)
	for i := range gpus {
		g := &gpus[i]
		if g.migParent >= 0 || !info[i].Healthy || g.held || g.shares != 0 || g.migHeld != 0 || g.free < g.memory {
			continue
		}
		clashes := false
		for _, p := range positions {
			if c.clash(node, p, uint32(i)) {
				clashes = true
				break
			}
		}
		if !clashes {
			idle++
		}
	}
	return idle
}

// solveOn is the choices for every claim of a pod on node, claim by claim,
// each against the devices earlier claims took; ok is false when one
// fails.
func (c *Cluster) solveOn(node uint32, claims []Claim, use draUse) ([]ClaimChoice, bool) {
	taken := []uint32{}
	choices := []ClaimChoice{}
	for ci := range claims {
		on := c.claimOn(node, &claims[ci], use, taken)
		steps := uint32(searchSteps)
		got, ok := c.solveClaim(node, &on, uint32(ci), &steps)
		if !ok {
			return nil, false
		}
		for _, ch := range got {
			taken = append(taken, ch.Gpus...)
		}
		choices = append(choices, got...)
	}
	return choices, true
}

// claimOn is claim on node, with what the pod's earlier claims took
// (taken).
func (c *Cluster) claimOn(node uint32, claim *Claim, use draUse, taken []uint32) claimOnNode {
	requests := len(claim.Requests)
	bounds := make([]bound, len(claim.Constraints))
	for k := range claim.Constraints {
		bounds[k] = newBound(&claim.Constraints[k], requests, node)
	}
	options := make([][][]uint32, requests)
	for r := range claim.Requests {
		ok := func(g uint32) bool {
			if !c.draUsable(node, g, use) {
				return false
			}
			for _, t := range taken {
				if c.clash(node, t, g) {
					return false
				}
			}
			for b := range bounds {
				if bounds[b].binds[r] {
					if _, has := bounds[b].value(g); !has {
						return false
					}
				}
			}
			return true
		}
		alternatives := claim.Requests[r].Alternatives
		options[r] = make([][]uint32, len(alternatives))
		for k := range alternatives {
			list := []uint32{}
			for _, g := range c.candidatesOn(alternatives[k].Candidates, node) {
				if ok(g.Gpu) {
					list = append(list, g.Gpu)
				}
			}
			options[r][k] = list
		}
	}
	return claimOnNode{claim: claim, bounds: bounds, options: options}
}

// solveClaim is the first alternative vector (request 0's alternative most
// significant) with a complete pick; alternatives with fewer options than
// their count are skipped.
func (c *Cluster) solveClaim(node uint32, on *claimOnNode, claim uint32, steps *uint32) ([]ClaimChoice, bool) {
	requests := on.claim.Requests
	viable := make([][]int, len(requests))
	for r := range requests {
		for k, a := range requests[r].Alternatives {
			if uint64(len(on.options[r][k])) >= uint64(a.Count) {
				viable[r] = append(viable[r], k)
			}
		}
		if len(viable[r]) == 0 {
			return nil, false
		}
	}
	digits := make([]int, len(requests))
	for {
		alternatives := make([]int, len(requests))
		for r := range requests {
			alternatives[r] = viable[r][digits[r]]
		}
		if picked, ok := c.solveValues(node, on, alternatives, steps); ok {
			choices := make([]ClaimChoice, len(picked))
			for r, gpus := range picked {
				choices[r] = ClaimChoice{Claim: claim, Request: uint32(r), Alternative: uint32(alternatives[r]), Gpus: gpus}
			}
			return choices, true
		}
		if *steps == 0 || !advance(digits, func(r int) int { return len(viable[r]) }) {
			return nil, false
		}
	}
}

// solveValues tries, for the chosen alternatives, each combination of
// matchAttribute values (claimOnNode.matchValues, the last constraint
// fastest): the picks of the first that succeeds, per request.
func (c *Cluster) solveValues(node uint32, on *claimOnNode, alternatives []int, steps *uint32) ([][]uint32, bool) {
	counts := make([]int, len(alternatives))
	for r, k := range alternatives {
		counts[r] = int(on.claim.Requests[r].Alternatives[k].Count)
	}
	choices := on.matchValues(alternatives, counts)
	for _, list := range choices {
		if len(list) == 0 {
			return nil, false
		}
	}
	digits := make([]int, len(choices))
	values := make([]optValue, len(choices))
	for {
		if *steps == 0 {
			return nil, false
		}
		*steps--
		for b := range choices {
			values[b] = choices[b][digits[b]]
		}
		p := picker{
			cluster: c,
			node:    node,
			bounds:  on.bounds,
			counts:  counts,
			allowed: on.allowed(alternatives, values),
			picked:  make([][]uint32, len(counts)),
			used:    make([][]uint32, len(on.bounds)),
			steps:   steps,
		}
		for r := range p.picked {
			p.picked[r] = []uint32{}
		}
		if p.fill(0, 0, 0) {
			return p.picked, true
		}
		if !advance(digits, func(b int) int { return len(choices[b]) }) {
			return nil, false
		}
	}
}
