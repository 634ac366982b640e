package sdk

import (
	"errors"
	"reflect"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

// full: node "n", 8 GPUs each held by a pod of priority 100 (started 0-7);
// node "m", 4 free GPUs; one pending pod of priority 1000 for 4 GPUs.
func full() *Snapshot {
	s := st.Snapshot([]Node{st.Node("n", 8, h100, 81920), st.Node("m", 4, h100, 81920)},
		[]Request{st.Request("ml/urgent", 4, Exclusive, 0)})
	s.Pending[0].Priority = 1000
	st.RunningOnEachGpu(s, 0, "batch/p", 100)
	return s
}

func decide(s *Snapshot) (Decision, bool) {
	c := NewCluster(s)
	return c.Preempt(c.Want(0), Tightest, NvlinkIgnore)
}

func TestTheFewestLowestYoungestPodsGo(t *testing.T) {
	s := full()
	// m has 2 GPUs free and 2 held by priority-10 pods: 2 victims there.
	st.Running(s, "batch/m0", 10, 1, []uint32{0}, 0)
	st.Running(s, "batch/m1", 10, 1, []uint32{1}, 0)
	d, ok := decide(s)
	if !ok || !reflect.DeepEqual(d, Preempt(0, 1, []uint32{0, 1, 2, 3}, []uint32{8, 9})) {
		t.Fatalf("on m: %s", st.Describe(s, d))
	}
	// Without m's pods, n's youngest four go (m is free, but Preempt is
	// asked directly: PlaceEach would have placed the pod on m).
	s = full()
	d, ok = decide(s)
	if !ok || !reflect.DeepEqual(d, Preempt(0, 0, []uint32{4, 5, 6, 7}, []uint32{7, 6, 5, 4})) {
		t.Fatalf("on n: %s", st.Describe(s, d))
	}
	// The decision is committed: its GPUs are taken, its victims are not
	// named again.
	c := NewCluster(s)
	c.Preempt(c.Want(0), Tightest, NvlinkIgnore)
	if !c.GpuNow(0, 4).Held || c.victimTaken[3] || !c.victimTaken[4] {
		t.Fatal("committed")
	}
	if d, ok := c.Preempt(c.Want(0), Tightest, NvlinkIgnore); !ok || !reflect.DeepEqual(d.Preempt().Victims, []uint32{3, 2, 1, 0}) {
		t.Fatalf("second: %s", st.Describe(s, d))
	}
}

func TestNobodyIsPreemptedForEqualPriorityNeverOrProtected(t *testing.T) {
	s := full()
	s.Pending[0].Priority = 100
	if _, ok := decide(s); ok {
		t.Fatal("equal priority")
	}
	s = full()
	s.Pending[0].Preemption = PreemptNever
	if _, ok := decide(s); ok {
		t.Fatal("never")
	}
	s = full()
	for i := range s.Running[:6] {
		s.Running[i].ProtectedMs = 1
	}
	if _, ok := decide(s); ok {
		t.Fatal("only 2 GPUs could be freed")
	}
	for i := range s.Running[:2] {
		s.Running[i].ProtectedMs = 0
	}
	if d, ok := decide(s); !ok || !reflect.DeepEqual(d.Preempt().Victims, []uint32{7, 6, 1, 0}) {
		t.Fatalf("4 unprotected pods: %s", st.Describe(s, d))
	}
	// Shared requests and gang members do not preempt.
	s = full()
	st.EditShape(&s.Pending[0], func(g *GpuShape) { g.Sharing = Shared; g.Count = 1; g.MemoryMib = 1000 })
	if _, ok := decide(s); ok {
		t.Fatal("shared")
	}
	s = full()
	st.Gang(s, "ml/g", 1, 0)
	if _, ok := decide(s); ok {
		t.Fatal("gang member")
	}
	// A gang with a member that is not evictable is no victim either: p5-p7
	// free only 3 GPUs.
	s = full()
	gangOf(s, 0, 1, 2, 3, 4)
	s.Running[0].Evictable = false
	if _, ok := decide(s); ok {
		t.Fatal("gang victims")
	}
}

// gangOf makes running pods members gang "batch/g".
func gangOf(s *Snapshot, members ...uint32) {
	g := st.Gang(s, "batch/g", uint32(len(members)))
	for _, r := range members {
		s.Running[r].Gang = witTypes.Some(g)
		s.Gangs[g].Running = append(s.Gangs[g].Running, r)
	}
}

// accepted fails t unless the host accepts decisions on s (when there is a
// wasmgpu to ask).
func accepted(t *testing.T, s *Snapshot, decisions []Decision) {
	t.Helper()
	verdict, err := st.Validate(s, decisions)
	if errors.Is(err, st.ErrNoWasmgpu) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(verdict.Refused) != 0 {
		t.Fatalf("refused: %v", verdict.Refused)
	}
}

func TestAGangGoesWholeAndOnlyWhenCheaperThanPodsInNone(t *testing.T) {
	// The youngest two are a gang: the four youngest in no gang go.
	s := full()
	gangOf(s, 6, 7)
	d, ok := decide(s)
	if !ok || !reflect.DeepEqual(d, Preempt(0, 0, []uint32{2, 3, 4, 5}, []uint32{5, 4, 3, 2})) {
		t.Fatalf("gang of the youngest: %s", st.Describe(s, d))
	}
	accepted(t, s, []Decision{d})

	// p0-p3 are protected; p4 and p5 are a gang with m0 on node m. On m,
	// evicting m0 makes room, and the gang goes whole: 3 victims, fewer than
	// n's 5 (p7, p6 and the gang).
	s = full()
	if r := st.Running(s, "batch/m0", 100, 1, []uint32{0}, 0); r != 8 {
		t.Fatalf("m0 at %d", r)
	}
	for i := range s.Running[:4] {
		s.Running[i].ProtectedMs = 1
	}
	gangOf(s, 4, 5, 8)
	d, ok = decide(s)
	if !ok || !reflect.DeepEqual(d, Preempt(0, 1, []uint32{0, 1, 2, 3}, []uint32{4, 5, 8})) {
		t.Fatalf("gang across nodes: %s", st.Describe(s, d))
	}
	accepted(t, s, []Decision{d})

	// A gang member that may not go keeps its whole gang: 2 GPUs can be
	// freed on n, none on m.
	s.Running[8].Evictable = false
	if d, ok := decide(s); ok {
		t.Fatalf("a member may not go: %s", st.Describe(s, d))
	}
}

func TestPlaceEachPreemptsUnlessTheConfigSaysNo(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("n", 8, h100, 81920)}, []Request{st.Request("ml/urgent", 4, Exclusive, 0)})
	s.Pending[0].Priority = 1000
	st.RunningOnEachGpu(s, 0, "batch/p", 100)
	d := PlaceEach(s, Tightest)
	if len(d) != 1 || !reflect.DeepEqual(d[0], Preempt(0, 0, []uint32{4, 5, 6, 7}, []uint32{7, 6, 5, 4})) {
		t.Fatalf("preempt: %s", st.Describe(s, d[0]))
	}
	s.Config = `{"preemption": false}`
	if d := PlaceEach(s, Tightest); d[0].Tag() != Decision_Wait || d[0].Wait().Reason != "no eligible node has 4 GPU(s) free right now" {
		t.Fatalf("no preemption: %s", st.Describe(s, d[0]))
	}
	// What can never fit is rejected, not preempted for.
	st.EditShape(&s.Pending[0], func(g *GpuShape) { g.Count = 9 })
	s.Config = ""
	if d := PlaceEach(s, Tightest); d[0].Tag() != Decision_Reject {
		t.Fatalf("never: %s", st.Describe(s, d[0]))
	}
}

