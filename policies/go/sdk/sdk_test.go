package sdk

import (
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/wasmgpu_policy_types"
)

// gpu is a healthy, free GPU published by the wasmgpu agent, of model 0.
func gpu(index uint32, memory uint64) Gpu {
	return Gpu{Index: index, MemoryMib: memory, Healthy: true, PublishedBy: Publisher_Agent}
}

// node is a node of count identical GPUs (indices 0…), no NVLink, no labels.
func node(name string, count int, memory uint64) Node {
	n := Node{Name: name, Labels: []witTypes.Option[string]{}}
	for i := 0; i < count; i++ {
		n.Gpus = append(n.Gpus, gpu(uint32(i), memory))
	}
	return n
}

// withNvlink links the GPUs of each pair (positions) on both ends: each
// sets the bit of the other's Index.
func withNvlink(n Node, pairs ...[2]int) Node {
	for _, p := range pairs {
		n.Gpus[p[0]].Nvlink |= 1 << n.Gpus[p[1]].Index
		n.Gpus[p[1]].Nvlink |= 1 << n.Gpus[p[0]].Index
	}
	return n
}

// request is a GPUResource request (ask gpus) of namespace 0, eligible set 0.
func request(pod string, count uint32, sharing Sharing, memory uint64) Request {
	return Request{Pod: pod, Ask: MakeAskGpus(GpuShape{Count: count, Sharing: sharing, MemoryMib: memory})}
}

// shapeOf lets a test change a request's shape in place.
func shapeOf(r *Request, change func(*GpuShape)) {
	shape := r.Ask.Gpus()
	change(&shape)
	r.Ask = MakeAskGpus(shape)
}

// claimsRequest is a DRA request (ask claims) with one claim of one device.
func claimsRequest(pod string) Request {
	claim := Claim{Name: pod + "-gpu", Requests: []ClaimRequest{{Name: "gpu", Alternatives: []Alternative{{Count: 1}}}}}
	return Request{Pod: pod, Ask: MakeAskClaims([]Claim{claim})}
}

// set is a node bit set (bit i of word i/64 is node i).
func set(members ...uint32) []uint64 {
	var words []uint64
	for _, m := range members {
		for int(m/64) >= len(words) {
			words = append(words, 0)
		}
		words[m/64] |= 1 << (m % 64)
	}
	return words
}

// snapshot has every node in eligible set 0 and one namespace, "ns".
func snapshot(nodes []Node, pending []Request) *Snapshot {
	all := []uint32{}
	for i := range nodes {
		all = append(all, uint32(i))
	}
	return &Snapshot{Models: []string{"NVIDIA H100"}, Namespaces: []string{"ns"}, Nodes: nodes, Pending: pending, EligibleSets: [][]uint64{set(all...)}}
}

type placed struct {
	pod, node uint32
	gpus      []uint32
}

func assigned(ds []Decision) []placed {
	var out []placed
	for _, d := range ds {
		if d.Tag() == Decision_Assign {
			a := d.Assign()
			out = append(out, placed{a.Pod, a.Node, a.Gpus})
		}
	}
	return out
}

