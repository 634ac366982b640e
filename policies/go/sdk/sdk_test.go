package sdk

import (
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

const h100 = "NVIDIA H100"

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
	busy := st.Node("busy", 4, h100, 81920)
	busy.Gpus[0].Held = true
	busy.Gpus[0].AllocatedMib = 81920
	s := st.Snapshot([]Node{st.Node("idle", 4, h100, 81920), busy}, []Request{
		st.Request("ns/a", 2, Exclusive, 0),
		st.Request("ns/b", 1, Exclusive, 0),
		st.Request("ns/c", 2, Exclusive, 0),
	})
	got := assigned(PlaceEach(s, Tightest))
	want := []placed{{0, 1, []uint32{1, 2}}, {1, 1, []uint32{3}}, {2, 0, []uint32{0, 1}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestWaitsWhenFullAndRejectsWhatNeverFits(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("a", 2, h100, 40960)}, []Request{
		st.Request("ns/first", 2, Exclusive, 0),
		st.Request("ns/second", 1, Exclusive, 0),
		st.Request("ns/huge", 4, Exclusive, 0),
	})
	// Served in name order: first, huge, second.
	d := PlaceEach(s, Tightest)
	if PodOf(d[2]) != 1 || d[2].Tag() != Decision_Wait || d[2].Wait().Reason != "no eligible node has 1 GPU(s) free right now" {
		t.Fatalf("second: %+v", d[2])
	}
	if PodOf(d[1]) != 2 || d[1].Tag() != Decision_Reject || d[1].Reject().Reason != "no eligible node has 4 GPU(s), even when idle" {
		t.Fatalf("huge: %+v", d[1])
	}
}

func TestSharedStackAndNvlinkPreference(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("a", 2, "NVIDIA L4", 24000)}, []Request{
		st.Request("ns/s1", 1, Shared, 8000),
		st.Request("ns/s2", 1, Shared, 8000),
	})
	for _, p := range assigned(PlaceEach(s, Tightest)) {
		if !reflect.DeepEqual(p.gpus, []uint32{0}) {
			t.Fatalf("shared requests stack on GPU 0: %v", p)
		}
	}
	n := st.WithNvlink(st.Node("n", 4, h100, 81920), [2]uint32{2, 3})
	s = st.Snapshot([]Node{n}, []Request{st.Request("ns/p", 2, Exclusive, 0)})
	for _, config := range []string{"", `{"nvlink": "prefer"}`, `{"preferNvlink": true}`, `{"nvlink": "require"}`} {
		// {"nvlink": "prefer"} is the README's binpack config.
		s.Config = config
		if got := assigned(PlaceEach(s, Tightest))[0].gpus; !reflect.DeepEqual(got, []uint32{2, 3}) {
			t.Fatalf("%s: NVLink pair: %v", config, got)
		}
	}
	for _, config := range []string{`{"preferNvlink": false}`, `{"nvlink": "ignore"}`, `{"nvlink": "ignore", "preferNvlink": true}`} {
		s.Config = config
		if got := assigned(PlaceEach(s, Tightest))[0].gpus; !reflect.DeepEqual(got, []uint32{0, 1}) {
			t.Fatalf("%s: %v", config, got)
		}
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
	s := st.Snapshot(nil, nil)
	s.Config = `{"preferNVLink": false}`
	PlaceEach(s, Tightest)
}

