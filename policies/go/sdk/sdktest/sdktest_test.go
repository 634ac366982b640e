package sdktest_test

import (
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/sdk"
	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

func TestNodesGpusAndMigInstances(t *testing.T) {
	n := st.Node("a", 2, "NVIDIA L4", 23034)
	g := n.Gpus[1]
	if n.Name != "a" || len(n.Gpus) != 2 || g.Index != 1 || !g.Healthy || g.Held || g.PublishedBy != Publisher_Agent || g.Mig.IsSome() || g.Nvlink != 0 || g.MemoryMib != 23034 {
		t.Fatalf("node: %+v", n)
	}
	if g.Model != st.Model("NVIDIA L4") {
		t.Fatal("model index")
	}
	m := st.WithMig(st.WithMig(n, 0, st.Mig{Profile: "1g.5gb", MemoryMib: 5000}), 0, st.Mig{Profile: "2g.10gb", MemoryMib: 10000})
	// GPU 0, its two instances (the later one after the first), GPU 1.
	if len(m.Gpus) != 4 || m.Gpus[1].Mig.Some().Profile != st.MigProfile("1g.5gb") || m.Gpus[2].MemoryMib != 10000 || m.Gpus[3].Index != 1 || m.Gpus[2].Mig.Some().Parent != 0 {
		t.Fatalf("MIG: %+v", m.Gpus)
	}
	names := []string{}
	for i := range m.Gpus {
		names = append(names, st.GpuName(&m, uint32(i)))
	}
	if !reflect.DeepEqual(names, []string{"GPU-a-0", "MIG-GPU-a-0-0", "MIG-GPU-a-0-1", "GPU-a-1"}) || st.GpuName(&m, 9) != "?" {
		t.Fatalf("names: %v", names)
	}
	if len(n.Gpus) != 2 {
		t.Fatal("WithMig leaves its argument alone")
	}
}

func TestNvlinkAndLabels(t *testing.T) {
	n := st.WithNvlink(st.Node("a", 4, "NVIDIA A100", 40960), [2]uint32{0, 1}, [2]uint32{1, 0}, [2]uint32{2, 3})
	if n.Gpus[0].Nvlink != 1<<1 || n.Gpus[1].Nvlink != 1<<0 || n.Gpus[3].Nvlink != 1<<2 {
		t.Fatalf("pairs: %+v", n.Gpus)
	}
	f := st.WithFullNvlink(st.Node("h", 3, "NVIDIA A100", 40960))
	if f.Gpus[0].Nvlink != 0b110 || f.Gpus[2].Nvlink != 0b011 {
		t.Fatalf("full: %+v", f.Gpus)
	}
	if st.NvlinkOf(0, 63, 64) != 1|1<<63 {
		t.Fatal("NvlinkOf")
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "not a pair of distinct GPUs of node a") {
				t.Fatalf("panic: %v", r)
			}
		}()
		st.WithNvlink(n, [2]uint32{1, 1})
	}()
	l := st.WithLabels(st.Node("z", 1, "NVIDIA L4", 23034), "test/zone", "z1", "test/rack", "r1", "test/zone", "z2")
	s := st.Snapshot([]Node{l, st.Node("y", 1, "NVIDIA L4", 23034)}, nil)
	if v, ok := sdk.Label(s, &s.Nodes[0], "test/zone"); !ok || v != "z2" {
		t.Fatalf("zone: %q", v)
	}
	if len(s.Nodes[1].Labels) != len(s.LabelKeys) {
		t.Fatal("every node has a value or none for each key")
	}
	if _, ok := sdk.Label(s, &s.Nodes[1], "test/rack"); ok {
		t.Fatal("y has no rack")
	}
}

