package sdk

// DRA placement, each round held to the host's validator when there is a
// wasmgpu binary: the Rust SDK's tests (policies/sdk/src/cluster/claims/
// tests.rs), ported.

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

// validated holds decisions to the host's rules when there is a wasmgpu
// binary ($WASMGPU or on PATH); ok is false when there is none (the tests'
// own assertions run either way).
func validated(t *testing.T, s *Snapshot, decisions []Decision) (verdict st.Verdict, ok bool) {
	t.Helper()
	// The builders' tables, with the namespaces of pods added after
	// sdktest.Snapshot.
	st.RefreshTables(s)
	verdict, err := st.Validate(s, decisions)
	if errors.Is(err, st.ErrNoWasmgpu) {
		return st.Verdict{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if !verdict.Valid {
		t.Fatalf("refused: %v", verdict.Refused)
	}
	return verdict, true
}

// decideDra decides the round with PlaceEach and holds it to the host's rules.
func decideDra(t *testing.T, s *Snapshot, fit Fit) []Decision {
	t.Helper()
	decisions := PlaceEach(s, fit)
	validated(t, s, decisions)
	if len(decisions) != len(s.Pending) {
		t.Fatalf("%d decisions for %d pods: %+v", len(decisions), len(s.Pending), decisions)
	}
	return decisions
}

// of is the decision about pod.
func of(t *testing.T, s *Snapshot, decisions []Decision, pod string) Decision {
	t.Helper()
	d, ok := st.DecisionOf(s, decisions, pod)
	if !ok {
		t.Fatalf("%s is not decided: %+v", pod, decisions)
	}
	return d
}

// choices is (node, choices) of an assignment.
func choices(t *testing.T, d Decision) (uint32, []ClaimChoice) {
	t.Helper()
	if d.Tag() != Decision_Assign {
		t.Fatalf("not assigned: %+v", d)
	}
	a := d.Assign()
	if len(a.Gpus) != 0 {
		t.Fatalf("a DRA assignment names no GPUs: %+v", a)
	}
	return a.Node, a.Claims
}

func reasonOf(t *testing.T, d Decision) string {
	t.Helper()
	switch d.Tag() {
	case Decision_Wait:
		return d.Wait().Reason
	case Decision_Reject:
		return d.Reject().Reason
	}
	t.Fatalf("placed: %+v", d)
	return ""
}

// allGpus is every GPU of nodes ({node, gpus}: positions 0..gpus each) as
// one candidate set.
func allGpus(s *Snapshot, nodes ...[2]uint32) uint32 {
	var gpus [][2]uint32
	for _, n := range nodes {
		for g := uint32(0); g < n[1]; g++ {
			gpus = append(gpus, [2]uint32{n[0], g})
		}
	}
	return st.CandidateSet(s, gpus...)
}

// oneClaim is a pod with one claim named as the pod, of requests.
func oneClaim(pod string, requests ...ClaimRequest) Request {
	return st.DraRequest(pod, []Claim{st.Claim(pod, requests...)})
}

func req(name string, count, candidates uint32) ClaimRequest {
	return st.ClaimRequest(name, count, candidates)
}

func h100Node(name string, gpus uint32) Node { return st.Node(name, gpus, h100, 81920) }

// hold marks GPU gpu of n held, all its memory allocated (as the host
// requires of a snapshot; the Rust tests set held alone).
func hold(n *Node, gpu int) {
	n.Gpus[gpu].Held = true
	n.Gpus[gpu].AllocatedMib = n.Gpus[gpu].MemoryMib
}

// claimsOf is the claims of pending request pod, to edit.
func claimsOf(s *Snapshot, pod int) []Claim { return s.Pending[pod].Ask.Claims() }

func TestTwoOfEightCandidatesGoToOneNodeTheFullestForBinpack(t *testing.T) {
	busy := h100Node("busy", 8)
	for i := 0; i < 4; i++ {
		hold(&busy, i)
	}
	s := st.Snapshot([]Node{h100Node("idle", 8), busy}, nil)
	set := allGpus(s, [2]uint32{0, 8}, [2]uint32{1, 8})
	s.Pending = append(s.Pending, oneClaim("ml/train", req("gpus", 2, set)))
	node, chosen := choices(t, decideDra(t, s, Tightest)[0])
	if node != 1 {
		t.Fatalf("binpack fills the fuller node: %d", node)
	}
	if len(chosen) != 1 || chosen[0].Claim != 0 || chosen[0].Request != 0 || chosen[0].Alternative != 0 {
		t.Fatalf("chosen: %+v", chosen)
	}
	if !reflect.DeepEqual(chosen[0].Gpus, []uint32{4, 5}) {
		t.Fatalf("the first free candidates: %v", chosen[0].Gpus)
	}
	node, chosen = choices(t, decideDra(t, s, Loosest)[0])
	if node != 0 || !reflect.DeepEqual(chosen[0].Gpus, []uint32{0, 1}) {
		t.Fatalf("spread: %d %v", node, chosen[0].Gpus)
	}
}

func TestDraPodsOfOneRoundNeverShareADevice(t *testing.T) {
	s := st.Snapshot([]Node{h100Node("a", 4)}, nil)
	set := allGpus(s, [2]uint32{0, 4})
	for _, pod := range []string{"ml/p0", "ml/p1", "ml/p2"} {
		s.Pending = append(s.Pending, oneClaim(pod, req("gpus", 2, set)))
	}
	d := decideDra(t, s, Tightest)
	if _, c := choices(t, d[0]); !reflect.DeepEqual(c[0].Gpus, []uint32{0, 1}) {
		t.Fatalf("p0: %v", c[0].Gpus)
	}
	if _, c := choices(t, d[1]); !reflect.DeepEqual(c[0].Gpus, []uint32{2, 3}) {
		t.Fatalf("p1: %v", c[0].Gpus)
	}
	want := `no eligible node has 2 device(s) for claim ml/p2 request "gpus" (4 candidate(s) on eligible nodes) free right now; at most 0 free on any eligible node`
	if d[2].Tag() != Decision_Wait || reasonOf(t, d[2]) != want {
		t.Fatalf("p2: %+v", d[2])
	}
}

func TestFirstAvailableTakesTheFirstAlternativeThatCanBeSatisfied(t *testing.T) {
	build := func(firstHeld bool) *Snapshot {
		n := h100Node("a", 4)
		if firstHeld {
			hold(&n, 0)
		}
		hold(&n, 1)
		s := st.Snapshot([]Node{n}, nil)
		first := st.CandidateSet(s, [2]uint32{0, 0}, [2]uint32{0, 1})
		second := st.CandidateSet(s, [2]uint32{0, 2}, [2]uint32{0, 3})
		wants := st.Claim("ml/c", req("gpu", 1, first))
		wants.Requests[0].Alternatives = append(wants.Requests[0].Alternatives, Alternative{
			Subrequest: witTypes.Some("fallback"),
			Count:      2,
			Candidates: second,
		})
		wants.Requests[0].Alternatives[0].Subrequest = witTypes.Some("preferred")
		s.Pending = append(s.Pending, st.DraRequest("ml/p", []Claim{wants}))
		return s
	}
	_, chosen := choices(t, decideDra(t, build(true), Tightest)[0])
	if chosen[0].Alternative != 1 || !reflect.DeepEqual(chosen[0].Gpus, []uint32{2, 3}) {
		t.Fatalf("the fallback: %+v", chosen)
	}
	// With its candidates free, the first alternative wins.
	_, chosen = choices(t, decideDra(t, build(false), Tightest)[0])
	if chosen[0].Alternative != 0 || !reflect.DeepEqual(chosen[0].Gpus, []uint32{0}) {
		t.Fatalf("the preferred: %+v", chosen)
	}
}

// constraint is a constraint over requests with values[g] for GPU g of
// node 0 (a negative value: none).
func constraint(requests []uint32, distinct bool, values []int) Constraint {
	k := Constraint{Requests: requests, Distinct: distinct, Attribute: "resource.kubernetes.io/pcieRoot", Values: []AttributeValue{}}
	if k.Requests == nil {
		k.Requests = []uint32{}
	}
	for g, v := range values {
		if v >= 0 {
			k.Values = append(k.Values, AttributeValue{Device: GpuRef{Node: 0, Gpu: uint32(g)}, Value: uint32(v)})
		}
	}
	return k
}

// constrained is one node of len(values) GPUs, every one a candidate of
// both requests of claim ml/c (counts[0] and counts[1] devices), bound by
// constraint.
func constrained(distinct bool, values []int, counts [2]uint32) *Snapshot {
	gpus := uint32(len(values))
	s := st.Snapshot([]Node{h100Node("a", gpus)}, nil)
	set := allGpus(s, [2]uint32{0, gpus})
	c := st.Claim("ml/c", req("a", counts[0], set), req("b", counts[1], set))
	c.Constraints = append(c.Constraints, constraint(nil, distinct, values))
	s.Pending = append(s.Pending, st.DraRequest("ml/p", []Claim{c}))
	return s
}

func TestMatchAttributeTriesEachValueWhereTakingTheFirstDevicesWouldBreakIt(t *testing.T) {
	// Values 0,1,1,2,1: the first three devices (0, 1, 1) break the match;
	// value 0 has one device, value 1 has three.
	s := constrained(false, []int{0, 1, 1, 2, 1}, [2]uint32{2, 1})
	_, chosen := choices(t, decideDra(t, s, Tightest)[0])
	if !reflect.DeepEqual(chosen[0].Gpus, []uint32{1, 2}) || !reflect.DeepEqual(chosen[1].Gpus, []uint32{4}) {
		t.Fatalf("chosen: %+v", chosen)
	}
	// Bound by position, across the two requests only.
	claimsOf(s, 0)[0].Constraints[0].Requests = []uint32{0, 1}
	if _, chosen := choices(t, decideDra(t, s, Tightest)[0]); !reflect.DeepEqual(chosen[1].Gpus, []uint32{4}) {
		t.Fatalf("by position: %+v", chosen)
	}
	// Values 0,0,1,1: no value has three devices, ever.
	never := constrained(false, []int{0, 0, 1, 1}, [2]uint32{2, 1})
	d := decideDra(t, never, Tightest)
	if d[0].Tag() != Decision_Reject {
		t.Fatalf("never: %+v", d)
	}
	if got := reasonOf(t, d[0]); got != "no eligible node has 3 device(s) for claim ml/c within the claims' constraints, even when idle" {
		t.Fatalf("never: %s", got)
	}
}

func TestDistinctAttributeTakesDevicesOfValuesNotYetUsed(t *testing.T) {
	// GPU 0 has no value: it cannot be chosen for a bound request.
	s := constrained(true, []int{-1, 0, 0, 1, 2}, [2]uint32{2, 1})
	_, chosen := choices(t, decideDra(t, s, Tightest)[0])
	if !reflect.DeepEqual(chosen[0].Gpus, []uint32{1, 3}) || !reflect.DeepEqual(chosen[1].Gpus, []uint32{4}) {
		t.Fatalf("chosen: %+v", chosen)
	}
	// Two values among four devices: three distinct ones never fit.
	never := constrained(true, []int{0, 0, 1, 1}, [2]uint32{2, 1})
	if d := decideDra(t, never, Tightest); d[0].Tag() != Decision_Reject {
		t.Fatalf("never: %+v", d)
	}
}

func TestARequestAskingMoreThanItsCandidatesIsRejectedAndOneWhoseCandidatesAreHeldWaits(t *testing.T) {
	build := func() *Snapshot {
		s := st.Snapshot([]Node{h100Node("a", 4)}, nil)
		two := st.CandidateSet(s, [2]uint32{0, 0}, [2]uint32{0, 1})
		s.Pending = append(s.Pending, oneClaim("ml/train", req("gpus", 3, two)))
		return s
	}
	d := decideDra(t, build(), Tightest)
	if d[0].Tag() != Decision_Reject {
		t.Fatalf("three of two: %+v", d)
	}
	if got := reasonOf(t, d[0]); got != `no eligible node has 3 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes), even when idle` {
		t.Fatalf("three of two: %s", got)
	}
	// An empty candidate set can never be served either.
	empty := build()
	empty.CandidateSets[0] = []GpuRef{}
	if d := decideDra(t, empty, Tightest); d[0].Tag() != Decision_Reject {
		t.Fatalf("empty: %+v", d)
	}
	// Its two candidates held: it waits.
	held := build()
	claimsOf(held, 0)[0].Requests[0].Alternatives[0].Count = 2
	hold(&held.Nodes[0], 1)
	held.Pending[0].Preemption = PreemptNever
	d = decideDra(t, held, Tightest)
	if d[0].Tag() != Decision_Wait {
		t.Fatalf("held: %+v", d)
	}
	if got := reasonOf(t, d[0]); got != `no eligible node has 2 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes) free right now; at most 1 free on any eligible node` {
		t.Fatalf("held: %s", got)
	}
	c := NewCluster(held)
	w := c.Want(0)
	if c.ClaimsShortfall(w).Permanent() {
		t.Fatal("ClaimsShortfall: not now")
	}
	if s := c.Shortfall(w); s.Permanent() || s != c.ClaimsShortfall(w) {
		t.Fatal("Shortfall delegates")
	}
	if !reflect.DeepEqual(c.Unplaced(w), c.ClaimsUnplaced(w)) || !reflect.DeepEqual(c.UnplacedWith(w, NvlinkRequire), c.ClaimsUnplaced(w)) {
		t.Fatal("Unplaced delegates")
	}
}

func TestAPodWhoseClaimsAreAllocatedGoesToItsEligibleNodeWithoutDevices(t *testing.T) {
	s := st.Snapshot([]Node{h100Node("a", 2), h100Node("b", 2)}, nil)
	s.Pending = append(s.Pending, st.DraRequest("ml/ready", nil))
	st.Restrict(s, 0, 1)
	d := decideDra(t, s, Tightest)
	node, chosen := choices(t, d[0])
	if node != 1 || chosen == nil || len(chosen) != 0 {
		t.Fatalf("ready: %d %+v", node, chosen)
	}
	if verdict, ok := validated(t, s, d); ok && len(verdict.Accepted) != 1 {
		t.Fatalf("accepted: %+v", verdict.Accepted)
	}
	// No eligible node at all.
	st.Restrict(s, 0)
	d = decideDra(t, s, Tightest)
	if d[0].Tag() != Decision_Reject || reasonOf(t, d[0]) != "no eligible node: node selector, affinity or taints exclude every GPU node" {
		t.Fatalf("no node: %+v", d[0])
	}
}

func TestDraAndGpuResourcePodsOfOneRoundShareNoGpuInPriorityOrder(t *testing.T) {
	s := st.Snapshot([]Node{h100Node("a", 4)}, []Request{
		st.Request("ml/old", 2, Exclusive, 0),
		st.Request("ml/late", 1, Exclusive, 0),
	})
	set := allGpus(s, [2]uint32{0, 4})
	dra := oneClaim("ml/dra", req("gpus", 3, set))
	dra.Priority = 10
	s.Pending = append(s.Pending, dra)
	s.Pending[1].CreatedMs = 5
	d := decideDra(t, s, Tightest)
	// The DRA pod goes first (priority), then the older GPU pod waits.
	if PodOf(d[0]) != 2 {
		t.Fatalf("first: %+v", d)
	}
	if _, c := choices(t, d[0]); !reflect.DeepEqual(c[0].Gpus, []uint32{0, 1, 2}) {
		t.Fatalf("dra: %+v", c)
	}
	if old := of(t, s, d, "ml/old"); old.Tag() != Decision_Wait {
		t.Fatalf("old: %+v", old)
	}
	if late := of(t, s, d, "ml/late"); late.Tag() != Decision_Assign || !reflect.DeepEqual(late.Assign().Gpus, []uint32{3}) {
		t.Fatalf("late: %+v", late)
	}
}

// migNode is node a: GPU 0 (position 0) with two 1g.10gb instances
// (positions 1 and 2), GPU 1 (position 3).
func migNode() Node {
	return st.WithMig(st.Node("a", 2, "NVIDIA A100", 81920), 0, st.Mig{Profile: "1g.10gb", MemoryMib: 9856}, st.Mig{Profile: "1g.10gb", MemoryMib: 9856})
}

func TestMigInstancesExcludeTheirParentWithinAPodAndAcrossTheRound(t *testing.T) {
	s := st.Snapshot([]Node{migNode()}, []Request{st.Request("ml/whole", 2, Exclusive, 0)})
	mig := st.CandidateSet(s, [2]uint32{0, 1}, [2]uint32{0, 2})
	dra := oneClaim("ml/mig", req("slice", 1, mig))
	dra.Priority = 1
	s.Pending = append(s.Pending, dra)
	d := decideDra(t, s, Tightest)
	if _, c := choices(t, d[0]); !reflect.DeepEqual(c[0].Gpus, []uint32{1}) {
		t.Fatalf("mig: %+v", c)
	}
	if d[1].Tag() != Decision_Wait {
		t.Fatalf("GPU 0 has an instance held now: %+v", d)
	}
	// A whole GPU and its instance never go to one pod.
	s = st.Snapshot([]Node{migNode()}, nil)
	both := st.CandidateSet(s, [2]uint32{0, 0}, [2]uint32{0, 1})
	s.Pending = append(s.Pending, oneClaim("ml/both", req("gpus", 2, both)))
	d = decideDra(t, s, Tightest)
	if got := reasonOf(t, d[0]); got != "no eligible node has 2 device(s) for claim ml/both, even when idle" {
		t.Fatalf("both: %s", got)
	}
}

func TestDevicesOnlyADraDriverPublishesGoToDraPodsOnly(t *testing.T) {
	n := h100Node("a", 2)
	for i := range n.Gpus {
		n.Gpus[i].PublishedBy = Publisher_DraDriver
	}
	s := st.Snapshot([]Node{n}, []Request{st.Request("ml/gpu", 1, Exclusive, 0)})
	set := allGpus(s, [2]uint32{0, 2})
	s.Pending = append(s.Pending, oneClaim("ml/dra", req("gpus", 2, set)))
	d := decideDra(t, s, Tightest)
	if g := of(t, s, d, "ml/gpu"); g.Tag() != Decision_Reject {
		t.Fatalf("gpu: %+v", g)
	}
	if _, c := choices(t, of(t, s, d, "ml/dra")); !reflect.DeepEqual(c[0].Gpus, []uint32{0, 1}) {
		t.Fatalf("dra: %+v", c)
	}
}

func TestTheTenantLimitCountsDraDevices(t *testing.T) {
	s := st.Snapshot([]Node{h100Node("a", 8)}, nil)
	set := allGpus(s, [2]uint32{0, 8})
	s.Pending = append(s.Pending,
		oneClaim("ml/p0", req("gpus", 2, set)),
		oneClaim("ml/p1", req("gpus", 1, set), req("more", 1, set)),
		st.Request("ml/p2", 1, Exclusive, 0))
	for i := range s.Pending {
		s.Pending[i].CreatedMs = uint64(i)
		s.Pending[i].Tenant = witTypes.Some(uint32(0))
	}
	s.Tenants = []Tenant{{Name: "ml", Weight: 1, Quota: 0, Limit: witTypes.Some(uint32(4)), Holding: 1, Waiting: 5}}
	d := decideDra(t, s, Tightest)
	if d[0].Tag() != Decision_Assign {
		t.Fatalf("p0: %+v", d[0])
	}
	if got := reasonOf(t, d[1]); got != "tenant ml holds 3 of its limit 4 GPUs (GPUTenant ml: spec.limit); this pod needs 2 more" {
		t.Fatalf("p1: %s", got)
	}
	if d[2].Tag() != Decision_Assign {
		t.Fatalf("1 held + 2 + 1 = 4: %+v", d[2])
	}
	// PlaceClaims checks what it picks too: a later alternative of 3.
	s.Pending = s.Pending[:1]
	hold(&s.Nodes[0], 0)
	zero := st.CandidateSet(s, [2]uint32{0, 0})
	alternatives := &claimsOf(s, 0)[0].Requests[0].Alternatives
	(*alternatives)[0] = Alternative{Subrequest: witTypes.Some("one"), Count: 1, Candidates: zero}
	*alternatives = append(*alternatives, Alternative{Subrequest: witTypes.Some("four"), Count: 4, Candidates: set})
	c := NewCluster(s)
	w := c.Want(0)
	if _, over := c.OverTenantLimit(w); over {
		t.Fatal("1 held + 1 asked")
	}
	if _, ok := c.PlaceClaims(w, Tightest); ok {
		t.Fatal("4 would pass it")
	}
}

func TestClaimsOfOnePodTakeDistinctDevicesAndCommitTogether(t *testing.T) {
	s := st.Snapshot([]Node{h100Node("a", 4), h100Node("b", 4)}, nil)
	set := allGpus(s, [2]uint32{0, 4}, [2]uint32{1, 4})
	claims := []Claim{
		st.Claim("ml/x", req("gpus", 2, set)),
		st.Claim("ml/y", req("gpus", 1, set), req("spare", 1, set)),
	}
	s.Pending = append(s.Pending, st.DraRequest("ml/p", claims), oneClaim("ml/q", req("gpus", 1, set)))
	s.Pending[1].CreatedMs = 1
	d := decideDra(t, s, Tightest)
	node, chosen := choices(t, d[0])
	want := []ClaimChoice{
		{Claim: 0, Request: 0, Alternative: 0, Gpus: []uint32{0, 1}},
		{Claim: 1, Request: 0, Alternative: 0, Gpus: []uint32{2}},
		{Claim: 1, Request: 1, Alternative: 0, Gpus: []uint32{3}},
	}
	if node != 0 || !reflect.DeepEqual(chosen, want) {
		t.Fatalf("p: %d %+v", node, chosen)
	}
	// The node is full: the next pod goes to the other one.
	node, chosen = choices(t, d[1])
	if node != 1 || !reflect.DeepEqual(chosen, []ClaimChoice{{Claim: 0, Request: 0, Alternative: 0, Gpus: []uint32{0}}}) {
		t.Fatalf("q: %d %+v", node, chosen)
	}
	c := NewCluster(s)
	w := c.Want(0)
	if w.Devices() != 4 || DevicesOf(w.Request) != 4 || w.Describe() != "2 device(s) for claim ml/x, 2 device(s) for claim ml/y" {
		t.Fatalf("devices %d, %s", w.Devices(), w.Describe())
	}
}

func TestGangMembersAskingThroughClaimsAreLeftToTheirGang(t *testing.T) {
	s := st.Snapshot([]Node{h100Node("a", 4)}, []Request{st.Request("ml/g0", 1, Exclusive, 0)})
	set := allGpus(s, [2]uint32{0, 4})
	s.Pending = append(s.Pending, oneClaim("ml/g1", req("gpus", 1, set)))
	st.Gang(s, "ml/gang", 1, 0, 1)
	d := PlaceEach(s, Tightest)
	validated(t, s, d)
	if len(d) != 1 || PodOf(d[0]) != 0 {
		t.Fatalf("decisions: %+v", d)
	}
}

func TestPositionsOutOfRangeAreSkipped(t *testing.T) {
	s := st.Snapshot([]Node{h100Node("a", 2)}, nil)
	set := st.CandidateSet(s, [2]uint32{0, 1}, [2]uint32{0, 7}, [2]uint32{5, 0})
	s.Pending = append(s.Pending, oneClaim("ml/p", req("gpus", 1, set), req("no", 1, 99)))
	// The host refuses snapshot files with such positions: these rounds are
	// not validated (the Rust test validates them in memory).
	d := PlaceEach(s, Tightest)
	if len(d) != 1 || d[0].Tag() != Decision_Reject {
		t.Fatalf("candidate set 99: %+v", d)
	}
	s.Pending[0] = oneClaim("ml/p", req("gpus", 1, set))
	d = PlaceEach(s, Tightest)
	if _, c := choices(t, d[0]); !reflect.DeepEqual(c[0].Gpus, []uint32{1}) {
		t.Fatalf("in range: %+v", c)
	}
}

// largeMixed is sdktest.Large(60, 200) with 120 DRA pods of every kind
// among its pods.
func largeMixed() *Snapshot {
	s := st.Large(60, 200)
	var every [][2]uint32
	for n := uint32(0); n < uint32(len(s.Nodes)); n++ {
		for g := uint32(0); g < 8; g++ {
			every = append(every, [2]uint32{n, g})
		}
	}
	set := st.CandidateSet(s, every...)
	var even [][2]uint32
	for _, g := range every {
		if g[0]%2 == 0 {
			even = append(even, g)
		}
	}
	half := st.CandidateSet(s, even...)
	// A value per device: its half of the node's GPUs.
	values := make([]AttributeValue, len(every))
	for i, g := range every {
		values[i] = AttributeValue{Device: GpuRef{Node: g[0], Gpu: g[1]}, Value: g[1] / 4}
	}
	for i := uint32(0); i < 120; i++ {
		first := set
		if i%3 == 0 {
			first = half
		}
		c := st.Claim(fmt.Sprintf("ml/c%d", i), req("a", 1+i%4, first), req("b", i%2, set))
		if i%5 == 0 {
			big := Alternative{Subrequest: witTypes.Some("big"), Count: 8, Candidates: set}
			c.Requests[0].Alternatives = append([]Alternative{big}, c.Requests[0].Alternatives...)
		}
		if i%4 == 1 {
			c.Constraints = append(c.Constraints, Constraint{
				Requests:  []uint32{},
				Distinct:  i%8 == 1,
				Attribute: "numa",
				Values:    append([]AttributeValue{}, values...),
			})
		}
		r := st.DraRequest(fmt.Sprintf("ml/dra%d", i), []Claim{c})
		r.Priority = int32(i % 3)
		r.CreatedMs = uint64(i)
		s.Pending = append(s.Pending, r)
	}
	return s
}

// A large round of GPUResource pods with DRA pods of every kind among them:
// one decision each, and the host accepts all of them.
func TestALargeMixedRoundIsAcceptedWhole(t *testing.T) {
	s := largeMixed()
	for _, fit := range []Fit{Tightest, Loosest} {
		d := decideDra(t, s, fit)
		draPlaced, placed := 0, 0
		for _, x := range d {
			if x.Tag() != Decision_Assign {
				continue
			}
			placed++
			if strings.HasPrefix(s.Pending[x.Assign().Pod].Pod, "ml/dra") {
				draPlaced++
			}
		}
		if verdict, ok := validated(t, s, d); ok {
			draPlaced, placed = 0, len(verdict.Accepted)
			for _, p := range verdict.Accepted {
				if strings.HasPrefix(p.Pod, "ml/dra") {
					draPlaced++
				}
			}
		}
		if draPlaced <= 20 || placed <= draPlaced {
			t.Fatalf("%v: %d DRA pods placed, %d in all", fit, draPlaced, placed)
		}
	}
}

// The Rust devices_of example.
func TestDevicesOfCountsFirstAlternatives(t *testing.T) {
	if got := DevicesOf(ptrTo(st.Request("ns/p", 2, Exclusive, 0))); got != 2 {
		t.Fatalf("GPUResource: %d", got)
	}
	dra := st.DraRequest("ml/train", []Claim{st.Claim("ml/train", req("gpus", 2, 0), req("nic", 1, 1))})
	if got := DevicesOf(&dra); got != 3 {
		t.Fatalf("DRA: %d", got)
	}
	none := st.DraRequest("ml/none", nil)
	if DevicesOf(&none) != 0 || DescribeRequest(&none) != "no devices: its claims are allocated already" {
		t.Fatal("no claims")
	}
}

func ptrTo[T any](v T) *T { return &v }

// A claim whose requests find no complete pick within the search budget
// on a node does not fit there: 4096 steps per claim and node.
func TestTheSearchStopsAtItsBudget(t *testing.T) {
	// 40 GPUs of distinct values under a distinctAttribute: 21 of them are
	// found at once.
	values := make([]int, 40)
	for i := range values {
		values[i] = i
	}
	s := constrained(true, values, [2]uint32{20, 1})
	if _, chosen := choices(t, decideDra(t, s, Tightest)[0]); len(chosen[0].Gpus) != 20 || len(chosen[1].Gpus) != 1 {
		t.Fatalf("chosen: %+v", chosen)
	}
	// Now every value twice: 24 devices with 12 values, 13 distinct wanted.
	// The depth-first pick tries every way to take 12 distinct devices
	// before giving up, which is past the budget; the answer is the same
	// (no pick), and the reason names the constraints.
	values = make([]int, 24)
	for i := range values {
		values[i] = i / 2
	}
	s = constrained(true, values, [2]uint32{12, 1})
	d := decideDra(t, s, Tightest)
	if got := reasonOf(t, d[0]); got != "no eligible node has 13 device(s) for claim ml/c within the claims' constraints, even when idle" {
		t.Fatalf("budget: %s", got)
	}
	c := NewCluster(s)
	claims, _ := c.Want(0).Claims()
	on := c.claimOn(0, &claims[0], useHealthy, nil)
	steps := uint32(searchSteps)
	if _, ok := c.solveClaim(0, &on, 0, &steps); ok || steps != 0 {
		t.Fatalf("the search spent %d of %d steps", searchSteps-steps, searchSteps)
	}
	// A later alternative that would fit is not reached once the budget is
	// spent: the node does not fit the claim.
	few := st.CandidateSet(s, [2]uint32{0, 0})
	request := &claimsOf(s, 0)[0].Requests[0]
	request.Alternatives = append(request.Alternatives, Alternative{Subrequest: witTypes.Some("one"), Count: 1, Candidates: few})
	d = decideDra(t, s, Tightest)
	if d[0].Tag() != Decision_Reject || reasonOf(t, d[0]) != "no eligible node has 13 device(s) for claim ml/c within the claims' constraints, even when idle" {
		t.Fatalf("past the budget: %+v", d[0])
	}
	// Within it, the same alternative is taken.
	values = make([]int, 8)
	for i := range values {
		values[i] = i / 2
	}
	s = constrained(true, values, [2]uint32{4, 1})
	few = st.CandidateSet(s, [2]uint32{0, 0})
	request = &claimsOf(s, 0)[0].Requests[0]
	request.Alternatives = append(request.Alternatives, Alternative{Subrequest: witTypes.Some("one"), Count: 1, Candidates: few})
	_, chosen := choices(t, decideDra(t, s, Tightest)[0])
	if chosen[0].Alternative != 1 || !reflect.DeepEqual(chosen[0].Gpus, []uint32{0}) || !reflect.DeepEqual(chosen[1].Gpus, []uint32{2}) {
		t.Fatalf("within the budget: %+v", chosen)
	}
}
