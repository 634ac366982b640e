// Package sdktest builds snapshots for the tests and benchmarks of Go
// policies, as the Rust SDK's testing module (crates/contract/src/testing.rs)
// does, with the same names, defaults and numbering:
//
//	s := sdktest.Snapshot(
//		[]Node{
//			sdktest.WithLabels(sdktest.Node("a", 4, "NVIDIA H100", 81920), zone, "z1"),
//			sdktest.WithNvlink(sdktest.Node("b", 4, "NVIDIA A100", 40960), [2]uint32{0, 1}, [2]uint32{2, 3}),
//		},
//		[]Request{sdktest.Request("ns/p", 2, sdk.Exclusive, 0)},
//	)
//	decisions := sdk.PlaceEach(s, sdk.Tightest)
//	got := sdktest.Assigned(s, decisions) // [{ns/p a [GPU-a-0 GPU-a-1]}]
//
// GPU models, MIG profiles, namespaces and label keys are tables of the
// snapshot that entries index; the builders take names and keep one
// process-wide table of each, which Snapshot (and RefreshTables, after later
// edits) copies into the snapshot. GPUs are named as the host names those of
// a snapshot file: GPU-{node}-{index}, and MIG-GPU-{node}-{index}-{k} for
// the k-th instance of a GPU.
//
// Validate holds a round's decisions to the host's own rules, the ones the
// controller applies to every round, by running `wasmgpu policy validate` on
// the snapshot (written with SnapshotFile) and the decisions:
//
//	verdict := sdktest.ValidateOrSkip(t, s, decisions) // skips without a wasmgpu binary
//	if !verdict.Valid {
//		t.Fatalf("refused: %v", verdict.Refused)
//	}
//
// The package imports only the contract's types, so package sdk's own tests
// use it too.
package sdktest

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	wt "wit_component/wasmgpu_policy_types"
)

type table struct {
	mu    sync.Mutex
	names []string
}

func (t *table) intern(name string) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, n := range t.names {
		if n == name {
			return uint32(i)
		}
	}
	t.names = append(t.names, name)
	return uint32(len(t.names) - 1)
}

func (t *table) copy() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string{}, t.names...)
}

var models, migProfiles, namespaces, labelKeys table

// Model is the index of GPU model name in the snapshots these builders make.
func Model(name string) uint32 { return models.intern(name) }

// MigProfile is the index of MIG profile name in the snapshots these
// builders make.
func MigProfile(name string) uint32 { return migProfiles.intern(name) }

// Namespace is the index of namespace name in the snapshots these builders
// make.
func Namespace(name string) uint32 { return namespaces.intern(name) }

// LabelKey is the index of label key in the snapshots these builders make.
func LabelKey(key string) uint32 { return labelKeys.intern(key) }

// RefreshTables copies the tables into s (after a builder named a model,
// profile, namespace or label key the snapshot did not have yet), and gives
// every node a value (or none) for each label key.
func RefreshTables(s *wt.Snapshot) {
	s.Models = models.copy()
	s.MigProfiles = migProfiles.copy()
	s.Namespaces = namespaces.copy()
	s.LabelKeys = labelKeys.copy()
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if len(n.Labels) > len(s.LabelKeys) {
			n.Labels = n.Labels[:len(s.LabelKeys)]
		}
		for len(n.Labels) < len(s.LabelKeys) {
			n.Labels = append(n.Labels, witTypes.None[string]())
		}
	}
}

// NamespaceOf is the namespace of a pending request, by name ("?" when out
// of range).
func NamespaceOf(s *wt.Snapshot, r *wt.Request) string {
	if int(r.Namespace) < len(s.Namespaces) {
		return s.Namespaces[r.Namespace]
	}
	return "?"
}

// Shape is the GPU shape of a GPUResource request. It panics when the
// request asks through DRA claims.
func Shape(r *wt.Request) wt.GpuShape {
	if r.Ask.Tag() != wt.Ask_Gpus {
		panic(r.Pod + " asks through DRA claims")
	}
	return r.Ask.Gpus()
}

// EditShape changes the GPU shape of a GPUResource request in place:
//
//	sdktest.EditShape(&r, func(g *GpuShape) { g.Model = witTypes.Some("NVIDIA H100*") })
//
// It panics when the request asks through DRA claims.
func EditShape(r *wt.Request, change func(*wt.GpuShape)) {
	shape := Shape(r)
	change(&shape)
	r.Ask = wt.MakeAskGpus(shape)
}