func TestRequestsSnapshotsAndDecisions(t *testing.T) {
	r := st.Request("team/p", 2, Sharing_Shared, 4096)
	shape := st.Shape(&r)
	if r.Pod != "team/p" || st.Namespace("team") != r.Namespace || r.Priority != 0 || r.Preemption != PreemptionPolicy_PreemptLowerPriority || r.Gang.IsSome() || shape.Count != 2 || shape.MemoryMib != 4096 || shape.Sharing != Sharing_Shared {
		t.Fatalf("request: %+v", r)
	}
	if st.Request("p", 1, Sharing_Exclusive, 0).Namespace != st.Namespace("default") {
		t.Fatal("no namespace: default")
	}
	if m := st.Shape(ptr(st.WithModel(st.MigRequest("ns/m", 1, "1g.10gb"), "*A100*"))); m.MigProfile != witTypes.Some("1g.10gb") || m.Model != witTypes.Some("*A100*") {
		t.Fatalf("MIG request: %+v", m)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a DRA request has no shape")
			}
		}()
		st.EditShape(ptr(st.ClaimsRequest("ns/d")), func(*GpuShape) {})
	}()

	s := st.Snapshot([]Node{st.Node("a", 2, "NVIDIA L4", 23034), st.Node("b", 4, "NVIDIA L4", 23034)},
		[]Request{st.Request("ns/p", 2, Sharing_Exclusive, 0), st.Request("ns/q", 2, Sharing_Exclusive, 0), st.Request("ns/r", 9, Sharing_Exclusive, 0)})
	if s.Round != 1 || !reflect.DeepEqual(s.EligibleSets, [][]uint64{{0b11}}) || sdk.NamespaceName(s, st.Namespace("ns")) != "ns" {
		t.Fatalf("snapshot: %+v", s)
	}
	st.Restrict(s, 1, 1)
	if s.Pending[1].EligibleSet != 1 || !reflect.DeepEqual(s.EligibleSets[1], []uint64{0b10}) {
		t.Fatalf("restrict: %v", s.EligibleSets)
	}
	if st.Gang(s, "ns/g", 2, 0) != 0 || s.Pending[0].Gang != witTypes.Some(uint32(0)) || s.Gangs[0].MinMember != 2 {
		t.Fatalf("gang: %+v", s.Gangs)
	}
	s.Gangs[0].MinMember = 1
	d := sdk.PlaceEach(s, sdk.Tightest)
	got := st.Assigned(s, d)
	want := []st.Placement{{Pod: "ns/p", Node: "a", Gpus: []string{"GPU-a-0", "GPU-a-1"}}, {Pod: "ns/q", Node: "b", Gpus: []string{"GPU-b-0", "GPU-b-1"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("assigned: %+v", got)
	}
	if dec, ok := st.DecisionOf(s, d, "ns/r"); !ok || dec.Tag() != Decision_Reject || st.Describe(s, dec) != "reject ns/r: no eligible node has 9 GPU(s), even when idle" {
		t.Fatalf("r: %+v", dec)
	}
	if _, ok := st.DecisionOf(s, d, "ns/nobody"); ok {
		t.Fatal("nobody")
	}
	if st.NamespaceOf(s, &s.Pending[0]) != "ns" || st.PodOf(d[0]) != 0 {
		t.Fatal("NamespaceOf, PodOf")
	}
	if !reflect.DeepEqual(st.Bits(70, 0, 69), []uint64{1, 1 << 5}) || !reflect.DeepEqual(st.Bits(1, 64), []uint64{0, 1}) {
		t.Fatal("Bits")
	}
}

func TestRunningPods(t *testing.T) {
	s := st.Snapshot([]Node{st.Node("n", 3, "NVIDIA L4", 23034)}, nil)
	st.RunningOnEachGpu(s, 0, "batch/p", 7)
	if len(s.Running) != 3 || s.Running[2].Pod != "batch/p2" || s.Running[2].StartedMs != 2 || s.Running[2].Priority != 7 || !s.Running[2].Evictable || s.Running[2].ProtectedMs != 0 {
		t.Fatalf("running: %+v", s.Running)
	}
	if g := s.Nodes[0].Gpus[1]; !g.Held || g.AllocatedMib != g.MemoryMib || st.NamespaceOf(s, &Request{Namespace: s.Running[0].Namespace}) != "batch" {
		t.Fatalf("held: %+v", g)
	}
	s = st.Snapshot([]Node{st.Node("n", 1, "NVIDIA L4", 23034)}, nil)
	if st.RunningShared(s, "web/a", 0, 0, []uint32{0}, 4000, 0) != 0 || s.Nodes[0].Gpus[0].SharedOwners != 1 || s.Nodes[0].Gpus[0].AllocatedMib != 4000 || s.Running[0].SharedMib != 4000 {
		t.Fatalf("shared: %+v", s.Running)
	}
}

func TestLargeIsDeterministic(t *testing.T) {
	a, b := st.Large(30, 50), st.Large(30, 50)
	if !reflect.DeepEqual(a, b) || len(a.Nodes) != 30 || len(a.Pending) != 50 || len(a.EligibleSets) != 4 {
		t.Fatal("Large")
	}
	held, shared := 0, 0
	for _, n := range a.Nodes {
		for _, g := range n.Gpus {
			if g.Held {
				held++
			}
			if g.SharedOwners > 0 {
				shared++
			}
		}
	}
	if held == 0 || shared == 0 || held+shared > 120 {
		t.Fatalf("in use: %d held, %d shared of 240", held, shared)
	}
	if a.Pending[10].EligibleSet != 2 || a.Pending[1].EligibleSet != 0 || a.Nodes[1].Gpus[0].Nvlink != 1<<1 || a.Nodes[0].Gpus[0].Nvlink != 0xfe {
		t.Fatal("sets and links")
	}
}

func ptr[T any](v T) *T { return &v }
