// Package sdk is the wasmgpu policy SDK for Go: decision builders, the model
// glob, config parsing, round state that tracks what is free as a policy
// places pods (Cluster), the placement loop most policies share (PlaceEach),
// and the standard wait and reject wording.
//
// The contract's types are generated from wit/policy.wit
// (wasmgpu:policy@0.3.0) by `wit-bindgen go` into package
// wasmgpu_policy_types. Decisions name pods, nodes and GPUs by position:
// Assign(pod, node, gpus) takes the pod's index in snapshot.Pending, the
// node's in snapshot.Nodes and the GPUs' in that node's Gpus list. Names
// cross once, in tables: namespaces (NamespaceName), label values by the
// keys the policy asked for (Label), NVLink peers and node sets as bit sets
// (NvlinkPeers, InSet).
//
// The SDK places GPUResource requests (ask gpus) only: a DRA request (ask
// claims) gets no decision from Cluster or PlaceEach, so the pod waits. It
// never preempts.
//
// The package does not touch the component's imports, so it compiles and is
// tested natively (`go test ./sdk/`); the component's entry point
// (export_wit_world) hands it the world's log import with SetLogSink.
package sdk

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/wasmgpu_policy_types"
)

var logSink = func(string) {}

// SetLogSink sends Log lines to sink (the component's entry point passes the
// world's log import).
func SetLogSink(sink func(string)) { logSink = sink }

// Log writes a line to the controller's log.
func Log(message string) { logSink(message) }

// PolicyError is what Fail panics with.
type PolicyError struct{ Message string }

func (e PolicyError) Error() string { return e.Message }

// Fail stops the round with message: the message goes to the controller's log
// and the call traps, so the controller keeps its previous policy version (at
// load time) or applies nothing this round. Use it for errors the operator
// must fix, such as an invalid config.json.
func Fail(message string) {
	Log(message)
	panic(PolicyError{message})
}

// NewInfo builds an Info; labelKeys are the node label keys the policy reads
// (exact keys, at most 32): each node in a snapshot then carries its values
// for these, read with Label. None: nodes carry no labels.
func NewInfo(name, version, description string, labelKeys ...string) Info {
	keys := append([]string{}, labelKeys...)
	return Info{Name: name, Version: version, Description: description, LabelKeys: keys}
}

// Assign places the GPUResource request at pending position pod on node
// position node, on the GPUs at positions gpus.
func Assign(pod, node uint32, gpus []uint32) Decision {
	return MakeDecisionAssign(Assignment{Pod: pod, Node: node, Gpus: gpus, Claims: []ClaimChoice{}})
}

// Preempt evicts the running pods at positions victims (in
// snapshot.Running) and places pending position pod on node, on the GPUs at
// positions gpus, once they are gone. The SDK's own placement never builds
// one.
func Preempt(pod, node uint32, gpus []uint32, victims []uint32) Decision {
	return MakeDecisionPreempt(Preemption{
		Assignment: Assignment{Pod: pod, Node: node, Gpus: gpus, Claims: []ClaimChoice{}},
		Victims:    victims,
	})
}

// Wait leaves pending position pod for a later round, with a reason shown to users.
func Wait(pod uint32, reason string) Decision {
	return MakeDecisionWait(Deferral{Pod: pod, Reason: reason})
}

// Reject says the request at pending position pod can never fit as posed.
func Reject(pod uint32, reason string) Decision {
	return MakeDecisionReject(Deferral{Pod: pod, Reason: reason})
}

// PodOf is the pending position a decision is about.
func PodOf(d Decision) uint32 {
	switch d.Tag() {
	case Decision_Assign:
		return d.Assign().Pod
	case Decision_Wait:
		return d.Wait().Pod
	case Decision_Preempt:
		return d.Preempt().Assignment.Pod
	default:
		return d.Reject().Pod
	}
}

// Shape is what a GPUResource request (ask gpus) asks for; ok is false for a
// DRA request (ask claims), which the SDK does not place.
func Shape(r *Request) (shape GpuShape, ok bool) {
	if r.Ask.Tag() != Ask_Gpus {
		return GpuShape{}, false
	}
	defer func() {
		// A Request built without its Ask (the zero value) asks for nothing.
		if recover() != nil {
			shape, ok = GpuShape{}, false
		}
	}()
	return r.Ask.Gpus(), true
}