// Node is a node named name with gpus identical GPUs (indices 0…), all
// healthy and free, no NVLink, published by the wasmgpu agent.
func Node(name string, gpus uint32, model string, memoryMib uint64) wt.Node {
	n := wt.Node{Name: name, Labels: []witTypes.Option[string]{}, Gpus: []wt.Gpu{}}
	for i := uint32(0); i < gpus; i++ {
		n.Gpus = append(n.Gpus, Gpu(i, model, memoryMib))
	}
	return n
}

// Gpu is a healthy, free GPU published by the wasmgpu agent.
func Gpu(index uint32, model string, memoryMib uint64) wt.Gpu {
	return wt.Gpu{
		Index:       index,
		Model:       Model(model),
		MemoryMib:   memoryMib,
		NumaNode:    witTypes.None[uint32](),
		Healthy:     true,
		Mig:         witTypes.None[wt.MigInstance](),
		PublishedBy: wt.Publisher_Agent,
	}
}

// Mig is one MIG instance for WithMig: its profile and memory.
type Mig struct {
	Profile   string
	MemoryMib uint64
}

// WithMig adds profiles as MIG instances of the node's GPU at position
// parent (named MIG-GPU-{node}-{index}-{k}), each with its memory, right
// after the parent's other instances. Positions of later GPUs shift; build
// MIG nodes last.
func WithMig(n wt.Node, parent int, profiles ...Mig) wt.Node {
	base := n.Gpus[parent]
	at := parent + 1
	for at < len(n.Gpus) && n.Gpus[at].Mig.IsSome() {
		at++
	}
	added := make([]wt.Gpu, 0, len(profiles))
	for _, p := range profiles {
		instance := base
		instance.MemoryMib = p.MemoryMib
		instance.Nvlink = 0
		instance.Mig = witTypes.Some(wt.MigInstance{Parent: uint32(parent), Profile: MigProfile(p.Profile)})
		added = append(added, instance)
	}
	gpus := append([]wt.Gpu{}, n.Gpus[:at]...)
	gpus = append(gpus, added...)
	n.Gpus = append(gpus, n.Gpus[at:]...)
	return n
}

// Gang makes a gang name of the pending requests at members (positions),
// which must hold GPUs minMember at a time; none bound yet. It sets the
// members' Gang and returns the gang's index.
func Gang(s *wt.Snapshot, name string, minMember uint32, members ...uint32) uint32 {
	index := uint32(len(s.Gangs))
	s.Gangs = append(s.Gangs, wt.Gang{Name: name, MinMember: minMember, Pending: append([]uint32{}, members...), Running: []uint32{}})
	for _, m := range members {
		s.Pending[m].Gang = witTypes.Some(index)
	}
	return index
}

func namespaceOfPod(pod string) string {
	if ns, _, ok := strings.Cut(pod, "/"); ok {
		return ns
	}
	return "default"
}

// Running adds a running pod (namespace/name) of priority on the node at
// position node, holding the GPUs at positions gpus exclusively: they are
// marked held. Started at startedMs, evictable, not protected. It returns
// its position in s.Running.
func Running(s *wt.Snapshot, pod string, priority int32, node uint32, gpus []uint32, startedMs uint64) uint32 {
	for _, g := range gpus {
		gpu := &s.Nodes[node].Gpus[g]
		gpu.Held = true
		gpu.AllocatedMib = gpu.MemoryMib
	}
	s.Running = append(s.Running, wt.Running{
		Pod:       pod,
		Namespace: Namespace(namespaceOfPod(pod)),
		Tenant:    witTypes.None[uint32](),
		Priority:  priority,
		Node:      node,
		Gpus:      append([]uint32{}, gpus...),
		Gang:      witTypes.None[uint32](),
		Evictable: true,
		StartedMs: startedMs,
	})
	RefreshTables(s)
	return uint32(len(s.Running) - 1)
}