func TestAPodWhoseVictimsABudgetProtectsWaitsSayingSo(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("n", 8, h100, 81920)}, []Request{st.Request("ml/urgent", 4, Exclusive, 0)})
	s.Pending[0].Priority = 1000
	st.RunningOnEachGpu(s, 0, "batch/p", 100)
	for i := range s.Running {
		s.Running[i].Evictable = i < 3
	}
	d := PlaceEach(s, Tightest)
	want := "no eligible node has 4 GPU(s) free right now; 5 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now"
	if d[0].Tag() != Decision_Wait || d[0].Wait().Reason != want {
		t.Fatalf("got %s", st.Describe(s, d[0]))
	}
	c := NewCluster(s)
	if why, ok := c.PreemptionBlocked(c.Want(0)); !ok || why != "5 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now" {
		t.Fatalf("blocked: %q", why)
	}
	s.Pending[0].Preemption = PreemptNever
	if _, ok := NewCluster(s).PreemptionBlocked(c.Want(0)); ok {
		t.Fatal("a pod that never preempts is not blocked")
	}
	if d := PlaceEach(s, Tightest); d[0].Wait().Reason != "no eligible node has 4 GPU(s) free right now" {
		t.Fatalf("never: %s", st.Describe(s, d[0]))
	}
}