func TestPacksOntoTheFullestNodeThatFits(t *testing.T) {
	busy := node("busy", 4, 81920)
	busy.Gpus[0].Held = true
	busy.Gpus[0].AllocatedMib = 81920
	s := snapshot([]Node{node("idle", 4, 81920), busy}, []Request{
		request("ns/a", 2, Sharing_Exclusive, 0),
		request("ns/b", 1, Sharing_Exclusive, 0),
		request("ns/c", 2, Sharing_Exclusive, 0),
	})
	got := assigned(PlaceEach(s, Tightest))
	want := []placed{{0, 1, []uint32{1, 2}}, {1, 1, []uint32{3}}, {2, 0, []uint32{0, 1}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestWaitsWhenFullAndRejectsWhatNeverFits(t *testing.T) {
	s := snapshot([]Node{node("a", 2, 40960)}, []Request{
		request("ns/first", 2, Sharing_Exclusive, 0),
		request("ns/second", 1, Sharing_Exclusive, 0),
		request("ns/huge", 4, Sharing_Exclusive, 0),
	})
	// Served in name order: first, huge, second.
	d := PlaceEach(s, Tightest)
	if PodOf(d[2]) != 1 || d[2].Tag() != Decision_Wait || !strings.Contains(d[2].Wait().Reason, "free right now") {
		t.Fatalf("second: %+v", d[2])
	}
	if PodOf(d[1]) != 2 || d[1].Tag() != Decision_Reject || !strings.Contains(d[1].Reject().Reason, "even when idle") {
		t.Fatalf("huge: %+v", d[1])
	}
}

func TestSharedStackAndNvlinkPreference(t *testing.T) {
	s := snapshot([]Node{node("a", 2, 24000)}, []Request{
		request("ns/s1", 1, Sharing_Shared, 8000),
		request("ns/s2", 1, Sharing_Shared, 8000),
	})
	for _, p := range assigned(PlaceEach(s, Tightest)) {
		if !reflect.DeepEqual(p.gpus, []uint32{0}) {
			t.Fatalf("shared requests stack on GPU 0: %v", p)
		}
	}
	n := withNvlink(node("n", 4, 81920), [2]int{2, 3})
	s = snapshot([]Node{n}, []Request{request("ns/p", 2, Sharing_Exclusive, 0)})
	if got := assigned(PlaceEach(s, Tightest))[0].gpus; !reflect.DeepEqual(got, []uint32{2, 3}) {
		t.Fatalf("NVLink pair: %v", got)
	}
	s.Config = `{"preferNvlink": false}`
	if got := assigned(PlaceEach(s, Tightest))[0].gpus; !reflect.DeepEqual(got, []uint32{0, 1}) {
		t.Fatalf("without the preference: %v", got)
	}
}

func TestABadConfigFailsTheRound(t *testing.T) {
	var lines []string
	SetLogSink(func(l string) { lines = append(lines, l) })
	defer SetLogSink(func(string) {})
	defer func() {
		if _, ok := recover().(PolicyError); !ok || !strings.Contains(lines[0], "preferNVLink") {
			t.Fatalf("logged %v", lines)
		}
	}()
	s := snapshot(nil, nil)
	s.Config = `{"preferNVLink": false}`
	PlaceEach(s, Tightest)
}

func TestMigAndGangs(t *testing.T) {
	n := node("a", 6, 81920)
	for _, x := range [][2]uint32{{2, 0}, {3, 0}, {4, 1}, {5, 1}} {
		n.Gpus[x[0]].Index = x[1]
		n.Gpus[x[0]].MemoryMib = 40192
		n.Gpus[x[0]].Mig = witTypes.Some(MigInstance{Parent: x[1], Profile: 0})
	}
	n.Gpus[4].Held = true
	m := request("ns/m", 1, Sharing_Exclusive, 0)
	shapeOf(&m, func(g *GpuShape) { g.MigProfile = witTypes.Some("3g.40gb") })
	s := snapshot([]Node{n}, []Request{m, request("ns/whole", 2, Sharing_Exclusive, 0)})
	s.MigProfiles = []string{"3g.40gb"}
	d := PlaceEach(s, Tightest)
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{5}}}) {
		t.Fatalf("MIG: %v", got)
	}
	if !strings.Contains(d[1].Wait().Reason, "2 GPU(s) free right now") {
		t.Fatalf("whole: %+v", d[1])
	}

	pending := []Request{}
	for i := 0; i < 3; i++ {
		r := request("ml/w"+string(rune('0'+i)), 1, Sharing_Exclusive, 0)
		r.Gang = witTypes.Some(uint32(0))
		pending = append(pending, r)
	}
	solo := request("ns/solo", 2, Sharing_Exclusive, 0)
	solo.CreatedMs = 1
	s = snapshot([]Node{node("b", 2, 81920)}, append(pending, solo))
	s.Gangs = []Gang{{Name: "ml/job", MinMember: 3, Pending: []uint32{0, 1, 2}}}
	d = PlaceEach(s, Tightest)
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{3, 0, []uint32{0, 1}}}) {
		t.Fatalf("gang: %v", got)
	}
	if !strings.Contains(d[0].Wait().Reason, "2 of the 3 more members needed fit now") {
		t.Fatalf("gang reason: %+v", d[0])
	}

	// A member that can never fit: the whole gang is rejected while the
	// others cannot reach MinMember without it, only it once they can.
	shapeOf(&s.Pending[2], func(g *GpuShape) { g.Count = 8 })
	d = PlaceEach(s, Tightest)
	for _, dec := range d[:3] {
		if dec.Tag() != Decision_Reject || !strings.Contains(dec.Reject().Reason, "can never be placed: member ml/w2") {
			t.Fatalf("never: %+v", dec)
		}
	}
	s.Gangs[0].MinMember = 2
	d = PlaceEach(s, Tightest)
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{0}}, {1, 0, []uint32{1}}}) {
		t.Fatalf("gang without the impossible member: %v", got)
	}
	for _, dec := range d {
		if dec.Tag() == Decision_Reject && dec.Reject().Pod == 2 && !strings.Contains(dec.Reject().Reason, "gang") {
			return
		}
	}
	t.Fatalf("the impossible member alone is rejected: %+v", d)
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, t string
		ok   bool
	}{{"NVIDIA H100*", "NVIDIA H100 80GB HBM3", true}, {"*A100*", "NVIDIA A100-SXM4-40GB", true},
		{"nvidia*", "NVIDIA H100", false}, {"a*b*c", "aXXbYYbZZc", true}, {"a*b*c", "aXXbYYbZZ", false},
		{"GPU-?é*", "GPU-xé-ü", true}} {
		if GlobMatch(c.p, c.t) != c.ok {
			t.Errorf("GlobMatch(%q, %q) != %v", c.p, c.t, c.ok)
		}
	}
}

