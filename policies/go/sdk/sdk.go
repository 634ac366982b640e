// Package sdk is the wasmgpu policy SDK for Go, on par with the Rust SDK
// (policies/sdk): decision builders, the model glob, config parsing
// (ParseConfig), round state that tracks what is free as a policy places pods
// and answers questions about it (Cluster: GpuNow, FreeGpus, FreeByLabel,
// NvlinkGroups, NvlinkClique, ...), NVLink modes (Nvlink), preemption by
// priority (Cluster.Preempt), tenant limits, the placement loop most policies
// share (PlaceEach), and the standard wait and reject wording (package
// reason). Package sdktest builds snapshots for a policy's tests.
//
// The contract's types are generated from wit/policy.wit
// (wasmgpu:policy@0.3.0) by `wit-bindgen go` into package
// wasmgpu_policy_types. Decisions name pods, nodes and GPUs by position:
// Assign(pod, node, gpus) takes the pod's index in snapshot.Pending, the
// node's in snapshot.Nodes and the GPUs' in that node's Gpus list. Names
// cross once, in tables: namespaces (NamespaceName), label values by the
// keys the policy asked for (Label), NVLink peers and node sets as bit sets
// (NvlinkPeers, InSet).
//
// GPUResource requests (ask gpus) are placed by the GPU fit helpers
// (ChooseNode, PickGpus, Place, ...); DRA requests (ask claims) by
// Cluster.PlaceClaims (claims.go: every request of every claim gets its
// count of free candidates on one node, within the claims' constraints),
// and PlaceEach serves both in one priority order. Everything Cluster and
// PlaceEach decide is what the Rust SDK decides on the same snapshot, byte
// for byte.
//
// The package does not touch the component's imports, so it compiles and is
// tested natively (`go test ./sdk/...`); the component's entry point
// (package component) hands it the world's log import with SetLogSink.
package sdk

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/wasmgpu_policy_types"
)

// How a request uses its GPUs (GpuShape.Sharing), so a policy need not
// import the contract's types for them.
const (
	// Exclusive: each GPU is the pod's alone.
	Exclusive Sharing = Sharing_Exclusive
	// Shared: each GPU may be shared; MemoryMib is the share taken on each.
	Shared Sharing = Sharing_Shared
)

// Whether a pending pod may preempt (Request.Preemption).
const (
	PreemptLowerPriority PreemptionPolicy = PreemptionPolicy_PreemptLowerPriority
	PreemptNever         PreemptionPolicy = PreemptionPolicy_Never
)

var logSink = func(string) {}

// SetLogSink sends Log lines to sink (the component's entry point passes the
// world's log import).
func SetLogSink(sink func(string)) { logSink = sink }

// Log writes a line to the controller's log.
func Log(message string) { logSink(message) }

// PolicyError is what Fail panics with.
type PolicyError struct{ Message string }

func (e PolicyError) Error() string { return e.Message }

// Fail stops the round with message: the message goes to the controller's log
// and the call traps, so the controller keeps its previous policy version (at
// load time) or applies nothing this round. Use it for errors the operator
// must fix, such as an invalid config.json.
func Fail(message string) {
	Log(message)
	panic(PolicyError{message})
}

// NewInfo builds an Info; labelKeys are the node label keys the policy reads
// (exact keys, at most 32): each node in a snapshot then carries its values
// for these, read with Label. None: nodes carry no labels.
func NewInfo(name, version, description string, labelKeys ...string) Info {
	keys := append([]string{}, labelKeys...)
	return Info{Name: name, Version: version, Description: description, LabelKeys: keys}
}

// Assign places the GPUResource request at pending position pod on node
// position node, on the GPUs at positions gpus.
func Assign(pod, node uint32, gpus []uint32) Decision {
	return MakeDecisionAssign(Assignment{Pod: pod, Node: node, Gpus: gpus, Claims: []ClaimChoice{}})
}

// Preempt evicts the running pods at positions victims (in
// snapshot.Running) and places pending position pod on node, on the GPUs at
// positions gpus, once they are gone (see Cluster.Preempt).
func Preempt(pod, node uint32, gpus []uint32, victims []uint32) Decision {
	return MakeDecisionPreempt(Preemption{
		Assignment: Assignment{Pod: pod, Node: node, Gpus: gpus, Claims: []ClaimChoice{}},
		Victims:    victims,
	})
}

// Wait leaves pending position pod for a later round, with a reason shown to users.
func Wait(pod uint32, reason string) Decision {
	return MakeDecisionWait(Deferral{Pod: pod, Reason: reason})
}