func TestAPodWhoseVictimsAreWithinTheirMinimumRuntimeWaitsSayingSo(t *testing.T) {
	blocked := func(s *Snapshot) string {
		c := NewCluster(s)
		why, ok := c.PreemptionBlocked(c.Want(0))
		if !ok {
			return "(none)"
		}
		return why
	}
	// As the Rust SDK's test: 6 pods protected for 1 ms, one of them 1500 ms.
	s := full()
	for i := range s.Running[:6] {
		s.Running[i].ProtectedMs = 1
	}
	s.Running[0].ProtectedMs = 1_500
	if got, want := blocked(s), "6 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 1 s)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// Whole seconds, rounded up.
	s = full()
	s.Running[0].ProtectedMs = 2_001
	s.Running[1].ProtectedMs = 4_000
	if got, want := blocked(s), "2 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 3 s)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	s.Running[0].ProtectedMs = 2_000
	if got, want := blocked(s), "2 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 2 s)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	s.Running[0].ProtectedMs = ^uint64(0) // no overflow rounding up
	s.Running[1].ProtectedMs = 0
	if got, want := blocked(s), "1 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 18446744073709552 s)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// Both: the budget first, then the minimum runtime; a pod a budget
	// protects is counted there only, and pods of equal priority not at all.
	s = st.Snapshot([]Node{st.Node("n", 8, h100, 81920)}, []Request{st.Request("ml/urgent", 4, Exclusive, 0)})
	s.Pending[0].Priority = 1000
	st.RunningOnEachGpu(s, 0, "batch/p", 100)
	for i := range s.Running[:3] {
		s.Running[i].Evictable = false
	}
	s.Running[2].ProtectedMs = 500
	s.Running[3].ProtectedMs = 61_001
	s.Running[4].ProtectedMs = 120_000
	s.Running[5].ProtectedMs = 1
	s.Running[5].Priority = 1000
	both := "3 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now; " +
		"2 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 62 s)"
	if got := blocked(s); got != both {
		t.Fatalf("got %q, want %q", got, both)
	}
	if d := PlaceEach(s, Tightest); d[0].Tag() != Decision_Wait || d[0].Wait().Reason != "no eligible node has 4 GPU(s) free right now; "+both {
		t.Fatalf("got %s", st.Describe(s, d[0]))
	}
	s.Pending[0].Preemption = PreemptNever
	if got := blocked(s); got != "(none)" {
		t.Fatalf("a pod that never preempts is not blocked: %q", got)
	}
	// None protected, none young: no reason.
	if got := blocked(full()); got != "(none)" {
		t.Fatalf("nothing blocks: %q", got)
	}
}