func TestNvlinkBitsNameGpusByIndexNotPosition(t *testing.T) {
	// GPU 0 carries two MIG instances, so whole GPUs 1, 2, 3 sit at
	// positions 3, 4, 5. Index 2 links to index 3: positions 4 and 5.
	n := node("m", 4, 81920)
	inst := gpu(0, 40192)
	inst.Mig = witTypes.Some(MigInstance{Parent: 0, Profile: 0})
	n.Gpus = append([]Gpu{n.Gpus[0], inst, inst}, n.Gpus[1:]...)
	n.Gpus[4].Nvlink = 1 << 3
	n.Gpus[5].Nvlink = 1 << 2
	if got := NvlinkPeers(&n, 4); !reflect.DeepEqual(got, []uint32{5}) {
		t.Fatalf("peers of position 4: %v", got)
	}
	if got := NvlinkIndices(1<<63 | 1<<2); !reflect.DeepEqual(got, []uint32{2, 63}) {
		t.Fatalf("indices: %v", got)
	}
	s := snapshot([]Node{n}, []Request{request("ns/p", 2, Sharing_Exclusive, 0)})
	s.MigProfiles = []string{"3g.40gb"}
	if got := assigned(PlaceEach(s, Tightest)); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{4, 5}}}) {
		t.Fatalf("NVLink pair by index: %v", got)
	}
}

func TestGpusOfADraDriverAloneAreNotForGpuResources(t *testing.T) {
	n := node("a", 3, 81920)
	n.Gpus[0].PublishedBy = Publisher_DraDriver
	n.Gpus[1].PublishedBy = Publisher_Both
	s := snapshot([]Node{n}, []Request{request("ns/a", 1, Sharing_Exclusive, 0), request("ns/b", 1, Sharing_Exclusive, 0), request("ns/c", 1, Sharing_Exclusive, 0)})
	d := PlaceEach(s, Tightest)
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{1}}, {1, 0, []uint32{2}}}) {
		t.Fatalf("agent and both only: %v", got)
	}
	if d[2].Tag() != Decision_Wait {
		t.Fatalf("the third waits: %+v", d[2])
	}
	// A node of DRA-only GPUs can never serve a GPUResource request.
	for i := range n.Gpus {
		n.Gpus[i].PublishedBy = Publisher_DraDriver
	}
	s = snapshot([]Node{n}, []Request{request("ns/a", 1, Sharing_Exclusive, 0)})
	if d := PlaceEach(s, Tightest); d[0].Tag() != Decision_Reject || !strings.Contains(d[0].Reject().Reason, "even when idle") {
		t.Fatalf("DRA-only node: %+v", d[0])
	}
}

func TestDraRequestsGetNoDecision(t *testing.T) {
	s := snapshot([]Node{node("a", 2, 81920)}, []Request{claimsRequest("ns/dra"), request("ns/gpu", 1, Sharing_Exclusive, 0)})
	d := PlaceEach(s, Tightest)
	if got := assigned(d); len(d) != 1 || !reflect.DeepEqual(got, []placed{{1, 0, []uint32{0}}}) {
		t.Fatalf("only the GPUResource pod is decided: %+v", d)
	}
	c := NewCluster(s)
	if !reflect.DeepEqual(c.PendingInOrder(), []uint32{1}) || !reflect.DeepEqual(c.DraPending(), []uint32{0}) {
		t.Fatalf("in order: %v, DRA: %v", c.PendingInOrder(), c.DraPending())
	}
	if c.Want(0) != nil || len(Claims(&s.Pending[0])) != 1 {
		t.Fatal("a DRA request has no Want and its claims read back")
	}
	if _, ok := Shape(&s.Pending[0]); ok {
		t.Fatal("a DRA request has no shape")
	}
	if _, ok := Shape(&Request{}); ok {
		t.Fatal("a request without its ask has no shape")
	}
	if shape, ok := Shape(&s.Pending[1]); !ok || shape.Count != 1 {
		t.Fatalf("shape: %+v", shape)
	}

	// A gang with a DRA member: it gets no decision, and counts as one
	// that may come later, so the others wait rather than being rejected.
	pending := []Request{request("ml/w0", 1, Sharing_Exclusive, 0), claimsRequest("ml/w1")}
	for i := range pending {
		pending[i].Gang = witTypes.Some(uint32(0))
	}
	s = snapshot([]Node{node("b", 1, 81920)}, pending)
	s.Gangs = []Gang{{Name: "ml/job", MinMember: 2, Pending: []uint32{0, 1}}}
	d = PlaceEach(s, Tightest)
	if len(d) != 1 || PodOf(d[0]) != 0 || d[0].Tag() != Decision_Wait {
		t.Fatalf("mixed gang: %+v", d)
	}
}