// RunningShared adds a running pod holding sharedMib on each of the GPUs at
// positions gpus (shared): their SharedOwners and AllocatedMib grow. It
// returns its position in s.Running.
func RunningShared(s *wt.Snapshot, pod string, priority int32, node uint32, gpus []uint32, sharedMib uint64, startedMs uint64) uint32 {
	for _, g := range gpus {
		gpu := &s.Nodes[node].Gpus[g]
		gpu.SharedOwners++
		gpu.AllocatedMib += sharedMib
	}
	s.Running = append(s.Running, wt.Running{
		Pod:       pod,
		Namespace: Namespace(namespaceOfPod(pod)),
		Tenant:    witTypes.None[uint32](),
		Priority:  priority,
		Node:      node,
		Gpus:      append([]uint32{}, gpus...),
		SharedMib: sharedMib,
		Gang:      witTypes.None[uint32](),
		Evictable: true,
		StartedMs: startedMs,
	})
	RefreshTables(s)
	return uint32(len(s.Running) - 1)
}

// RunningOnEachGpu fills node with running pods {prefix}{g} of priority,
// one per GPU g (exclusive), each started at g milliseconds: a full node a
// preemption may free.
func RunningOnEachGpu(s *wt.Snapshot, node uint32, prefix string, priority int32) {
	for g := range s.Nodes[node].Gpus {
		Running(s, fmt.Sprintf("%s%d", prefix, g), priority, node, []uint32{uint32(g)}, uint64(g))
	}
}

// GpuName is the name the host gives the GPU at position gpu of node in a
// snapshot file: GPU-{node}-{index}, MIG-GPU-{node}-{index}-{k} for the k-th
// instance of a GPU; "?" when out of range.
func GpuName(n *wt.Node, gpu uint32) string {
	if int(gpu) >= len(n.Gpus) {
		return "?"
	}
	g := &n.Gpus[gpu]
	whole := fmt.Sprintf("GPU-%s-%d", n.Name, g.Index)
	if g.Mig.IsNone() {
		return whole
	}
	k := 0
	for _, other := range n.Gpus[:gpu] {
		if other.Mig.IsSome() && other.Mig.Some().Parent == g.Mig.Some().Parent {
			k++
		}
	}
	return fmt.Sprintf("MIG-%s-%d", whole, k)
}

// Placement is one assignment by name (Assigned, and the host's Verdict):
// the pod (namespace/name), the node and the GPUs' UUIDs.
type Placement struct {
	Pod  string   `json:"pod"`
	Node string   `json:"node"`
	Gpus []string `json:"gpus"`
}

// Assigned is the assign decisions among decisions, by
// name: pod, node and GPU names (GpuName). Positions out of range read as
// "?".
func Assigned(s *wt.Snapshot, decisions []wt.Decision) []Placement {
	out := []Placement{}
	for _, d := range decisions {
		var a wt.Assignment
		switch d.Tag() {
		case wt.Decision_Assign:
			a = d.Assign()
		default:
			continue
		}
		p := Placement{Pod: "?", Node: "?", Gpus: []string{}}
		if int(a.Pod) < len(s.Pending) {
			p.Pod = s.Pending[a.Pod].Pod
		}
		var node *wt.Node
		if int(a.Node) < len(s.Nodes) {
			node = &s.Nodes[a.Node]
			p.Node = node.Name
		}
		for _, g := range a.Gpus {
			if node == nil {
				p.Gpus = append(p.Gpus, "?")
			} else {
				p.Gpus = append(p.Gpus, GpuName(node, g))
			}
		}
		out = append(out, p)
	}
	return out
}

// PodOf is the pending position a decision is about.
func PodOf(d wt.Decision) uint32 {
	switch d.Tag() {
	case wt.Decision_Assign:
		return d.Assign().Pod
	case wt.Decision_Wait:
		return d.Wait().Pod
	case wt.Decision_Preempt:
		return d.Preempt().Assignment.Pod
	default:
		return d.Reject().Pod
	}
}

// DecisionOf is the decision about pod (namespace/name), if any.
func DecisionOf(s *wt.Snapshot, decisions []wt.Decision, pod string) (wt.Decision, bool) {
	for i := range s.Pending {
		if s.Pending[i].Pod != pod {
			continue
		}
		for _, d := range decisions {
			if PodOf(d) == uint32(i) {
				return d, true
			}
		}
		return wt.Decision{}, false
	}
	return wt.Decision{}, false
}