func TestPreemptWhereTakesItsOwnRule(t *testing.T) {
	s := full()
	s.Pending[0].Priority = 0 // below the running pods
	c := NewCluster(s)
	if _, ok := c.Preempt(c.Want(0), Tightest, NvlinkIgnore); ok {
		t.Fatal("no lower priority")
	}
	batch := st.Namespace("batch")
	d, ok := c.PreemptWhere(c.Want(0), Tightest, NvlinkIgnore, func(pod *Running) bool { return pod.Namespace == batch })
	if !ok || !reflect.DeepEqual(d, Preempt(0, 0, []uint32{4, 5, 6, 7}, []uint32{7, 6, 5, 4})) {
		t.Fatalf("reclaim: %s", st.Describe(s, d))
	}
}

func TestPreemptionFreesMigInstancesAndTheirParents(t *testing.T) {
	// GPU 0 held whole by a; GPU 1 carved into two instances, one held by
	// b. A pod for 2 whole GPUs needs both gone.
	n := st.WithMig(st.Node("m", 2, h100, 81920), 1, st.Mig{Profile: "3g.40gb", MemoryMib: 40192}, st.Mig{Profile: "3g.40gb", MemoryMib: 40192})
	s := st.Snapshot([]Node{n}, []Request{st.Request("ml/two", 2, Exclusive, 0), st.MigRequest("ml/inst", 2, "3g.40gb")})
	s.Pending[0].Priority, s.Pending[1].Priority = 100, 50
	st.Running(s, "batch/a", 10, 0, []uint32{0}, 0)
	st.Running(s, "batch/b", 10, 0, []uint32{2}, 1)
	c := NewCluster(s)
	d, ok := c.Preempt(c.Want(0), Tightest, NvlinkPrefer)
	if !ok || !reflect.DeepEqual(d, Preempt(0, 0, []uint32{0, 1}, []uint32{1, 0})) {
		t.Fatalf("whole: %s", st.Describe(s, d))
	}
	// A MIG pod for both instances evicts b only.
	c = NewCluster(s)
	d, ok = c.Preempt(c.Want(1), Tightest, NvlinkPrefer)
	if !ok || !reflect.DeepEqual(d, Preempt(1, 0, []uint32{2, 3}, []uint32{1})) {
		t.Fatalf("instances: %s", st.Describe(s, d))
	}
}

func TestAPodWhoseTenantIsAtItsLimitWaitsSayingSo(t *testing.T) {
	var pending []Request
	for i := 0; i < 3; i++ {
		r := st.Request("ml/p"+string(rune('0'+i)), 1, Exclusive, 0)
		r.Tenant = witTypes.Some(uint32(0))
		pending = append(pending, r)
	}
	s := st.Snapshot([]Node{st.Node("n", 8, h100, 81920)}, pending)
	s.Tenants = []Tenant{{Name: "ml", Weight: 1, Limit: witTypes.Some(uint32(3)), Holding: 1, Waiting: 3}}
	d := PlaceEach(s, Tightest)
	if got := assigned(d); len(got) != 2 {
		t.Fatalf("1 held + 2 = the limit of 3: %v", got)
	}
	last := d[len(d)-1]
	if last.Tag() != Decision_Wait || last.Wait().Reason != "tenant ml holds 3 of its limit 3 GPUs (GPUTenant ml: spec.limit); this pod needs 1 more" {
		t.Fatalf("the third: %s", st.Describe(s, last))
	}
	c := NewCluster(s)
	if c.TenantHeld(0) != 1 {
		t.Fatal("held")
	}
	c.Place(0, c.Want(0), Tightest, true)
	if c.TenantHeld(0) != 2 {
		t.Fatal("held after a commit")
	}
	if _, over := c.OverTenantLimit(c.Want(1)); over {
		t.Fatal("2 + 1 is the limit")
	}
	c.Place(0, c.Want(1), Tightest, true)
	if _, over := c.OverTenantLimit(c.Want(2)); !over {
		t.Fatal("3 + 1 is past it")
	}
	// No limit, no tenant: never over.
	s.Tenants[0].Limit = witTypes.None[uint32]()
	if got := assigned(PlaceEach(s, Tightest)); len(got) != 3 {
		t.Fatalf("no limit: %v", got)
	}
}