func TestEligibleSetsAreBitSets(t *testing.T) {
	var nodes []Node
	for i := 0; i < 70; i++ {
		nodes = append(nodes, node("n"+string(rune('A'+i%26)), 1, 81920))
	}
	s := snapshot(nodes, []Request{request("ns/p", 1, Sharing_Exclusive, 0)})
	s.EligibleSets = [][]uint64{set(3, 66, 200)}
	c := NewCluster(s)
	w := c.Want(0)
	if got := c.Eligible(w); !reflect.DeepEqual(got, []uint32{3, 66}) {
		t.Fatalf("eligible: %v", got)
	}
	if !c.IsEligible(w, 66) || c.IsEligible(w, 4) || c.IsEligible(w, 200) {
		t.Fatal("IsEligible")
	}
	if !InSet(s.EligibleSets[0], 200) || InSet(s.EligibleSets[0], 500) {
		t.Fatal("InSet")
	}
	s.Nodes[3].Gpus[0].Held = true
	if got := assigned(PlaceEach(s, Tightest)); !reflect.DeepEqual(got, []placed{{0, 66, []uint32{0}}}) {
		t.Fatalf("placed: %v", got)
	}
}

func TestTablesLabelsAndBuilders(t *testing.T) {
	s := snapshot([]Node{node("a", 1, 81920)}, []Request{request("ml/p", 1, Sharing_Exclusive, 0)})
	s.Namespaces = []string{"default", "ml"}
	s.Pending[0].Namespace = 1
	s.Tenants = []Tenant{{Name: "research", Quota: 4}}
	s.Pending[0].Tenant = witTypes.Some(uint32(0))
	if NamespaceName(s, s.Pending[0].Namespace) != "ml" || NamespaceName(s, 9) != "" {
		t.Fatal("NamespaceName")
	}
	if tn := TenantOf(s, s.Pending[0].Tenant); tn == nil || tn.Name != "research" || TenantOf(s, witTypes.None[uint32]()) != nil {
		t.Fatal("TenantOf")
	}
	s.LabelKeys = []string{"zone", "rack"}
	s.Nodes[0].Labels = []witTypes.Option[string]{witTypes.None[string](), witTypes.Some("r7")}
	if v, ok := Label(s, &s.Nodes[0], "rack"); !ok || v != "r7" {
		t.Fatalf("rack: %q", v)
	}
	for _, key := range []string{"zone", "region"} {
		if _, ok := Label(s, &s.Nodes[0], key); ok {
			t.Fatalf("%s has no value", key)
		}
	}
	if info := NewInfo("p", "1", "d"); info.LabelKeys == nil || len(info.LabelKeys) != 0 {
		t.Fatalf("no label keys: %+v", info)
	}
	if info := NewInfo("p", "1", "d", "zone"); !reflect.DeepEqual(info.LabelKeys, []string{"zone"}) {
		t.Fatalf("label keys: %+v", info)
	}
	a := Assign(0, 0, []uint32{0}).Assign()
	if a.Claims == nil || len(a.Claims) != 0 {
		t.Fatalf("an assignment's claims are empty: %+v", a)
	}
	p := Preempt(2, 1, []uint32{0}, []uint32{5})
	if PodOf(p) != 2 || !reflect.DeepEqual(p.Preempt().Victims, []uint32{5}) {
		t.Fatalf("preempt: %+v", p)
	}
}

func TestPreemptionKeyIsAcceptedAndMustBeABoolean(t *testing.T) {
	s := snapshot([]Node{node("a", 1, 81920)}, []Request{request("ns/p", 1, Sharing_Exclusive, 0)})
	for _, config := range []string{`{"preemption": false}`, `{"preemption": true, "preferNvlink": false}`} {
		s.Config = config
		if got := assigned(PlaceEach(s, Tightest)); len(got) != 1 {
			t.Fatalf("%s: %v", config, got)
		}
	}
	for _, config := range []string{`{"preemption": 1}`, `{"preemption": "yes"}`, `{"preemption": null}`, `{"preferNvlink": null}`} {
		params := PlacementParams{}
		if err := ParseConfig(config, &params); err == nil {
			t.Fatalf("%s is refused", config)
		}
	}
}