// Describe is a decision in one line, for test failures: "assign ns/p →
// a [0 1]", "wait ns/q: reason", ...
func Describe(s *wt.Snapshot, d wt.Decision) string {
	name := func(pod uint32) string {
		if int(pod) < len(s.Pending) {
			return s.Pending[pod].Pod
		}
		return fmt.Sprintf("#%d", pod)
	}
	switch d.Tag() {
	case wt.Decision_Assign:
		a := d.Assign()
		return fmt.Sprintf("assign %s → node %d %v", name(a.Pod), a.Node, a.Gpus)
	case wt.Decision_Preempt:
		p := d.Preempt()
		return fmt.Sprintf("preempt %s → node %d %v evicting %v", name(p.Assignment.Pod), p.Assignment.Node, p.Assignment.Gpus, p.Victims)
	case wt.Decision_Wait:
		return fmt.Sprintf("wait %s: %s", name(d.Wait().Pod), d.Wait().Reason)
	default:
		return fmt.Sprintf("reject %s: %s", name(d.Reject().Pod), d.Reject().Reason)
	}
}

// NvlinkOf is an NVLink set (one word) of GPU indices; indices of 64 and
// more are left out.
func NvlinkOf(indices ...uint32) uint64 {
	set := uint64(0)
	for _, i := range indices {
		if i < 64 {
			set |= 1 << i
		}
	}
	return set
}

// WithFullNvlink links every pair of GPUs on the node with NVLink (as on an
// HGX board).
func WithFullNvlink(n wt.Node) wt.Node {
	count := uint32(len(n.Gpus))
	n.Gpus = append([]wt.Gpu{}, n.Gpus...)
	for i := range n.Gpus {
		var others []uint32
		for j := uint32(0); j < count; j++ {
			if j != n.Gpus[i].Index {
				others = append(others, j)
			}
		}
		n.Gpus[i].Nvlink = NvlinkOf(others...)
	}
	return n
}

// WithNvlink links the GPUs of each pair {a, b} (positions) with NVLink, on
// both ends: WithNvlink(n, [2]uint32{0, 1}, [2]uint32{2, 3}) makes two
// bridged pairs. Links already there are kept; a pair named twice is linked
// once. It panics when a position is not one of the node's GPUs, or a == b.
func WithNvlink(n wt.Node, pairs ...[2]uint32) wt.Node {
	count := uint32(len(n.Gpus))
	n.Gpus = append([]wt.Gpu{}, n.Gpus...)
	for _, p := range pairs {
		a, b := p[0], p[1]
		if a >= count || b >= count || a == b {
			panic(fmt.Sprintf("WithNvlink: (%d, %d) is not a pair of distinct GPUs of node %s (%d GPUs)", a, b, n.Name, count))
		}
		n.Gpus[a].Nvlink |= NvlinkOf(n.Gpus[b].Index)
		n.Gpus[b].Nvlink |= NvlinkOf(n.Gpus[a].Index)
	}
	return n
}

// WithLabels sets labels on the node, given as key, value, key, value, …,
// replacing the value of a key it already has:
// WithLabels(n, "topology.kubernetes.io/zone", "a"). Each key joins the
// builders' label-key table (as if the policy had asked for it); Snapshot
// gives every node a value or none for each key. It panics on an odd count.
func WithLabels(n wt.Node, keyValues ...string) wt.Node {
	if len(keyValues)%2 != 0 {
		panic("WithLabels takes key, value pairs")
	}
	n.Labels = append([]witTypes.Option[string]{}, n.Labels...)
	for k := 0; k < len(keyValues); k += 2 {
		at := int(LabelKey(keyValues[k]))
		for len(n.Labels) <= at {
			n.Labels = append(n.Labels, witTypes.None[string]())
		}
		n.Labels[at] = witTypes.Some(keyValues[k+1])
	}
	return n
}

// Request is a request for count GPUs; its namespace is taken from pod
// (ns/name), no model constraint, priority 0, created at 0, may preempt
// lower priorities, eligible on every node (set 0 of Snapshot).
func Request(pod string, count uint32, sharing wt.Sharing, memoryMib uint64) wt.Request {
	return wt.Request{
		Pod:        pod,
		Namespace:  Namespace(namespaceOfPod(pod)),
		Tenant:     witTypes.None[uint32](),
		Preemption: wt.PreemptionPolicy_PreemptLowerPriority,
		Gang:       witTypes.None[uint32](),
		Ask: wt.MakeAskGpus(wt.GpuShape{
			Count:      count,
			Model:      witTypes.None[string](),
			MigProfile: witTypes.None[string](),
			MemoryMib:  memoryMib,
			Sharing:    sharing,
		}),
	}
}