func TestUsageCountsWhatEachNamespaceHolds(t *testing.T) {
	n := st.WithMig(st.Node("a", 4, "NVIDIA L4", 23034), 3, st.Mig{Profile: "1g.10gb", MemoryMib: 9856}, st.Mig{Profile: "1g.10gb", MemoryMib: 9856})
	s := st.Snapshot([]Node{n}, nil)
	st.Running(s, "ml/train", 0, 0, []uint32{0, 1}, 0)
	st.RunningShared(s, "web/infer", 0, 0, []uint32{2}, 4096, 0)
	st.Running(s, "ml/small", 0, 0, []uint32{4, 5}, 0)
	got := Usage(s)
	want := []NamespaceUsage{{Namespace: "ml", ExclusiveGpus: 2, MigInstances: 2}, {Namespace: "web", SharedMib: 4096}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("usage: %+v", got)
	}
	if got := Usage(st.Snapshot(nil, nil)); len(got) != 0 {
		t.Fatalf("nobody: %+v", got)
	}
}

func TestTheFewestVictimsThenTheLowestPrioritiesWin(t *testing.T) {
	nodes := []Node{st.Node("a", 1, h100, 81920), st.Node("b", 1, h100, 81920), st.Node("c", 1, h100, 81920)}
	s := st.Snapshot(nodes, []Request{st.Request("ml/urgent", 1, Exclusive, 0)})
	s.Pending[0].Priority = 100
	st.Running(s, "batch/a", 50, 0, []uint32{0}, 0)
	st.RunningShared(s, "batch/b10", 10, 1, []uint32{0}, 4000, 0)
	st.RunningShared(s, "batch/b20", 20, 1, []uint32{0}, 4000, 0)
	st.Running(s, "batch/c", 30, 2, []uint32{0}, 0)
	// a and c: one victim each, c's of lower priority; b: two shared pods.
	if d, ok := decide(s); !ok || !reflect.DeepEqual(d, Preempt(0, 2, []uint32{0}, []uint32{3})) {
		t.Fatalf("c: %s", st.Describe(s, d))
	}
	s.Running[3].Evictable = false
	if d, ok := decide(s); !ok || !reflect.DeepEqual(d, Preempt(0, 0, []uint32{0}, []uint32{0})) {
		t.Fatalf("a: %s", st.Describe(s, d))
	}
	// Both shared pods must go to free b's GPU.
	s.Running[0].Evictable = false
	if d, ok := decide(s); !ok || !reflect.DeepEqual(d, Preempt(0, 1, []uint32{0}, []uint32{1, 2})) {
		t.Fatalf("b: %s", st.Describe(s, d))
	}
}

func TestSmallHelpers(t *testing.T) {
	shape := GpuShape{Count: 2, MemoryMib: 1024}
	if DescribeShape(&shape) != "2 GPU(s) with at least 1024 MiB each" {
		t.Fatal(DescribeShape(&shape))
	}
	if (PolicyError{"m"}).Error() != "m" || Nvlink(9).String() != "Nvlink(9)" || NvlinkRequire.String() != "require" {
		t.Fatal("strings")
	}
	var p struct {
		N int `json:"n"`
	}
	MustParseConfig(`{"n": 2}`, &p)
	defer func() {
		if e, ok := recover().(PolicyError); !ok || e.Message != "invalid policy config.json: `n` is true, expected a whole number" {
			t.Fatalf("MustParseConfig: %v", e)
		}
	}()
	MustParseConfig(`{"n": true}`, &p)
}