// Reject says the request at pending position pod can never fit as posed.
func Reject(pod uint32, reason string) Decision {
	return MakeDecisionReject(Deferral{Pod: pod, Reason: reason})
}

// PodOf is the pending position a decision is about.
func PodOf(d Decision) uint32 {
	switch d.Tag() {
	case Decision_Assign:
		return d.Assign().Pod
	case Decision_Wait:
		return d.Wait().Pod
	case Decision_Preempt:
		return d.Preempt().Assignment.Pod
	default:
		return d.Reject().Pod
	}
}

// Shape is what a GPUResource request (ask gpus) asks for; ok is false for a
// DRA request (ask claims), which PlaceClaims places.
func Shape(r *Request) (shape GpuShape, ok bool) {
	if r.Ask.Tag() != Ask_Gpus {
		return GpuShape{}, false
	}
	defer func() {
		// A Request built without its Ask (the zero value) asks for nothing.
		if recover() != nil {
			shape, ok = GpuShape{}, false
		}
	}()
	return r.Ask.Gpus(), true
}

// Claims is the DRA claims a request asks for; nil for a GPUResource request.
func Claims(r *Request) []Claim {
	if r.Ask.Tag() != Ask_Claims {
		return nil
	}
	return r.Ask.Claims()
}

// NamespaceName is the namespace at index (a request's or running pod's
// Namespace) in snapshot.Namespaces; "" when out of range.
func NamespaceName(s *Snapshot, index uint32) string {
	if int(index) < len(s.Namespaces) {
		return s.Namespaces[index]
	}
	return ""
}

// TenantOf is the tenant a tenant index (a request's or running pod's
// Tenant) names in snapshot.Tenants; nil when none or out of range.
func TenantOf(s *Snapshot, tenant witTypes.Option[uint32]) *Tenant {
	if tenant.IsSome() && int(tenant.Some()) < len(s.Tenants) {
		return &s.Tenants[tenant.Some()]
	}
	return nil
}

// Label is node's value for the label key (one of the keys the policy named
// in Info.LabelKeys, so one of snapshot.LabelKeys); ok is false when the node
// lacks the label or the key was not asked for.
func Label(s *Snapshot, node *Node, key string) (value string, ok bool) {
	for i, k := range s.LabelKeys {
		if k == key {
			if i < len(node.Labels) && node.Labels[i].IsSome() {
				return node.Labels[i].Some(), true
			}
			return "", false
		}
	}
	return "", false
}

// NvlinkIndices is the GPU indices in an NVLink bit set (a Gpu's Nvlink: bit
// i is the whole GPU whose Index is i), ascending.
func NvlinkIndices(set uint64) []uint32 {
	var out []uint32
	for i := uint32(0); i < 64; i++ {
		if set&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}

// NvlinkPeers is the whole GPUs of node the GPU at position gpu has an NVLink
// to (names in its Nvlink set), as positions in node.Gpus, ascending: its
// Nvlink bits name GPUs by Index, not by position (they differ once a GPU
// has MIG instances). A MIG instance has no links. Cluster.AreNvlinkPeers
// also counts a link listed on the other end only.
func NvlinkPeers(node *Node, gpu uint32) []uint32 {
	if int(gpu) >= len(node.Gpus) {
		return nil
	}
	var out []uint32
	for _, p := range peerPositions(node, int(gpu)) {
		out = append(out, uint32(p))
	}
	return out
}

// InSet reports whether member (a node position) is in a node bit set (an
// entry of snapshot.EligibleSets: bit i of word i/64 is node i).
func InSet(set []uint64, member uint32) bool {
	word := int(member / 64)
	return word < len(set) && set[word]&(1<<(member%64)) != 0
}

// SetMembers is the members of a node bit set, ascending.
func SetMembers(set []uint64) []uint32 {
	var out []uint32
	for w, word := range set {
		for b := uint32(0); b < 64; b++ {
			if word&(1<<b) != 0 {
				out = append(out, uint32(w)*64+b)
			}
		}
	}
	return out
}

// GlobMatch reports whether text matches the model glob pattern: `*` matches
// any run of characters, `?` any one character; everything else matches
// itself, case-sensitively (the host's rule).
func GlobMatch(pattern, text string) bool {
	p, t := []rune(pattern), []rune(text)
	pi, ti, starP, starT := 0, 0, -1, 0
	for ti < len(t) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == t[ti]):
			pi++
			ti++
		case pi < len(p) && p[pi] == '*':
			starP, starT = pi, ti
			pi++
		case starP >= 0:
			starT++
			pi, ti = starP+1, starT
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
