package sdk

import (
	"reflect"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

const zone = "topology.kubernetes.io/zone"

func TestQueriesFollowTheCommitsOfTheRound(t *testing.T) {
	s := st.Snapshot(
		[]Node{
			st.WithLabels(st.Node("a", 4, "NVIDIA H100", 81920), zone, "z1"),
			st.WithLabels(st.Node("b", 4, "NVIDIA A100", 40960), zone, "z2"),
			st.Node("c", 4, "NVIDIA H100", 81920),
		},
		[]Request{
			st.Request("ns/x", 3, Exclusive, 0),
			st.Request("ns/s", 1, Shared, 10000),
			st.WithModel(st.Request("ns/h", 1, Exclusive, 0), "NVIDIA H100*"),
		},
	)
	c := NewCluster(s)
	x, sh, h := c.Want(0), c.Want(1), c.Want(2)
	if got := c.FreeByLabel(zone, h); !reflect.DeepEqual(got, []LabelFree{{"z1", 4}, {"z2", 0}}) {
		t.Fatalf("h per zone: %v", got)
	}
	if got := c.FreeByLabel(zone, x); !reflect.DeepEqual(got, []LabelFree{{"z1", 4}, {"z2", 4}}) {
		t.Fatalf("x per zone: %v", got)
	}

	if _, ok := c.Place(0, x, Tightest, true); !ok {
		t.Fatal("x fits node a")
	}
	if got := c.FreeGpus(0, ""); !reflect.DeepEqual(got, []uint32{3}) {
		t.Fatalf("free on a: %v", got)
	}
	if got := c.FreeGpus(0, "*A100*"); len(got) != 0 {
		t.Fatalf("no A100 on a: %v", got)
	}
	if got := c.FreeGpus(1, "*A100*"); !reflect.DeepEqual(got, []uint32{0, 1, 2, 3}) {
		t.Fatalf("A100 on b: %v", got)
	}
	if g := c.GpuNow(0, 0); !g.Held || g.WholeFree || g.FreeMib != 0 {
		t.Fatalf("GPU 0 of a: %+v", g)
	}
	// FreeByLabel after a commit: z1 has one H100 left.
	if got := c.FreeByLabel(zone, h); !reflect.DeepEqual(got, []LabelFree{{"z1", 1}, {"z2", 0}}) {
		t.Fatalf("h per zone after x: %v", got)
	}
	if got := c.FreeByLabelMap(zone, h); !reflect.DeepEqual(got, map[string]uint32{"z1": 1, "z2": 0}) {
		t.Fatalf("as a map: %v", got)
	}

	// GpuNow after a shared placement.
	if _, ok := c.Place(0, sh, Tightest, true); !ok {
		t.Fatal("s fits node a")
	}
	shared := c.GpuNow(0, 3)
	want := GpuNow{Healthy: true, Shares: 1, FreeMib: 81920 - 10000, MemoryMib: 81920, MigParent: witTypes.None[uint32]()}
	if shared != want {
		t.Fatalf("shared GPU: %+v, want %+v", shared, want)
	}
	if _, ok := shared.Parent(); ok {
		t.Fatal("a whole GPU has no parent")
	}
	if got := c.FittingGpus(0, sh); !reflect.DeepEqual(got, []uint32{3}) {
		t.Fatalf("room to share left: %v", got)
	}
	if got := c.FittingGpus(0, h); len(got) != 0 {
		t.Fatalf("nothing whole left on a: %v", got)
	}
	if got := c.FreeByLabel(zone, h); !reflect.DeepEqual(got, []LabelFree{{"z1", 0}, {"z2", 0}}) {
		t.Fatalf("h per zone after s: %v", got)
	}
	if _, ok := c.Label(2, zone); ok {
		t.Fatal("c has no zone")
	}
	if v, ok := c.Label(1, zone); !ok || v != "z2" {
		t.Fatalf("b's zone: %q", v)
	}
	if c.GpuCount(0) != 4 || c.FreeWhole(0) != 0 || c.Healthy(0) != 4 {
		t.Fatalf("counts: %d %d %d", c.GpuCount(0), c.FreeWhole(0), c.Healthy(0))
	}

	// Only eligible nodes count.
	st.Restrict(s, 2, 1, 2)
	c = NewCluster(s)
	if got := c.FreeByLabel(zone, c.Want(2)); !reflect.DeepEqual(got, []LabelFree{{"z2", 0}}) {
		t.Fatalf("restricted: %v", got)
	}
}

func TestGroupsCliquesAndMigInstances(t *testing.T) {
	n := st.WithMig(st.WithNvlink(st.Node("a", 4, "NVIDIA A100", 81920), [2]uint32{0, 1}, [2]uint32{1, 2}, [2]uint32{0, 2}),
		3, st.Mig{Profile: "1g.10gb", MemoryMib: 9856})
	s := st.Snapshot([]Node{n}, nil)
	c := NewCluster(s)
	if c.GpuCount(0) != 5 {
		t.Fatalf("count: %d", c.GpuCount(0))
	}
	if got := c.NvlinkGroups(0); !reflect.DeepEqual(got, [][]uint32{{0, 1, 2}, {3}}) {
		t.Fatalf("groups: %v", got)
	}
	if !c.IsNvlinkClique(0, []uint32{0, 1, 2}) || c.IsNvlinkClique(0, []uint32{0, 1, 3}) || !c.IsNvlinkClique(0, []uint32{3}) || !c.IsNvlinkClique(0, nil) {
		t.Fatal("IsNvlinkClique")
	}
	if got, ok := c.NvlinkClique(0, []uint32{3, 2, 1, 0}, 3); !ok || !reflect.DeepEqual(got, []uint32{2, 1, 0}) {
		t.Fatalf("clique: %v", got)
	}
	if p, ok := c.GpuNow(0, 4).Parent(); !ok || p != 3 || c.GpuNow(0, 4).MigParent != witTypes.Some(uint32(3)) {
		t.Fatalf("parent: %d %v", p, ok)
	}
	if got := c.FreeGpus(0, ""); !reflect.DeepEqual(got, []uint32{0, 1, 2, 3}) {
		t.Fatalf("free: %v", got)
	}
}

func TestGroupsAreConnectedAndCliquesMutual(t *testing.T) {
	n := st.WithNvlink(st.Node("a", 5, "NVIDIA A100", 40960), [2]uint32{0, 1}, [2]uint32{1, 2}, [2]uint32{3, 4})
	c := NewCluster(st.Snapshot([]Node{n}, nil))
	if got := c.NvlinkGroups(0); !reflect.DeepEqual(got, [][]uint32{{0, 1, 2}, {3, 4}}) {
		t.Fatalf("groups: %v", got)
	}
	// 0 and 2 share a group but are not peers.
	if c.AreNvlinkPeers(0, 0, 2) {
		t.Fatal("0 and 2 are not peers")
	}
	if _, ok := c.NvlinkClique(0, []uint32{0, 1, 2}, 3); ok {
		t.Fatal("no three mutual peers")
	}
	if got, ok := c.NvlinkClique(0, []uint32{0, 1, 2}, 2); !ok || !reflect.DeepEqual(got, []uint32{0, 1}) {
		t.Fatalf("pair: %v", got)
	}
}