func TestMigAndGangs(t *testing.T) {
	// Two whole GPUs, each with two 3g.40gb instances; one instance of
	// GPU 1 held.
	n := st.WithMig(st.WithMig(st.Node("a", 2, h100, 81920), 0, st.Mig{Profile: "3g.40gb", MemoryMib: 40192}, st.Mig{Profile: "3g.40gb", MemoryMib: 40192}),
		3, st.Mig{Profile: "3g.40gb", MemoryMib: 40192}, st.Mig{Profile: "3g.40gb", MemoryMib: 40192})
	// Positions: 0 GPU 0, 1-2 its instances, 3 GPU 1, 4-5 its instances.
	n.Gpus[4].Held = true
	m := st.MigRequest("ns/m", 1, "3g.40gb")
	s := st.Snapshot([]Node{n}, []Request{m, st.Request("ns/whole", 2, Exclusive, 0)})
	d := PlaceEach(s, Tightest)
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{5}}}) {
		t.Fatalf("MIG: %v", got)
	}
	if d[1].Wait().Reason != "no eligible node has 2 GPU(s) free right now" {
		t.Fatalf("whole: %+v", d[1])
	}

	pending := []Request{}
	for i := 0; i < 3; i++ {
		pending = append(pending, st.Request("ml/w"+string(rune('0'+i)), 1, Exclusive, 0))
	}
	solo := st.Request("ns/solo", 2, Exclusive, 0)
	solo.CreatedMs = 1
	s = st.Snapshot([]Node{st.Node("b", 2, h100, 81920)}, append(pending, solo))
	st.Gang(s, "ml/job", 3, 0, 1, 2)
	d = PlaceEach(s, Tightest)
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{3, 0, []uint32{0, 1}}}) {
		t.Fatalf("gang: %v", got)
	}
	if d[0].Wait().Reason != "gang ml/job: 2 of the 3 more members needed fit now (0 bound, minMember 3); all or nothing, so none is placed yet" {
		t.Fatalf("gang reason: %+v", d[0])
	}

	// A member that can never fit: the whole gang is rejected while the
	// others cannot reach MinMember without it, only it once they can.
	st.EditShape(&s.Pending[2], func(g *GpuShape) { g.Count = 8 })
	d = PlaceEach(s, Tightest)
	for _, dec := range d[:3] {
		if dec.Tag() != Decision_Reject || dec.Reject().Reason != "gang ml/job can never be placed: member ml/w2 fits nowhere (no eligible node has 8 GPU(s), even when idle)" {
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

func TestAGangIsPlacedWithoutAMemberThatWaits(t *testing.T) {
	// Two of three suffice; the third does not fit now.
	n := st.Node("a", 4, h100, 81920)
	s := st.Snapshot([]Node{n}, []Request{
		st.Request("ns/w-0", 2, Exclusive, 0), st.Request("ns/w-1", 1, Exclusive, 0), st.Request("ns/w-2", 2, Exclusive, 0),
	})
	st.Gang(s, "ns/train", 2, 0, 1, 2)
	d := PlaceEach(s, Tightest)
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{0, 1}}, {1, 0, []uint32{2}}}) {
		t.Fatalf("assigned: %v", got)
	}
	if d[2].Wait().Reason != "gang ns/train is placed without this member (2 of 2 needed fit); it waits for room" {
		t.Fatalf("the third: %+v", d[2])
	}
	// The trial became the state: a later pod finds GPU 3 only.
	c := NewCluster(s)
	c.PlaceGang(0, Tightest, true)
	if got := c.FreeGpus(0, ""); !reflect.DeepEqual(got, []uint32{3}) {
		t.Fatalf("free after the gang: %v", got)
	}
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
	n := st.WithMig(st.Node("m", 4, h100, 81920), 0, st.Mig{Profile: "3g.40gb", MemoryMib: 40192}, st.Mig{Profile: "3g.40gb", MemoryMib: 40192})
	n.Gpus[4].Nvlink = 1 << 3
	n.Gpus[5].Nvlink = 1 << 2
	if got := NvlinkPeers(&n, 4); !reflect.DeepEqual(got, []uint32{5}) {
		t.Fatalf("peers of position 4: %v", got)
	}
	if got := NvlinkIndices(1<<63 | 1<<2); !reflect.DeepEqual(got, []uint32{2, 63}) {
		t.Fatalf("indices: %v", got)
	}
	s := st.Snapshot([]Node{n}, []Request{st.Request("ns/p", 2, Exclusive, 0)})
	if got := assigned(PlaceEach(s, Tightest)); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{4, 5}}}) {
		t.Fatalf("NVLink pair by index: %v", got)
	}
	c := NewCluster(s)
	if !c.AreNvlinkPeers(0, 4, 5) || !c.AreNvlinkPeers(0, 5, 4) || c.AreNvlinkPeers(0, 3, 4) || c.AreNvlinkPeers(0, 4, 4) {
		t.Fatal("peers by position")
	}
}

func TestGpusOfADraDriverAloneAreNotForGpuResources(t *testing.T) {
	n := st.Node("a", 3, h100, 81920)
	n.Gpus[0].PublishedBy = Publisher_DraDriver
	n.Gpus[1].PublishedBy = Publisher_Both
	s := st.Snapshot([]Node{n}, []Request{st.Request("ns/a", 1, Exclusive, 0), st.Request("ns/b", 1, Exclusive, 0), st.Request("ns/c", 1, Exclusive, 0)})
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
	s = st.Snapshot([]Node{n}, []Request{st.Request("ns/a", 1, Exclusive, 0)})
	if d := PlaceEach(s, Tightest); d[0].Tag() != Decision_Reject || !strings.Contains(d[0].Reject().Reason, "even when idle") {
		t.Fatalf("DRA-only node: %+v", d[0])
	}
}

