package sdk

import (
	"encoding/json"
	"reflect"
	"testing"

	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

func TestCliquesNeedEveryPairLinked(t *testing.T) {
	// A ring 0-1-2-3-0 plus the chord 0-2: {0, 1, 2} and {0, 2, 3} are
	// triangles, no four are all peers.
	ring := st.WithNvlink(st.Node("r", 4, "NVIDIA A100", 40960),
		[2]uint32{0, 1}, [2]uint32{1, 2}, [2]uint32{2, 3}, [2]uint32{3, 0}, [2]uint32{0, 2})
	all := []int{0, 1, 2, 3}
	for _, c := range []struct {
		among []int
		size  int
		want  []int
		ok    bool
	}{
		{all, 2, []int{0, 1}, true}, {all, 3, []int{0, 1, 2}, true}, {[]int{1, 2, 3}, 3, nil, false},
		{[]int{3, 2, 0}, 3, []int{3, 2, 0}, true}, {all, 4, nil, false}, {all, 1, []int{0}, true},
		{all, 0, []int{}, true}, {nil, 1, nil, false},
	} {
		got, ok := clique(&ring, c.among, c.size)
		if ok != c.ok || (ok && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("clique(%v, %d) = %v %v, want %v %v", c.among, c.size, got, ok, c.want, c.ok)
		}
	}
	// A link listed on one end only still joins both.
	one := st.Node("o", 2, "NVIDIA A100", 40960)
	one.Gpus[1].Nvlink |= 1
	if !linked(&one, 0, 1) || !linked(&one, 1, 0) || linked(&one, 0, 0) {
		t.Fatal("one-sided link")
	}
}

func TestABoolIsPreferOrIgnoreAndConfigSpellsLowerCase(t *testing.T) {
	if NvlinkFromBool(true) != NvlinkPrefer || NvlinkFromBool(false) != NvlinkIgnore {
		t.Fatal("from bool")
	}
	var n Nvlink
	if err := json.Unmarshal([]byte(`"require"`), &n); err != nil || n != NvlinkRequire {
		t.Fatalf("require: %v %v", n, err)
	}
	for _, bad := range []string{`"Required"`, `"Require"`, `true`, `1`} {
		if err := json.Unmarshal([]byte(bad), &n); err == nil {
			t.Fatalf("%s is refused", bad)
		}
	}
	if b, _ := json.Marshal(NvlinkIgnore); string(b) != `"ignore"` || NvlinkPrefer.String() != "prefer" {
		t.Fatalf("marshal: %s", b)
	}
}

// ring: 4 GPUs linked 0-1-2-3-0 (one group, no three mutual peers); pairs:
// 4 GPUs in two NVLink pairs (0-1, 2-3); hgx: 8 GPUs all linked.
func nvlinkNodes() []Node {
	return []Node{
		st.WithNvlink(st.Node("ring", 4, "NVIDIA A100", 40960), [2]uint32{0, 1}, [2]uint32{1, 2}, [2]uint32{2, 3}, [2]uint32{3, 0}),
		st.WithNvlink(st.Node("pairs", 4, "NVIDIA A100", 40960), [2]uint32{0, 1}, [2]uint32{2, 3}),
		st.WithFullNvlink(st.Node("hgx", 8, "NVIDIA A100", 40960)),
	}
}

func TestPreferTakesAGroupAndFallsBack(t *testing.T) {
	// GPUs 0-1 and 2-3 are NVLink pairs; 0 is taken, so a pair must be 2-3.
	n := st.WithNvlink(st.Node("a", 4, h100, 81920), [2]uint32{0, 1}, [2]uint32{2, 3})
	n.Gpus[0].Held = true
	c := NewCluster(st.Snapshot([]Node{n}, []Request{st.Request("ns/p", 2, Exclusive, 0), st.Request("ns/q", 3, Exclusive, 0)}))
	w, three := c.Want(0), c.Want(1)
	if got := c.PickGpus(0, w, Tightest, true); !reflect.DeepEqual(got, []uint32{2, 3}) {
		t.Fatalf("prefer: %v", got)
	}
	if got := c.PickGpus(0, w, Tightest, false); !reflect.DeepEqual(got, []uint32{1, 2}) {
		t.Fatalf("ignore: %v", got)
	}
	// No group holds three: Prefer falls back, Require has none.
	if got := c.PickGpusWith(0, three, Tightest, NvlinkPrefer); !reflect.DeepEqual(got, []uint32{1, 2, 3}) {
		t.Fatalf("fall back: %v", got)
	}
	if got := c.PickGpusWith(0, three, Tightest, NvlinkRequire); got != nil {
		t.Fatalf("require: %v", got)
	}
	// Loosest prefers the largest group: HGX over a pair.
	c = NewCluster(st.Snapshot(nvlinkNodes()[1:], []Request{st.Request("ns/p", 2, Exclusive, 0)}))
	if got := c.PickGpusWith(0, c.Want(0), Loosest, NvlinkPrefer); !reflect.DeepEqual(got, []uint32{0, 1}) {
		t.Fatalf("pairs, loosest: %v", got)
	}
	if node, ok := c.ChooseNode(c.Want(0), Loosest); !ok || node != 1 {
		t.Fatalf("loosest node: %d", node)
	}
}

func TestRequireTakesMutualPeersOrNothing(t *testing.T) {
	s := st.Snapshot(nvlinkNodes(), []Request{st.Request("ns/p", 3, Exclusive, 0)})
	c := NewCluster(s)
	w := c.Want(0)
	// The ring is the tightest node with 3 free GPUs, and Prefer takes it
	// (one group), though GPUs 0 and 2 are not peers.
	if node, ok := c.ChooseNode(w, Tightest); !ok || node != 0 {
		t.Fatalf("choose: %d", node)
	}
	if got := c.PickGpusWith(0, w, Tightest, NvlinkPrefer); !reflect.DeepEqual(got, []uint32{0, 1, 2}) {
		t.Fatalf("prefer on the ring: %v", got)
	}
	if c.IsNvlinkClique(0, []uint32{0, 1, 2}) {
		t.Fatal("{0, 1, 2} of the ring is no clique")
	}
	// Require refuses {0, 1, 2} of the ring, and the pairs: only the HGX
	// node has three mutual peers.
	if got := c.PickGpusWith(0, w, Tightest, NvlinkRequire); got != nil {
		t.Fatalf("require on the ring: %v", got)
	}
	if got := c.PickGpusWith(1, w, Tightest, NvlinkRequire); got != nil {
		t.Fatalf("require on the pairs: %v", got)
	}
	if node, ok := c.ChooseNodeWith(w, Tightest, NvlinkRequire); !ok || node != 2 {
		t.Fatalf("require chooses hgx: %d %v", node, ok)
	}
	picked := c.PickGpusWith(2, w, Tightest, NvlinkRequire)
	if !reflect.DeepEqual(picked, []uint32{0, 1, 2}) || !c.IsNvlinkClique(2, picked) {
		t.Fatalf("hgx: %v", picked)
	}
	// Prefer and Ignore leave the choice of node alone.
	for _, mode := range []Nvlink{NvlinkPrefer, NvlinkIgnore} {
		if node, ok := c.ChooseNodeWith(w, Tightest, mode); !ok || node != 0 {
			t.Fatalf("%v: %d", mode, node)
		}
	}
	if !w.UsesNvlink(NvlinkRequire) || w.UsesNvlink(NvlinkIgnore) || !w.IsExclusiveWhole() || w.IsMig() {
		t.Fatal("Want predicates")
	}
}

func TestRequireWaitsOrRejectsSayingNvlinkIsRequired(t *testing.T) {
	// The HGX node busy: three mutual peers exist only once it is idle.
	nodes := nvlinkNodes()
	for i := range nodes[2].Gpus[:6] {
		nodes[2].Gpus[i].Held = true
	}
	s := st.Snapshot(nodes, []Request{
		st.Request("ns/three", 3, Exclusive, 0),
		st.Request("ns/two", 2, Exclusive, 0),
		st.Request("ns/nine", 9, Exclusive, 0),
		st.Request("ns/ring", 3, Exclusive, 0),
	})
	// No node but the ring and the pairs is eligible for the last one.
	st.Restrict(s, 3, 0, 1)
	s.Config = `{"nvlink": "require"}`
	d := PlaceEach(s, Tightest)
	of := func(pod string) Decision {
		dec, ok := st.DecisionOf(s, d, pod)
		if !ok {
			t.Fatalf("no decision for %s", pod)
		}
		return dec
	}
	if got := of("ns/three"); got.Tag() != Decision_Wait || got.Wait().Reason != "no eligible node has 3 GPU(s) that are all NVLink peers of one another free right now" {
		t.Fatalf("three: %s", st.Describe(s, got))
	}
	// two takes a pair, not two ring GPUs picked for a group.
	if got := st.Assigned(s, d); len(got) != 1 || got[0].Pod != "ns/two" {
		t.Fatalf("two: %+v", got)
	}
	if got := of("ns/nine"); got.Tag() != Decision_Reject || got.Reject().Reason != "no eligible node has 9 GPU(s), even when idle" {
		t.Fatalf("nine: %s", st.Describe(s, got))
	}
	if got := of("ns/ring"); got.Tag() != Decision_Reject || got.Reject().Reason != "no eligible node has 3 GPU(s) that are all NVLink peers of one another, even when idle" {
		t.Fatalf("ring: %s", st.Describe(s, got))
	}
	c := NewCluster(s)
	if got := c.UnplacedWith(c.Want(3), NvlinkRequire); got.Tag() != Decision_Reject {
		t.Fatalf("UnplacedWith: %+v", got)
	}
	if got := c.ShortfallWith(c.Want(0), NvlinkRequire); got.Kind != NotNow || got.What != "3 GPU(s) that are all NVLink peers of one another" {
		t.Fatalf("ShortfallWith: %+v", got)
	}
	if got := c.ShortfallWith(c.Want(0), NvlinkPrefer); got.What != "3 GPU(s)" {
		t.Fatalf("ShortfallWith prefer: %+v", got)
	}

	// With Prefer, ring takes three GPUs of the ring (one group).
	s.Config = `{"preferNvlink": true}`
	d = PlaceEach(s, Tightest)
	if got, _ := st.DecisionOf(s, d, "ns/ring"); got.Tag() != Decision_Assign || got.Assign().Node != 0 || !reflect.DeepEqual(got.Assign().Gpus, []uint32{0, 1, 2}) {
		t.Fatalf("ring with prefer: %s", st.Describe(s, got))
	}
}

func TestRequireHoldsForEveryAssignmentOfALargeRound(t *testing.T) {
	for _, fit := range []Fit{Tightest, Loosest} {
		s := st.Large(60, 200)
		// Break the full NVLink of some H100 nodes into rings.
		for n := range s.Nodes {
			if n%4 == 0 {
				for i := range s.Nodes[n].Gpus {
					s.Nodes[n].Gpus[i].Nvlink = st.NvlinkOf(uint32((i+7)%8), uint32((i+1)%8))
				}
			}
		}
		st.Gang(s, "team-0/gang", 2, 3, 4)
		s.Config = `{"nvlink": "require"}`
		d := PlaceEach(s, fit)
		c := NewCluster(s)
		multi := 0
		for _, dec := range d {
			if dec.Tag() != Decision_Assign {
				continue
			}
			a := dec.Assign()
			if shape, _ := Shape(&s.Pending[a.Pod]); len(a.Gpus) > 1 && shape.Sharing == Exclusive {
				if !c.IsNvlinkClique(a.Node, a.Gpus) {
					t.Fatalf("%v: %+v is no clique", fit, a)
				}
				multi++
			}
		}
		if multi <= 10 {
			t.Fatalf("%d multi-GPU assignments", multi)
		}
		if len(d) != len(s.Pending) {
			t.Fatalf("%d decisions for %d pods", len(d), len(s.Pending))
		}
	}
}
