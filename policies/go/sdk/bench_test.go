package sdk

import (
	"testing"

	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

// A round at 1,000 nodes × 8 GPUs × 1,000 pending pods (sdktest.Large, the
// Rust SDK's testing::large): `go test -bench PlaceEach -run '^$' ./sdk/`.
func benchmarkPlaceEach(b *testing.B, fit Fit, config string) {
	s := st.Large(1000, 1000)
	s.Config = config
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		PlaceEach(s, fit)
	}
}

func BenchmarkPlaceEach1000Tightest(b *testing.B) { benchmarkPlaceEach(b, Tightest, "") }
func BenchmarkPlaceEach1000Loosest(b *testing.B)  { benchmarkPlaceEach(b, Loosest, "") }
func BenchmarkPlaceEach1000Require(b *testing.B) {
	benchmarkPlaceEach(b, Tightest, `{"nvlink": "require"}`)
}

func TestALargeRoundPlacesMostAndDecidesEveryPod(t *testing.T) {
	s := st.Large(1000, 1000)
	st.Gang(s, "team-1/train", 3, 1, 8, 15)
	for _, config := range []string{"", `{"nvlink": "require"}`, `{"nvlink": "ignore"}`} {
		s.Config = config
		d := PlaceEach(s, Tightest)
		if len(d) != len(s.Pending) {
			t.Fatalf("%s: %d decisions", config, len(d))
		}
		seen := map[uint32]bool{}
		taken := map[[2]uint32]bool{}
		placed := 0
		for _, dec := range d {
			if seen[PodOf(dec)] {
				t.Fatalf("%s: pod %d decided twice", config, PodOf(dec))
			}
			seen[PodOf(dec)] = true
			if dec.Tag() != Decision_Assign {
				continue
			}
			placed++
			a := dec.Assign()
			shape, _ := Shape(&s.Pending[a.Pod])
			if shape.Sharing == Shared {
				continue
			}
			for _, g := range a.Gpus {
				if taken[[2]uint32{a.Node, g}] || s.Nodes[a.Node].Gpus[g].Held {
					t.Fatalf("%s: GPU %d of node %d given twice", config, g, a.Node)
				}
				taken[[2]uint32{a.Node, g}] = true
			}
		}
		if placed < 500 {
			t.Fatalf("%s: %d placed", config, placed)
		}
	}
}
