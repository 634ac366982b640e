package zonespread

import (
	"reflect"
	"strings"
	"testing"

	"wit_component/sdk"
	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

func nodesOf(s *Snapshot, d []Decision) []string {
	var out []string
	for _, p := range st.Assigned(s, d) {
		out = append(out, p.Node)
	}
	return out
}

func TestSpreadsAcrossZones(t *testing.T) {
	s := st.Snapshot([]Node{
		st.WithLabels(st.Node("a", 4, "NVIDIA L4", 23034), ZoneKey, "z1"),
		st.WithLabels(st.Node("b", 4, "NVIDIA L4", 23034), ZoneKey, "z2"),
		st.Node("unlabelled", 8, "NVIDIA L4", 23034),
	}, []Request{
		st.Request("ns/p0", 1, sdk.Exclusive, 0), st.Request("ns/p1", 1, sdk.Exclusive, 0),
		st.Request("ns/p2", 1, sdk.Exclusive, 0), st.Request("ns/p3", 1, sdk.Exclusive, 0),
	})
	if got := nodesOf(s, Allocate(*s)); !reflect.DeepEqual(got, []string{"a", "b", "a", "b"}) {
		t.Fatalf("nodes: %v", got)
	}
}

func TestSeveralGpusOnlyOnNvlinkPeers(t *testing.T) {
	// z1: a ring of 8 (no three mutual peers), roomier than z2: 4 GPUs
	// all linked.
	var ring [][2]uint32
	for i := uint32(0); i < 8; i++ {
		ring = append(ring, [2]uint32{i, (i + 1) % 8})
	}
	s := st.Snapshot([]Node{
		st.WithLabels(st.WithNvlink(st.Node("ring", 8, "NVIDIA A100", 40960), ring...), ZoneKey, "z1"),
		st.WithLabels(st.WithFullNvlink(st.Node("hgx", 4, "NVIDIA A100", 40960)), ZoneKey, "z2"),
	}, []Request{st.Request("ns/a-three", 3, sdk.Exclusive, 0), st.Request("ns/b-two", 2, sdk.Exclusive, 0), st.Request("ns/c-more", 3, sdk.Exclusive, 0)})
	d := Allocate(*s)
	got := st.Assigned(s, d)
	want := []st.Placement{
		{Pod: "ns/a-three", Node: "hgx", Gpus: []string{"GPU-hgx-0", "GPU-hgx-1", "GPU-hgx-2"}},
		{Pod: "ns/b-two", Node: "ring", Gpus: []string{"GPU-ring-0", "GPU-ring-1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("assigned: %+v", got)
	}
	more, _ := st.DecisionOf(s, d, "ns/c-more")
	if more.Tag() != Decision_Wait || more.Wait().Reason != "no eligible node has 3 GPU(s) that are all NVLink peers of one another free right now" {
		t.Fatalf("more: %s", st.Describe(s, more))
	}
}

func TestAFreeMemoryFloorFromConfig(t *testing.T) {
	s := st.Snapshot([]Node{
		st.WithLabels(st.Node("small", 4, "NVIDIA L4", 23034), ZoneKey, "z1"),
		st.WithLabels(st.Node("big", 1, "NVIDIA H100", 81920), ZoneKey, "z2"),
	}, []Request{st.Request("ns/p", 1, sdk.Exclusive, 0)})
	if got := nodesOf(s, Allocate(*s)); !reflect.DeepEqual(got, []string{"small"}) {
		t.Fatalf("no floor: %v", got)
	}
	s.Config = `{"minFreeMib": 30000}`
	if got := nodesOf(s, Allocate(*s)); !reflect.DeepEqual(got, []string{"big"}) {
		t.Fatalf("floor: %v", got)
	}
	// Shared pods: a GPU below the floor after the first share is skipped.
	s = st.Snapshot([]Node{st.WithLabels(st.Node("a", 2, "NVIDIA L4", 24000), ZoneKey, "z1")},
		[]Request{st.Request("ns/s0", 1, sdk.Shared, 10000), st.Request("ns/s1", 1, sdk.Shared, 10000)})
	s.Config = `{"minFreeMib": 20000}`
	got := st.Assigned(s, Allocate(*s))
	if len(got) != 2 || got[0].Gpus[0] != "GPU-a-0" || got[1].Gpus[0] != "GPU-a-1" {
		t.Fatalf("shared: %+v", got)
	}
}

func TestABadConfigFailsTheRound(t *testing.T) {
	for config, want := range map[string]string{
		`{"minFreeMiB": 1}`:       "invalid policy config.json: unknown field `minFreeMiB`, expected one of `minFreeMib`",
		`{"minFreeMib": 2000000}`: "invalid policy config.json: `minFreeMib` is 2000000, out of range: set it to a whole number from 0 to 1048576",
		`{"minFreeMib": "big"}`:   "invalid policy config.json: `minFreeMib` is \"big\", expected a whole number from 0 to 1048576",
	} {
		func() {
			defer func() {
				e, ok := recover().(sdk.PolicyError)
				if !ok || !strings.HasPrefix(e.Message, want) {
					t.Errorf("%s: %v, want %q", config, e, want)
				}
			}()
			s := st.Snapshot(nil, nil)
			s.Config = config
			Allocate(*s)
		}()
	}
	if info := Describe(); !reflect.DeepEqual(info.LabelKeys, []string{ZoneKey}) {
		t.Fatalf("info: %+v", info)
	}
}