// MigRequest is a request for count MIG instances of profile.
func MigRequest(pod string, count uint32, profile string) wt.Request {
	r := Request(pod, count, wt.Sharing_Exclusive, 0)
	EditShape(&r, func(g *wt.GpuShape) { g.MigProfile = witTypes.Some(profile) })
	return r
}

// WithModel is r asking for GPUs whose model matches glob.
func WithModel(r wt.Request, glob string) wt.Request {
	EditShape(&r, func(g *wt.GpuShape) { g.Model = witTypes.Some(glob) })
	return r
}

// ClaimsRequest is a DRA request (ask claims) with one claim, pod+"-gpu", of
// one request "gpu" for one device of candidate set 0 (DraRequest, Claim
// and ClaimRequest build others).
func ClaimsRequest(pod string) wt.Request {
	claim := wt.Claim{Name: pod + "-gpu", Requests: []wt.ClaimRequest{{Name: "gpu", Alternatives: []wt.Alternative{{Count: 1}}}}}
	return wt.Request{Pod: pod, Namespace: Namespace(namespaceOfPod(pod)), Ask: wt.MakeAskClaims([]wt.Claim{claim})}
}

// DraRequest is a pending pod asking through DRA claims, otherwise as
// Request builds one (namespace from pod, priority 0, created at 0,
// eligible set 0): the Rust testing::dra_request.
//
//	set := sdktest.CandidateSet(s, [2]uint32{0, 0}, [2]uint32{0, 1})
//	s.Pending = append(s.Pending, sdktest.DraRequest("ml/train",
//		[]Claim{sdktest.Claim("ml/train", sdktest.ClaimRequest("gpus", 2, set))}))
func DraRequest(pod string, claims []wt.Claim) wt.Request {
	r := Request(pod, 1, wt.Sharing_Exclusive, 0)
	if claims == nil {
		claims = []wt.Claim{}
	}
	r.Ask = wt.MakeAskClaims(claims)
	return r
}

// Claim is a claim name without constraints, with requests (each built with
// ClaimRequest): the Rust testing::claim.
func Claim(name string, requests ...wt.ClaimRequest) wt.Claim {
	return wt.Claim{Name: name, Requests: append([]wt.ClaimRequest{}, requests...), Constraints: []wt.Constraint{}}
}

// ClaimRequest is request name of a claim, for count devices of candidate
// set candidates (an index into snapshot.CandidateSets, see CandidateSet),
// with one alternative (exactly).
func ClaimRequest(name string, count, candidates uint32) wt.ClaimRequest {
	return wt.ClaimRequest{Name: name, Alternatives: []wt.Alternative{{
		Subrequest: witTypes.None[string](),
		Count:      count,
		Candidates: candidates,
	}}}
}

// CandidateSet adds a candidate set of the GPUs {node, gpu} (positions) to
// s, sorted and each once as the host sends them, and is its index (for
// Alternative.Candidates): the Rust testing::candidate_set.
func CandidateSet(s *wt.Snapshot, gpus ...[2]uint32) uint32 {
	sorted := append([][2]uint32{}, gpus...)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a][0] != sorted[b][0] {
			return sorted[a][0] < sorted[b][0]
		}
		return sorted[a][1] < sorted[b][1]
	})
	set := []wt.GpuRef{}
	for i, g := range sorted {
		if i == 0 || g != sorted[i-1] {
			set = append(set, wt.GpuRef{Node: g[0], Gpu: g[1]})
		}
	}
	s.CandidateSets = append(s.CandidateSets, set)
	return uint32(len(s.CandidateSets) - 1)
}

// Bits is a node bit set of len possible members holding members (bit i of
// word i/64 is node i); it grows past len for a member beyond it.
func Bits(size int, members ...uint32) []uint64 {
	words := make([]uint64, (size+63)/64)
	for _, m := range members {
		for int(m/64) >= len(words) {
			words = append(words, 0)
		}
		words[m/64] |= 1 << (m % 64)
	}
	return words
}