// Claims is the DRA claims a request asks for; nil for a GPUResource request.
func Claims(r *Request) []Claim {
	if r.Ask.Tag() != Ask_Claims {
		return nil
	}
	return r.Ask.Claims()
}

// NamespaceName is the namespace at index (a request's or running pod's
// Namespace) in snapshot.Namespaces; "" when out of range.
func NamespaceName(s *Snapshot, index uint32) string {
	if int(index) < len(s.Namespaces) {
		return s.Namespaces[index]
	}
	return ""
}

// TenantOf is the tenant a tenant index (a request's or running pod's
// Tenant) names in snapshot.Tenants; nil when none or out of range.
func TenantOf(s *Snapshot, tenant witTypes.Option[uint32]) *Tenant {
	if tenant.IsSome() && int(tenant.Some()) < len(s.Tenants) {
		return &s.Tenants[tenant.Some()]
	}
	return nil
}

// Label is node's value for the label key (one of the keys the policy named
// in Info.LabelKeys, so one of snapshot.LabelKeys); ok is false when the node
// lacks the label or the key was not asked for.
func Label(s *Snapshot, node *Node, key string) (value string, ok bool) {
	for i, k := range s.LabelKeys {
		if k == key {
			if i < len(node.Labels) && node.Labels[i].IsSome() {
				return node.Labels[i].Some(), true
			}
			return "", false
		}
	}
	return "", false
}