func TestDraRequestsAreDecidedInTheSameOrder(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("a", 2, h100, 81920)}, []Request{st.ClaimsRequest("ns/dra"), st.Request("ns/gpu", 1, Exclusive, 0)})
	d := PlaceEach(s, Tightest)
	// Candidate set 0 does not exist: the DRA pod can never be placed.
	if got := assigned(d); len(d) != 2 || !reflect.DeepEqual(got, []placed{{1, 0, []uint32{0}}}) {
		t.Fatalf("both are decided, the GPUResource pod placed: %+v", d)
	}
	if d[0].Tag() != Decision_Reject || d[0].Reject().Reason != `no eligible node has 1 device(s) for claim ns/dra-gpu request "gpu" (0 candidate(s) on eligible nodes), even when idle` {
		t.Fatalf("the DRA pod: %+v", d[0])
	}
	c := NewCluster(s)
	if !reflect.DeepEqual(c.PendingInOrder(), []uint32{1}) || !reflect.DeepEqual(c.DraPending(), []uint32{0}) || !reflect.DeepEqual(c.AllPendingInOrder(), []uint32{0, 1}) {
		t.Fatalf("in order: %v, DRA: %v, all: %v", c.PendingInOrder(), c.DraPending(), c.AllPendingInOrder())
	}
	w := c.Want(0)
	if claims, ok := w.Claims(); !w.IsDra() || !ok || len(claims) != 1 || len(Claims(&s.Pending[0])) != 1 || !reflect.DeepEqual(w.Shape, NoShape) {
		t.Fatal("a DRA request's Want has its claims and no shape")
	}
	if _, ok := c.Want(1).Claims(); ok || c.Want(1).IsDra() {
		t.Fatal("a GPUResource request has no claims")
	}
	if _, ok := c.Preempt(w, Tightest, NvlinkPrefer); ok {
		t.Fatal("a DRA request with no candidates preempts nobody")
	}
	if _, ok := c.ChooseNode(w, Tightest); ok || c.Fits(0, w) || len(c.FittingGpus(0, w)) != 0 {
		t.Fatal("the GPU fit helpers place no DRA request")
	}
	if _, ok := c.PlaceClaims(c.Want(1), Tightest); ok {
		t.Fatal("PlaceClaims places no GPUResource request")
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
	if DescribeRequest(&s.Pending[0]) != "1 device(s) for claim ns/dra-gpu" || w.Describe() != DescribeRequest(&s.Pending[0]) {
		t.Fatalf("DRA in words: %s", DescribeRequest(&s.Pending[0]))
	}
	if DevicesOf(&s.Pending[0]) != 1 || DevicesOf(&s.Pending[1]) != 1 || w.Devices() != 1 {
		t.Fatal("devices")
	}

	// A gang with a DRA member: it gets no decision, and counts as one
	// that may come later, so the others wait rather than being rejected.
	s = st.Snapshot([]Node{st.Node("b", 1, h100, 81920)}, []Request{st.Request("ml/w0", 1, Exclusive, 0), st.ClaimsRequest("ml/w1")})
	st.Gang(s, "ml/job", 2, 0, 1)
	d = PlaceEach(s, Tightest)
	if len(d) != 1 || PodOf(d[0]) != 0 || d[0].Tag() != Decision_Wait {
		t.Fatalf("mixed gang: %+v", d)
	}
}