// Snapshot is a snapshot of nodes and pending whose eligible set 0 is every
// node, with the builders' tables, round 1.
func Snapshot(nodes []wt.Node, pending []wt.Request) *wt.Snapshot {
	all := make([]uint32, len(nodes))
	for i := range all {
		all[i] = uint32(i)
	}
	if nodes == nil {
		nodes = []wt.Node{}
	}
	if pending == nil {
		pending = []wt.Request{}
	}
	s := &wt.Snapshot{
		Round:         1,
		Nodes:         nodes,
		Pending:       pending,
		Running:       []wt.Running{},
		EligibleSets:  [][]uint64{Bits(len(nodes), all...)},
		CandidateSets: [][]wt.GpuRef{},
		Gangs:         []wt.Gang{},
		Tenants:       []wt.Tenant{},
	}
	RefreshTables(s)
	return s
}

// Restrict restricts pending request pod (by position) to nodes, through a
// new eligible set.
func Restrict(s *wt.Snapshot, pod int, nodes ...uint32) {
	s.EligibleSets = append(s.EligibleSets, Bits(len(s.Nodes), nodes...))
	s.Pending[pod].EligibleSet = uint32(len(s.EligibleSets) - 1)
}

// Large is a large, deterministic snapshot for benchmarks, the same as the
// Rust SDK's testing::large(nodes, pods): nodes nodes of 8 GPUs
// (alternating 8×H100 80GB with full NVLink and 8×A100 40GB in NVLink
// pairs), about a quarter of the GPUs already in use, and pods pending
// requests of 1, 2, 4 or 8 GPUs, mostly exclusive, a fifth shared, some
// pinned to a model, a tenth restricted to one of three zones.
func Large(nodes, pods uint32) *wt.Snapshot {
	rng := uint64(0x9e37_79b9_7f4a_7c15)
	next := func() uint64 {
		// xorshift64*: deterministic, no dependency.
		rng ^= rng >> 12
		rng ^= rng << 25
		rng ^= rng >> 27
		return rng * 0x2545_f491_4f6c_dd1d
	}
	ns := make([]wt.Node, 0, nodes)
	for n := uint32(0); n < nodes; n++ {
		name := fmt.Sprintf("gpu-node-%04d", n)
		var node wt.Node
		if n%2 == 0 {
			node = WithFullNvlink(Node(name, 8, "NVIDIA H100 80GB HBM3", 81559))
		} else {
			node = Node(name, 8, "NVIDIA A100-SXM4-40GB", 40960)
			for i := range node.Gpus {
				node.Gpus[i].Nvlink = NvlinkOf(node.Gpus[i].Index ^ 1)
			}
		}
		node = WithLabels(node, "kubernetes.io/hostname", name, "topology.kubernetes.io/zone", fmt.Sprintf("zone-%d", n%3))
		for i := range node.Gpus {
			g := &node.Gpus[i]
			g.NumaNode = witTypes.Some(uint32(i) / 4)
			switch next() % 8 {
			case 0:
				g.Held = true
				g.AllocatedMib = g.MemoryMib
			case 1:
				g.SharedOwners = 1
				g.AllocatedMib = 8192
			}
		}
		ns = append(ns, node)
	}
	pending := make([]wt.Request, 0, pods)
	for p := uint32(0); p < pods; p++ {
		roll := next()
		sharing := wt.Sharing_Exclusive
		if roll%5 == 0 {
			sharing = wt.Sharing_Shared
		}
		count := uint32(1)
		memory := uint64(4096) << ((roll >> 16) % 3)
		if sharing == wt.Sharing_Exclusive {
			count = []uint32{1, 1, 2, 4, 8}[(roll>>8)%5]
			memory = []uint64{0, 40960, 65536}[(roll>>16)%3]
		}
		r := Request(fmt.Sprintf("team-%d/job-%05d", p%7, p), count, sharing, memory)
		switch (roll >> 24) % 6 {
		case 0:
			r = WithModel(r, "NVIDIA H100*")
		case 1:
			r = WithModel(r, "*A100*")
		}
		r.Priority = int32((roll >> 32) % 3)
		r.CreatedMs = 1_700_000_000_000 + uint64(p)*10
		pending = append(pending, r)
	}
	s := Snapshot(ns, pending)
	for z := uint32(0); z < 3; z++ {
		var members []uint32
		for n := uint32(0); n < nodes; n++ {
			if n%3 == z {
				members = append(members, n)
			}
		}
		s.EligibleSets = append(s.EligibleSets, Bits(int(nodes), members...))
	}
	for p := range s.Pending {
		if p%10 == 0 {
			s.Pending[p].EligibleSet = 1 + uint32(p/10)%3
		}
	}
	return s
}