// NvlinkIndices is the GPU indices in an NVLink bit set (a Gpu's Nvlink: bit
// i is the whole GPU whose Index is i), ascending.
func NvlinkIndices(set uint64) []uint32 {
	var out []uint32
	for i := uint32(0); i < 64; i++ {
		if set&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}

// NvlinkPeers is the whole GPUs of node the GPU at position gpu has an NVLink
// to, as positions in node.Gpus, ascending: its Nvlink bits name GPUs by
// Index, not by position (they differ once a GPU has MIG instances).
func NvlinkPeers(node *Node, gpu uint32) []uint32 {
	if int(gpu) >= len(node.Gpus) {
		return nil
	}
	at := wholeByIndex(node)
	var out []uint32
	for _, index := range NvlinkIndices(node.Gpus[gpu].Nvlink) {
		if p := at[index]; p >= 0 {
			out = append(out, uint32(p))
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// wholeByIndex is, for each GPU index below 64, the position of the node's
// whole GPU with that index (the first, should two share one); -1 for none.
func wholeByIndex(node *Node) [64]int {
	var at [64]int
	for i := range at {
		at[i] = -1
	}
	for p := range node.Gpus {
		g := &node.Gpus[p]
		if !isMigInstance(node, g) && g.Index < 64 && at[g.Index] < 0 {
			at[g.Index] = p
		}
	}
	return at
}

// isMigInstance: an instance naming a parent out of range reads as a whole GPU.
func isMigInstance(node *Node, g *Gpu) bool {
	return g.Mig.IsSome() && int(g.Mig.Some().Parent) < len(node.Gpus)
}

// InSet reports whether member (a node position) is in a node bit set (an
// entry of snapshot.EligibleSets: bit i of word i/64 is node i).
func InSet(set []uint64, member uint32) bool {
	word := int(member / 64)
	return word < len(set) && set[word]&(1<<(member%64)) != 0
}

// SetMembers is the members of a node bit set, ascending.
func SetMembers(set []uint64) []uint32 {
	var out []uint32
	for w, word := range set {
		for b := uint32(0); b < 64; b++ {
			if word&(1<<b) != 0 {
				out = append(out, uint32(w)*64+b)
			}
		}
	}
	return out
}

// GlobMatch reports whether text matches the model glob pattern: `*` matches
// any run of characters, `?` any one character; everything else matches
// itself, case-sensitively (the host's rule).
func GlobMatch(pattern, text string) bool {
	p, t := []rune(pattern), []rune(text)
	pi, ti, starP, starT := 0, 0, -1, 0
	for ti < len(t) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == t[ti]):
			pi++
			ti++
		case pi < len(p) && p[pi] == '*':
			starP, starT = pi, ti
			pi++
		case starP >= 0:
			starT++
			pi, ti = starP+1, starT
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// ParseConfig decodes the snapshot's config string into out (a pointer to a
// struct holding the defaults): empty (or all blanks) leaves them; otherwise a
// JSON object whose keys must each be exactly a field's `json` name (Go's
// decoder alone would accept any letter case) and whose values must have the
// field's type. Errors name the problem.
func ParseConfig(config string, out any) error {
	if strings.TrimSpace(config) == "" {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(config), &fields); err != nil {
		return fmt.Errorf("invalid policy config.json: %v", err)
	}
	known := map[string]reflect.Type{}
	var names []string
	st := reflect.TypeOf(out).Elem()
	for i := 0; i < st.NumField(); i++ {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		known[name] = st.Field(i).Type
		names = append(names, "`"+name+"`")
	}
	keys := make([]string, 0, len(fields))
	for key := range fields {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		t, ok := known[key]
		if !ok {
			return fmt.Errorf("invalid policy config.json: unknown field `%s`, expected one of %s", key, strings.Join(names, ", "))
		}
		// Go's decoder leaves a field as it was on null; only a pointer,
		// slice, map or interface field may take null.
		if strings.TrimSpace(string(fields[key])) == "null" {
			switch t.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			default:
				return fmt.Errorf("invalid policy config.json: `%s` is null, expected a %s", key, t.Kind())
			}
		}
	}
	if err := json.Unmarshal([]byte(config), out); err != nil {
		return fmt.Errorf("invalid policy config.json: %v", err)
	}
	return nil
}

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

// Reason is the shortfall in the SDK's standard words.
func (s Shortfall) Reason() string {
	switch s.Kind {
	case NoEligibleNode:
		return "no eligible node: node selector, affinity or taints exclude every GPU node"
	case Never:
		return "no eligible node has " + s.What + ", even when idle"
	default:
		return "no eligible node has " + s.What + " free right now"
	}
}

// DescribeRequest is what the request asks for, in words (used in reasons).
func DescribeRequest(r *Request) string {
	shape, ok := Shape(r)
	if !ok {
		return fmt.Sprintf("%d DRA claim(s)", len(Claims(r)))
	}
	return DescribeShape(&shape)
}

// DescribeShape is what a GPUResource shape asks for, in words.
func DescribeShape(r *GpuShape) string {
	model := ""
	if r.Model.IsSome() {
		model = fmt.Sprintf(" matching \"%s\"", r.Model.Some())
	}
	if r.MigProfile.IsSome() {
		return fmt.Sprintf("%d MIG instance(s) of profile %q%s", r.Count, r.MigProfile.Some(), model)
	}
	if r.Sharing == Sharing_Shared {
		return fmt.Sprintf("%d GPU(s)%s with %d MiB to share", r.Count, model, r.MemoryMib)
	}
	if r.MemoryMib == 0 {
		return fmt.Sprintf("%d GPU(s)%s", r.Count, model)
	}
	return fmt.Sprintf("%d GPU(s)%s with at least %d MiB each", r.Count, model, r.MemoryMib)
}

type kind int

const (
	exclusive kind = iota
	shared
	mig
)

// Want is a pending GPUResource request prepared for the fit checks (see
// Cluster.Want).
type Want struct {
	Pod     uint32
	Request *Request
	// What it asks for (the request's ask gpus).
	Shape   GpuShape
	kind    kind
	count   int
	memory  uint64
	profile int
	modelOk []bool
}

type unit struct {
	model    int
	memory   uint64
	free     uint64
	held     bool
	shares   uint32
	healthy  bool
	agent    bool // published by the wasmgpu agent (alone or with a DRA driver)
	group    int
	parent   int // -1: a whole GPU
	profile  int
	kidsHeld int
}

func (u *unit) wholeFree() bool {
	return u.healthy && u.agent && !u.held && u.shares == 0 && u.free == u.memory && u.kidsHeld == 0
}

type nodeState struct {
	units        []unit
	freeWhole    int
	healthyWhole int
	uniform      bool
}

// Cluster is the round state: what is free on each node, updated as the
// policy places pods (Commit), so a policy never hands out the same GPU twice
// in its round. A node's Gpus list holds whole GPUs, each followed by its MIG
// instances; a whole-GPU request takes whole GPUs none of whose instances is
// held, a MIG request free instances of its profile whose parent is not used.
// A GPUResource request takes only GPUs the wasmgpu agent publishes
// (PublishedBy agent or both): a GPU published only by a DRA driver is
// invisible to it, as if absent.
type Cluster struct {
	Snapshot     *Snapshot
	nodes        []nodeState
	eligibleSets [][]uint32
	modelOk      map[string][]bool
	everFits     map[string]int // 0: no eligible node, 1: never, 2: not now
}

// NewCluster indexes the snapshot.
func NewCluster(s *Snapshot) *Cluster {
	c := &Cluster{Snapshot: s, modelOk: map[string][]bool{}, everFits: map[string]int{}}
	c.nodes = make([]nodeState, len(s.Nodes))
	models := len(s.Models)
	for i := range s.Nodes {
		c.nodes[i] = newNodeState(&s.Nodes[i], models)
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
	return c
}

func newNodeState(node *Node, models int) nodeState {
	gpus := node.Gpus
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
	// NVLink bits name whole GPUs by Index; a link joins both ends.
	at := wholeByIndex(node)
	for i := range gpus {
		for _, index := range NvlinkIndices(gpus[i].Nvlink) {
			if peer := at[index]; peer >= 0 {
				a, b := find(i), find(peer)
				if a != b {
					up[max(a, b)] = min(a, b)
				}
			}
		}
	}
	st := nodeState{units: make([]unit, len(gpus)), uniform: len(gpus) > 0}
	for i := range gpus {
		g := &gpus[i]
		isMig := isMigInstance(node, g)
		free := uint64(0)
		if g.MemoryMib > g.AllocatedMib {
			free = g.MemoryMib - g.AllocatedMib
		}
		u := unit{
			model:   min(int(g.Model), models),
			memory:  g.MemoryMib,
			free:    free,
			held:    g.Held,
			shares:  g.SharedOwners,
			healthy: g.Healthy,
			agent:   g.PublishedBy != Publisher_DraDriver,
			group:   find(i),
			parent:  -1,
			profile: -1,
		}
		if isMig {
			u.parent = int(g.Mig.Some().Parent)
			u.profile = int(g.Mig.Some().Profile)
			st.uniform = false
		} else if g.Model != gpus[0].Model || g.MemoryMib != gpus[0].MemoryMib {
			st.uniform = false
		}
		st.units[i] = u
	}
	for i := range st.units {
		if u := &st.units[i]; u.parent >= 0 && u.held {
			st.units[u.parent].kidsHeld++
		}
	}
	for i := range st.units {
		if u := &st.units[i]; u.parent < 0 {
			if u.healthy && u.agent {
				st.healthyWhole++
			}
			if u.wholeFree() {
				st.freeWhole++
			}
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
// DraPending.
func (c *Cluster) PendingInOrder() []uint32 { return c.pendingInOrder(true) }

// DraPending is the pending positions of the DRA requests (ask claims), in
// the order of PendingInOrder. The SDK does not place them: a policy that
// does not decide them leaves them waiting.
func (c *Cluster) DraPending() []uint32 { return c.pendingInOrder(false) }

func (c *Cluster) pendingInOrder(gpus bool) []uint32 {
	p := c.Snapshot.Pending
	var order []uint32
	for i := range p {
		if _, ok := Shape(&p[i]); ok == gpus {
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

// Want prepares the GPUResource request at pending position pod for the
// checks below; nil for a DRA request (ask claims), which the SDK leaves
// undecided (the pod waits).
func (c *Cluster) Want(pod uint32) *Want {
	r := &c.Snapshot.Pending[pod]
	shape, ok := Shape(r)
	if !ok {
		return nil
	}
	w := &Want{Pod: pod, Request: r, Shape: shape, count: int(shape.Count), memory: shape.MemoryMib, profile: -1, modelOk: c.ModelMask(shape.Model)}
	switch {
	case shape.MigProfile.IsSome():
		w.kind = mig
		for i, p := range c.Snapshot.MigProfiles {
			if p == shape.MigProfile.Some() {
				w.profile = i
				break
			}
		}
	case shape.Sharing == Sharing_Shared:
		w.kind = shared
	default:
		w.kind = exclusive
	}
	return w
}

// Eligible is the node positions the request may run on (positions past the
// end dropped).
func (c *Cluster) Eligible(w *Want) []uint32 {
	set := int(w.Request.EligibleSet)
	if set >= len(c.eligibleSets) {
		return nil
	}
	return c.eligibleSets[set]
}

// IsEligible reports whether w may run on node (a position): it is in the
// request's eligible set.
func (c *Cluster) IsEligible(w *Want, node uint32) bool {
	sets := c.Snapshot.EligibleSets
	set := int(w.Request.EligibleSet)
	return set < len(sets) && int(node) < len(c.nodes) && InSet(sets[set], node)
}

// FreeWhole is the number of whole GPUs on node nobody holds any part of.
func (c *Cluster) FreeWhole(node uint32) int { return c.nodes[node].freeWhole }

// Healthy is the number of healthy whole GPUs on node a GPUResource request
// may take (published by the agent).
func (c *Cluster) Healthy(node uint32) int { return c.nodes[node].healthyWhole }

func (c *Cluster) unitFits(st *nodeState, i int, w *Want) bool {
	u := &st.units[i]
	if !u.healthy || !u.agent || u.held || !w.modelOk[u.model] {
		return false
	}
	if w.kind == mig {
		// An instance is free while its parent is used neither whole nor shared.
		if u.parent < 0 || u.profile != w.profile || u.memory < w.memory {
			return false
		}
		p := &st.units[u.parent]
		// It takes its parent's health, too.
		return p.healthy && !p.held && p.shares == 0 && p.free >= p.memory
	}
	if u.parent >= 0 || u.kidsHeld > 0 {
		return false
	}
	if w.kind == exclusive {
		return u.shares == 0 && u.free == u.memory && u.memory >= w.memory
	}
	return u.free >= w.memory
}

// Fits is true when node has Count units that fit w right now.
func (c *Cluster) Fits(node uint32, w *Want) bool {
	st := &c.nodes[node]
	if w.kind == exclusive {
		if st.freeWhole < w.count {
			return false
		}
		if st.uniform {
			return w.modelOk[st.units[0].model] && st.units[0].memory >= w.memory
		}
	}
	fitting := 0
	for i := range st.units {
		if c.unitFits(st, i, w) {
			fitting++
			if fitting >= w.count {
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
	if w.kind == exclusive {
		return uint64(st.freeWhole)
	}
	room := uint64(0)
	for i := range st.units {
		if c.unitFits(st, i, w) {
			if w.kind == mig {
				room++
			} else {
				room += st.units[i].free
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
		if !c.Fits(n, w) {
			continue
		}
		room := c.Headroom(n, w)
		better := !ok || (fit == Tightest && room < bestRoom) || (fit == Loosest && room > bestRoom) ||
			(room == bestRoom && n < node)
		if better {
			node, bestRoom, ok = n, room, true
		}
	}
	return node, ok
}

// PickGpus chooses Count units on node for w, as positions in the node's Gpus
// list (ascending); nil when the node does not fit. Exclusive requests for
// more than one GPU take a connected NVLink group that holds them when
// preferNvlink (the smallest for Tightest, the largest for Loosest; a
// connected group, not GPUs that are all mutual peers), else the first free
// GPUs; shared requests take the GPUs with the least (most) free memory; MIG
// requests the instances whose parent has the fewest (most) free instances.
func (c *Cluster) PickGpus(node uint32, w *Want, fit Fit, preferNvlink bool) []uint32 {
	st := &c.nodes[node]
	var cand []int
	for i := range st.units {
		if c.unitFits(st, i, w) {
			cand = append(cand, i)
		}
	}
	if len(cand) < w.count {
		return nil
	}
	switch {
	case w.kind == exclusive && preferNvlink && w.count > 1:
		bestGroup, bestSize := -1, 0
		seen := map[int]bool{}
		for _, i := range cand {
			g := st.units[i].group
			if seen[g] {
				continue
			}
			seen[g] = true
			size := 0
			for _, j := range cand {
				if st.units[j].group == g {
					size++
				}
			}
			if size < w.count {
				continue
			}
			if bestGroup < 0 || (fit == Tightest && size < bestSize) || (fit == Loosest && size > bestSize) {
				bestGroup, bestSize = g, size
			}
		}
		if bestGroup >= 0 {
			kept := cand[:0]
			for _, i := range cand {
				if st.units[i].group == bestGroup {
					kept = append(kept, i)
				}
			}
			cand = kept
		}
	case w.kind == mig:
		// Pack (or spread) instances by how many of their parent's instances
		// are still free: fewest first packs them onto the fewest parents.
		key := map[int]int{}
		for _, i := range cand {
			for j := range st.units {
				if st.units[j].parent == st.units[i].parent && !st.units[j].held {
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
	case w.kind == shared:
		sort.SliceStable(cand, func(a, b int) bool {
			if fit == Tightest {
				return st.units[cand[a]].free < st.units[cand[b]].free
			}
			return st.units[cand[a]].free > st.units[cand[b]].free
		})
	}
	cand = cand[:w.count]
	sort.Ints(cand)
	out := make([]uint32, len(cand))
	for k, i := range cand {
		out[k] = uint32(i)
	}
	return out
}

// Commit records that w took the units at positions on node.
func (c *Cluster) Commit(node uint32, positions []uint32, w *Want) {
	st := &c.nodes[node]
	for _, p := range positions {
		u := &st.units[p]
		wasFree := u.parent < 0 && u.wholeFree()
		if w.kind == shared {
			u.shares++
			if u.free > w.memory {
				u.free -= w.memory
			} else {
				u.free = 0
			}
		} else {
			u.held = true
			u.free = 0
		}
		if u.parent >= 0 {
			parent := &st.units[u.parent]
			if parent.wholeFree() {
				st.freeWhole--
			}
			parent.kidsHeld++
		} else if wasFree {
			st.freeWhole--
		}
	}
}

// Place picks, commits and returns the assign decision; ok is false when node
// does not fit.
func (c *Cluster) Place(node uint32, w *Want, fit Fit, preferNvlink bool) (Decision, bool) {
	positions := c.PickGpus(node, w, fit, preferNvlink)
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
		st.units = append([]unit(nil), st.units...)
		copy.nodes[i] = st
	}
	return &copy
}

// Shortfall says why w fits on none of its eligible nodes.
func (c *Cluster) Shortfall(w *Want) Shortfall {
	r := w.Request
	model := "\x00"
	if w.Shape.Model.IsSome() {
		model = w.Shape.Model.Some()
	}
	key := fmt.Sprintf("%d\x00%d\x00%s\x00%d\x00%d\x00%d", r.EligibleSet, w.kind, model, w.memory, w.count, w.profile)
	ever, ok := c.everFits[key]
	if !ok {
		ever = c.computeEverFits(w)
		c.everFits[key] = ever
	}
	switch ever {
	case 0:
		return Shortfall{Kind: NoEligibleNode}
	case 2:
		return Shortfall{Kind: NotNow, What: DescribeShape(&w.Shape)}
	default:
		return Shortfall{Kind: Never, What: DescribeShape(&w.Shape)}
	}
}

func (c *Cluster) computeEverFits(w *Want) int {
	eligible := c.Eligible(w)
	if len(eligible) == 0 {
		return 0
	}
	for _, n := range eligible {
		could := 0
		for i := range c.nodes[n].units {
			u := &c.nodes[n].units[i]
			if !u.healthy || !u.agent || !w.modelOk[u.model] {
				continue
			}
			var ok bool
			if w.kind == mig {
				ok = u.parent >= 0 && u.profile == w.profile
			} else {
				ok = u.parent < 0
			}
			ok = ok && u.memory >= w.memory
			if ok {
				could++
				if could >= w.count {
					return 2
				}
			}
		}
	}
	return 1
}

// Unplaced is wait (GPUs may free up) or reject (it can never fit) for a
// request placed nowhere.
func (c *Cluster) Unplaced(w *Want) Decision {
	s := c.Shortfall(w)
	if s.Permanent() {
		return Reject(w.Pod, s.Reason())
	}
	return Wait(w.Pod, s.Reason())
}

type left struct {
	pod       uint32
	want      *Want
	shortfall Shortfall
}

// PlaceGang places the pending members of gang (an index into
// snapshot.Gangs) all together or not at all: each member, in order, goes
// where ChooseNode and PickGpus put it, on a trial copy of the round's state.
// When enough fit to reach the gang's MinMember with the members already
// bound, the trial becomes the state and the members that fit are assigned
// (the others wait); otherwise nothing is committed and every member waits,
// with the reason. A member that can never fit is rejected on its own reason;
// when without such members the gang could never reach MinMember, every
// member is rejected, naming the one that fits nowhere. The host applies a
// gang's assignments on the same rule. A DRA member (ask claims) gets no
// decision and is not placed; it counts as a member that may fit later.
func (c *Cluster) PlaceGang(gang uint32, fit Fit, preferNvlink bool) []Decision {
	if int(gang) >= len(c.Snapshot.Gangs) {
		return nil
	}
	g := &c.Snapshot.Gangs[gang]
	pending := c.Snapshot.Pending
	var members []uint32
	dra := 0
	for _, p := range g.Pending {
		if int(p) < len(pending) {
			if _, ok := Shape(&pending[p]); ok {
				members = append(members, p)
			} else {
				dra++
			}
		}
	}
	sort.SliceStable(members, func(a, b int) bool {
		return compareRequests(&pending[members[a]], &pending[members[b]]) < 0
	})
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
		if node, found := trial.ChooseNode(w, fit); found {
			d, ok = trial.Place(node, w, fit, preferNvlink)
		}
		if ok {
			placed = append(placed, d)
		} else {
			lefts = append(lefts, left{pod, w, trial.Shortfall(w)})
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
	short := fmt.Sprintf("gang %s: %d of the %d more members needed fit now (%d bound, minMember %d); all or nothing, so none is placed yet", g.Name, len(placed), need, g.Bound, g.MinMember)
	if len(placed)+len(later)+dra < need {
		reason := short
		if len(never) > 0 {
			reason = fmt.Sprintf("gang %s can never be placed: member %s fits nowhere (%s)", g.Name, never[0].want.Request.Pod, never[0].shortfall.Reason())
		}
		out := make([]Decision, 0, len(members))
		for _, d := range placed {
			out = append(out, Reject(d.Assign().Pod, reason))
		}
		for _, l := range append(later, never...) {
			out = append(out, Reject(l.pod, reason))
		}
		return out
	}
	var rejected []Decision
	for _, l := range never {
		rejected = append(rejected, Reject(l.pod, l.shortfall.Reason()))
	}
	if len(placed) >= need {
		c.nodes = trial.nodes
		reason := fmt.Sprintf("gang %s is placed without this member (%d of %d needed fit); it waits for room", g.Name, len(placed), need)
		for _, l := range later {
			placed = append(placed, Wait(l.pod, reason))
		}
		return append(placed, rejected...)
	}
	out := make([]Decision, 0, len(members))
	for _, d := range placed {
		out = append(out, Wait(d.Assign().Pod, short))
	}
	for _, l := range later {
		out = append(out, Wait(l.pod, short))
	}
	return append(out, rejected...)
}

// PlacementParams are the parameters PlaceEach understands (config.json, all optional).
type PlacementParams struct {
	// Keep multi-GPU exclusive requests on GPUs joined by NVLink when possible.
	PreferNvlink bool `json:"preferNvlink"`
	// Whether the policy may preempt (default true). Accepted for the Rust
	// binpack's config; the SDK does not preempt yet, so it changes nothing.
	Preemption bool `json:"preemption"`
}

// PlaceEach serves the requests by priority then age; each goes to the
// eligible node ChooseNode picks for fit, on the GPUs PickGpus picks. A gang
// is served whole, all or nothing (PlaceGang), when its first member's turn
// comes. Requests that fit nowhere get wait or reject with the reason. DRA
// requests (ask claims) get no decision: they wait. Nothing is preempted. An
// invalid config.json fails the round.
func PlaceEach(s *Snapshot, fit Fit) []Decision {
	params := PlacementParams{PreferNvlink: true, Preemption: true}
	if err := ParseConfig(s.Config, &params); err != nil {
		Fail(err.Error())
	}
	c := NewCluster(s)
	decisions := make([]Decision, 0, len(s.Pending))
	gangServed := make([]bool, len(s.Gangs))
	for _, pod := range c.PendingInOrder() {
		r := &s.Pending[pod]
		if r.Gang.IsSome() && int(r.Gang.Some()) < len(gangServed) {
			g := r.Gang.Some()
			if !gangServed[g] {
				gangServed[g] = true
				decisions = append(decisions, c.PlaceGang(g, fit, params.PreferNvlink)...)
			}
			continue
		}
		w := c.Want(pod)
		var d Decision
		ok := false
		if node, found := c.ChooseNode(w, fit); found {
			d, ok = c.Place(node, w, fit, params.PreferNvlink)
		}
		if !ok {
			d = c.Unplaced(w)
		}
		decisions = append(decisions, d)
	}
	return decisions
}