// urgentDra is full() with its pending pod asking through claims instead:
// priority 1000, 3 of n's first 6 GPUs (its candidates) for one claim and 1
// of them for a second.
func urgentDra() *Snapshot {
	s := full()
	s.Pending = nil
	six := st.CandidateSet(s, [2]uint32{0, 0}, [2]uint32{0, 1}, [2]uint32{0, 2}, [2]uint32{0, 3}, [2]uint32{0, 4}, [2]uint32{0, 5})
	urgent := st.DraRequest("ml/urgent", []Claim{
		st.Claim("ml/urgent-a", st.ClaimRequest("gpus", 3, six)),
		st.Claim("ml/urgent-b", st.ClaimRequest("gpu", 1, six)),
	})
	urgent.Priority = 1000
	s.Pending = append(s.Pending, urgent)
	return s
}

func TestADraPodPreemptsThroughItsClaimsAndTheHostAcceptsIt(t *testing.T) {
	s := urgentDra()
	d, ok := decide(s)
	if !ok || d.Tag() != Decision_Preempt {
		t.Fatalf("a preemption: %s", st.Describe(s, d))
	}
	p := d.Preempt()
	// The youngest among the candidates' holders go: p5, p4, p3, p2.
	if !reflect.DeepEqual(p.Victims, []uint32{5, 4, 3, 2}) {
		t.Fatalf("victims: %v", p.Victims)
	}
	if p.Assignment.Node != 0 || len(p.Assignment.Gpus) != 0 {
		t.Fatalf("on n, named by the claims: %+v", p.Assignment)
	}
	want := []ClaimChoice{
		{Claim: 0, Request: 0, Alternative: 0, Gpus: []uint32{2, 3, 4}},
		{Claim: 1, Request: 0, Alternative: 0, Gpus: []uint32{5}},
	}
	if !reflect.DeepEqual(p.Assignment.Claims, want) {
		t.Fatalf("claims: %+v", p.Assignment.Claims)
	}
	if verdict, ok := validated(t, s, []Decision{d}); ok && len(verdict.Preempting) != 1 {
		t.Fatalf("preempting: %+v", verdict)
	}

	// The decision is committed: its devices are taken, its victims are
	// not named again.
	c := NewCluster(s)
	c.Preempt(c.Want(0), Tightest, NvlinkIgnore)
	if !c.GpuNow(0, 2).Held || !c.GpuNow(0, 5).Held || c.victimTaken[1] || !c.victimTaken[2] {
		t.Fatal("committed")
	}

	// PlaceEach preempts for it, unless the config says no.
	if got := PlaceEach(s, Tightest); len(got) != 1 || !reflect.DeepEqual(got[0], d) {
		t.Fatalf("PlaceEach: %+v", got)
	}
	s.Config = `{"preemption": false}`
	short := `no eligible node has 3 device(s) for claim ml/urgent-a request "gpus" (6 candidate(s) on eligible nodes) free right now; at most 0 free on any eligible node`
	if got := PlaceEach(s, Tightest); got[0].Tag() != Decision_Wait || got[0].Wait().Reason != short {
		t.Fatalf("no preemption: %s", st.Describe(s, got[0]))
	}
	// A budget protecting its victims: it waits, saying so.
	s.Config = ""
	for i := range s.Running {
		s.Running[i].Evictable = false
	}
	blocked := short + "; 8 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now"
	if got := PlaceEach(s, Tightest); got[0].Tag() != Decision_Wait || got[0].Wait().Reason != blocked {
		t.Fatalf("protected: %s", st.Describe(s, got[0]))
	}

	// Never, or nothing lower: no preemption.
	s = urgentDra()
	s.Pending[0].Preemption = PreemptNever
	if _, ok := decide(s); ok {
		t.Fatal("never")
	}
	s.Pending[0].Preemption = PreemptLowerPriority
	s.Pending[0].Priority = 100
	if _, ok := decide(s); ok {
		t.Fatal("equal priority")
	}
}
