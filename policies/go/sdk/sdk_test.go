package sdk

import (
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/wasmgpu_policy_types"
)

func gpu(uuid string, index uint32, memory uint64) Gpu {
	return Gpu{Uuid: uuid, Index: index, MemoryMib: memory, Healthy: true}
}

func node(name string, count int, memory uint64) Node {
	n := Node{Name: name}
	for i := 0; i < count; i++ {
		n.Gpus = append(n.Gpus, gpu(name, uint32(i), memory))
	}
	return n
}

func request(pod string, count uint32, sharing Sharing, memory uint64) Request {
	return Request{Pod: pod, Count: count, Sharing: sharing, MemoryMib: memory}
}

func snapshot(nodes []Node, pending []Request) *Snapshot {
	all := []uint32{}
	for i := range nodes {
		all = append(all, uint32(i))
	}
	return &Snapshot{Models: []string{"NVIDIA H100"}, Nodes: nodes, Pending: pending, EligibleSets: [][]uint32{all}}
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
	n := node("n", 4, 81920)
	n.Gpus[2].NvlinkPeers = []uint32{3}
	n.Gpus[3].NvlinkPeers = []uint32{2}
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
	m.MigProfile = witTypes.Some("3g.40gb")
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
	s.Pending[2].Count = 8
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