func TestEligibleSetsAreBitSets(t *testing.T) {
	var nodes []Node
	for i := 0; i < 70; i++ {
		nodes = append(nodes, st.Node("n"+string(rune('A'+i%26)), 1, h100, 81920))
	}
	s := st.Snapshot(nodes, []Request{st.Request("ns/p", 1, Exclusive, 0)})
	s.EligibleSets = [][]uint64{st.Bits(70, 3, 66, 200)}
	c := NewCluster(s)
	w := c.Want(0)
	if got := c.Eligible(w); !reflect.DeepEqual(got, []uint32{3, 66}) || c.EligibleCount(w) != 2 {
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
	if c.NodeCount() != 70 || c.NodeName(66) != s.Nodes[66].Name {
		t.Fatal("NodeCount, NodeName")
	}
}

func TestTablesLabelsAndBuilders(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("a", 1, h100, 81920)}, []Request{st.Request("ml/p", 1, Exclusive, 0)})
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
	if v, ok := NewCluster(s).Label(0, "rack"); !ok || v != "r7" {
		t.Fatalf("Cluster.Label rack: %q", v)
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
	if Exclusive != Sharing_Exclusive || Shared != Sharing_Shared || PreemptNever != PreemptionPolicy_Never || PreemptLowerPriority != PreemptionPolicy_PreemptLowerPriority {
		t.Fatal("constants")
	}
	if got := NewCluster(s).GpuNames(0, []uint32{0}); !reflect.DeepEqual(got, []string{"a/gpu0"}) {
		t.Fatalf("names: %v", got)
	}
}

func TestModelGlobAndMemoryAreChecked(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("a", 2, "NVIDIA A100-SXM4-40GB", 40960)}, []Request{
		st.WithModel(st.Request("ns/h", 1, Exclusive, 0), "NVIDIA H100*"),
		st.Request("ns/big", 1, Exclusive, 81920),
		st.WithModel(st.Request("ns/a", 2, Exclusive, 40960), "*A100*"),
	})
	c := NewCluster(s)
	h, big, a := c.Want(0), c.Want(1), c.Want(2)
	if c.Fits(0, h) || !c.Shortfall(h).Permanent() || c.Shortfall(h).Reason() != `no eligible node has 1 GPU(s) matching "NVIDIA H100*", even when idle` {
		t.Fatalf("h: %v", c.Shortfall(h))
	}
	if c.Fits(0, big) || c.Shortfall(big).Reason() != "no eligible node has 1 GPU(s) with at least 81920 MiB each, even when idle" {
		t.Fatalf("big: %v", c.Shortfall(big))
	}
	if !c.Fits(0, a) {
		t.Fatal("a fits")
	}
	// No eligible node at all.
	st.Restrict(s, 0)
	c = NewCluster(s)
	if got := c.Unplaced(c.Want(0)); got.Tag() != Decision_Reject || got.Reject().Reason != "no eligible node: node selector, affinity or taints exclude every GPU node" {
		t.Fatalf("no node: %+v", got)
	}
}

func TestMigInstancesTakeTheirParentsHealthAndPacking(t *testing.T) {
	// GPU 0 whole; GPU 1 carved into three 1g.10gb (positions 2-4).
	n := st.WithMig(st.Node("m", 2, "NVIDIA A100 80GB PCIe", 81920), 1, st.Mig{Profile: "1g.10gb", MemoryMib: 9856}, st.Mig{Profile: "1g.10gb", MemoryMib: 9856}, st.Mig{Profile: "1g.10gb", MemoryMib: 9856})
	s := st.Snapshot([]Node{n}, []Request{
		st.MigRequest("ns/m1", 1, "1g.10gb"), st.MigRequest("ns/m2", 2, "1g.10gb"),
		st.Request("ns/whole", 2, Exclusive, 0), st.Request("ns/one", 1, Exclusive, 0), st.MigRequest("ns/m3", 1, "1g.10gb"),
	})
	d := PlaceEach(s, Tightest)
	// m1 takes instance 2, m2 instances 3 and 4, m3 finds none; one takes
	// GPU 0; whole waits: GPU 1 is not whole while its instances are held.
	if got := assigned(d); !reflect.DeepEqual(got, []placed{{0, 0, []uint32{2}}, {1, 0, []uint32{3, 4}}, {3, 0, []uint32{0}}}) {
		t.Fatalf("placed: %v", got)
	}
	d2, _ := st.DecisionOf(s, d, "ns/m3")
	if d2.Wait().Reason != `no eligible node has 1 MIG instance(s) of profile "1g.10gb" free right now` {
		t.Fatalf("m3: %+v", d2)
	}
	// An unhealthy parent makes its instances unhealthy.
	s.Nodes[0].Gpus[1].Healthy = false
	c := NewCluster(s)
	if c.GpuNow(0, 2).Healthy || c.Fits(0, c.Want(0)) || !c.Shortfall(c.Want(0)).Permanent() {
		t.Fatal("instances of an unhealthy GPU")
	}
}
