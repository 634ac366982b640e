package sdk

import (
	"encoding/json"
	"fmt"
	"math/bits"

	. "wit_component/wasmgpu_policy_types"
)

// Nvlink is how PickGpusWith (and everything that places through it) uses
// NVLink for an exclusive request of more than one whole GPU. Shared
// requests, MIG requests and requests of one GPU are not affected by it.
//
// Two sets of GPUs on a node matter, and they differ:
//
//   - an NVLink group (Cluster.NvlinkGroups) is a connected component of
//     the node's link graph: GPUs joined directly or through other GPUs. On
//     an HGX board the whole node is one group; on a ring 0-1-2-3 the four
//     GPUs are one group although 0 and 2 are not linked to each other.
//   - an NVLink clique (Cluster.NvlinkClique) is a set of GPUs that are all
//     NVLink peers of one another: every pair is linked directly. On the
//     ring above, {0, 1} is a clique and {0, 1, 2} is not.
//
// In config.json (see PlacementParams): "nvlink": "prefer" | "require" |
// "ignore". A bool converts (NvlinkFromBool): true is NvlinkPrefer, false
// NvlinkIgnore (the older preferNvlink).
type Nvlink uint8

const (
	// NvlinkPrefer takes the GPUs from one NVLink group (connected, not
	// necessarily all peers of one another) when one on the node holds the
	// request, the tightest group for Tightest, the largest for Loosest;
	// when no group does, it falls back silently to any free GPUs of the
	// node. The default.
	NvlinkPrefer Nvlink = iota
	// NvlinkRequire takes only GPUs that are all NVLink peers of one another
	// (a clique), never anything else: a node without such a set free does
	// not fit, and a request no node can serve this way waits (or is
	// rejected when no eligible node has such a set even when idle) with a
	// reason that says NVLink is required.
	NvlinkRequire
	// NvlinkIgnore disregards NVLink: the first free GPUs (by position) are
	// taken.
	NvlinkIgnore
)

// NvlinkFromBool is the mode the older preferNvlink flag means: true is
// NvlinkPrefer, false NvlinkIgnore.
func NvlinkFromBool(prefer bool) Nvlink {
	if prefer {
		return NvlinkPrefer
	}
	return NvlinkIgnore
}

// String is the mode as config.json spells it.
func (n Nvlink) String() string {
	switch n {
	case NvlinkPrefer:
		return "prefer"
	case NvlinkRequire:
		return "require"
	case NvlinkIgnore:
		return "ignore"
	}
	return fmt.Sprintf("Nvlink(%d)", uint8(n))
}

// MarshalJSON writes the mode as config.json spells it.
func (n Nvlink) MarshalJSON() ([]byte, error) { return json.Marshal(n.String()) }

// UnmarshalJSON reads "prefer", "require" or "ignore" (exact case).
func (n *Nvlink) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("expected one of \"prefer\", \"require\", \"ignore\", not %s", data)
	}
	switch s {
	case "prefer":
		*n = NvlinkPrefer
	case "require":
		*n = NvlinkRequire
	case "ignore":
		*n = NvlinkIgnore
	default:
		return fmt.Errorf("unknown value %q, expected one of \"prefer\", \"require\", \"ignore\"", s)
	}
	return nil
}

// linked reports whether GPUs a and b (positions) of node are NVLink peers:
// both whole GPUs and either names the other's index (a link joins both
// ends).
func linked(node *Node, a, b int) bool {
	whole := func(x int) *Gpu {
		if x < 0 || x >= len(node.Gpus) || node.Gpus[x].Mig.IsSome() {
			return nil
		}
		return &node.Gpus[x]
	}
	lists := func(x, y int) bool {
		gx, gy := whole(x), whole(y)
		return gx != nil && gy != nil && gy.Index < 64 && gx.Nvlink&(1<<gy.Index) != 0
	}
	return a != b && (lists(a, b) || lists(b, a))
}

// peerPositions is the positions of the whole GPUs of node that the GPU at
// position gpu names in its Nvlink set (none for a MIG instance).
func peerPositions(node *Node, gpu int) []int {
	g := &node.Gpus[gpu]
	if g.Mig.IsSome() {
		return nil
	}
	var out []int
	for p := range node.Gpus {
		other := &node.Gpus[p]
		if other.Mig.IsNone() && other.Index < 64 && g.Nvlink&(1<<other.Index) != 0 {
			out = append(out, p)
		}
	}
	return out
}

// clique is the first set of size GPUs among among (positions, in the order
// given) that are all peers of one another: the one that comes first when
// sets are compared position by position in among's order, in that order.
// Only the first 64 of among are considered.
func clique(node *Node, among []int, size int) ([]int, bool) {
	if len(among) > 64 {
		among = among[:64]
	}
	if size <= 0 || len(among) < size {
		return []int{}, size == 0
	}
	var adj [64]uint64
	adjacent := adj[:len(among)]
	for k, a := range among {
		for j, b := range among {
			if linked(node, a, b) {
				adjacent[k] |= 1 << j
			}
		}
	}
	all := ^uint64(0)
	if len(among) < 64 {
		all = 1<<len(among) - 1
	}
	found, ok := extend(adjacent, 0, all, size)
	if !ok {
		return nil, false
	}
	out := make([]int, 0, size)
	for j := range among {
		if found&(1<<j) != 0 {
			out = append(out, among[j])
		}
	}
	return out, true
}

// extend grows chosen by more members from open (each a peer of all of
// chosen), lowest first; it backtracks when a branch runs short.
func extend(adjacent []uint64, chosen, open uint64, more int) (uint64, bool) {
	if more == 0 {
		return chosen, true
	}
	for bits.OnesCount64(open) >= more {
		v := bits.TrailingZeros64(open)
		open &= open - 1
		if found, ok := extend(adjacent, chosen|1<<v, open&adjacent[v], more-1); ok {
			return found, true
		}
	}
	return 0, false
}
