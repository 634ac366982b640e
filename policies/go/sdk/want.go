// What a request asks for, as the fit checks read it (Want), how a policy
// asks for the fit (Fit) and learns why nothing fits (Shortfall).

package sdk

import (
	"math"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/sdk/reason"
	. "wit_component/wasmgpu_policy_types"
)

// Fit says which end to prefer when several candidates fit.
type Fit int

const (
	// Tightest prefers the candidate with the least room left that still fits (packing).
	Tightest Fit = iota
	// Loosest prefers the candidate with the most room (spreading).
	Loosest
)

// Shortfall says why a request cannot be placed this round.
type Shortfall struct {
	Kind ShortfallKind
	// What is missing, in words (a reason.Asked or reason.AskedNvlink
	// phrase); empty for NoEligibleNode.
	What string
}

// ShortfallKind is the kind of Shortfall.
type ShortfallKind int

const (
	// NoEligibleNode: the request has no eligible node at all.
	NoEligibleNode ShortfallKind = iota
	// Never: no eligible node could hold it even if all its GPUs were free.
	Never
	// NotNow: some eligible node could hold it once GPUs are released.
	NotNow
)

// Permanent is true when waiting cannot help (the decision is a reject).
func (s Shortfall) Permanent() bool { return s.Kind != NotNow }

// Reason is the shortfall in the SDK's standard words (package reason).
func (s Shortfall) Reason() string {
	switch s.Kind {
	case NoEligibleNode:
		return reason.NoEligibleNode()
	case Never:
		return reason.Never(s.What)
	default:
		return reason.NotNow(s.What)
	}
}

// DescribeRequest is what the request asks for, in words (reason.Asked).
func DescribeRequest(r *Request) string { return reason.Asked(r) }

// DescribeShape is what a GPUResource shape asks for, in words
// (reason.AskedShape).
func DescribeShape(r *GpuShape) string { return reason.AskedShape(r) }

// noProfile is the profile a MIG request gets when no instance of the
// snapshot has the profile it names.
const noProfile = math.MaxUint32

// Want is a pending request prepared for the fit checks (see Cluster.Want).
type Want struct {
	// The request's position in snapshot.Pending: what decisions name.
	Pod     uint32
	Request *Request
	// What it asks for: its GPUResource's shape (NoShape for a DRA request,
	// which fits nowhere through the GPU fit helpers: place it with
	// PlaceClaims).
	Shape   GpuShape
	modelOk []bool
	// For a MIG request: the profile, as an index into snapshot.MigProfiles
	// (noProfile when none has its name).
	mig     bool
	profile uint32
	// A DRA request (ask claims), and its claims.
	dra    bool
	claims []Claim
}

func (w *Want) exclusive() bool { return w.Shape.Sharing == Sharing_Exclusive }

// IsMig is true when the request asks for MIG instances, not whole GPUs.
func (w *Want) IsMig() bool { return w.mig }

// IsExclusiveWhole is true when the request asks for whole GPUs of its own
// (not shares, not MIG instances).
func (w *Want) IsExclusiveWhole() bool { return w.exclusive() && !w.mig }

// UsesNvlink is true when nvlink changes which GPUs the request gets: an
// exclusive request for more than one whole GPU, and nvlink is not
// NvlinkIgnore.
func (w *Want) UsesNvlink(nvlink Nvlink) bool {
	return nvlink != NvlinkIgnore && w.IsExclusiveWhole() && w.Shape.Count > 1
}

// Describe is what the request asks for, in words (reason.Asked).
func (w *Want) Describe() string {
	if w.dra {
		return reason.Asked(w.Request)
	}
	return reason.AskedShape(&w.Shape)
}

func addSat32(a, b uint32) uint32 {
	if a > math.MaxUint32-b {
		return math.MaxUint32
	}
	return a + b
}

// NoShape is the shape a DRA request's Want has (Want.Shape): no GPU fits
// it through the GPU fit helpers (PlaceClaims places DRA requests). Its
// sharing is Exclusive, so Commit holds a DRA request's devices
// exclusively. The Rust SDK's NO_SHAPE (a variable, as Go has no constant
// structs: do not change it).
var NoShape = GpuShape{
	Count:      0,
	Model:      witTypes.None[string](),
	MigProfile: witTypes.None[string](),
	MemoryMib:  math.MaxUint64,
	Sharing:    Sharing_Exclusive,
}

// DevicesOf is the devices request asks for: its GPUResource's Count, or
// for a DRA request the sum over its claims' requests of each one's first
// alternative's Count (a later alternative may want another number).
func DevicesOf(request *Request) uint32 {
	if shape, ok := Shape(request); ok {
		return shape.Count
	}
	return claimsDevices(Claims(request))
}

// claimsDevices is the devices claims ask for (saturating).
func claimsDevices(claims []Claim) uint32 {
	sum := uint32(0)
	for i := range claims {
		sum = addSat32(sum, claimDevices(&claims[i]))
	}
	return sum
}

// claimDevices is the devices a claim asks for: the sum over its requests
// of their first alternative's count (what reason.Asked and the tenant
// limit count).
func claimDevices(claim *Claim) uint32 {
	sum := uint32(0)
	for _, r := range claim.Requests {
		if len(r.Alternatives) > 0 {
			sum = addSat32(sum, r.Alternatives[0].Count)
		}
	}
	return sum
}

// IsDra is true for a DRA request (ask claims): the GPU fit helpers place
// none; PlaceClaims does.
func (w *Want) IsDra() bool { return w.dra }

// Claims is the claims of a DRA request (empty when all are allocated
// already and the pod only needs a node); ok is false for a GPUResource
// request.
func (w *Want) Claims() (claims []Claim, ok bool) {
	if !w.dra {
		return nil, false
	}
	return w.claims, true
}

// Devices is the devices the request asks for (DevicesOf): what the tenant
// limit counts before placing.
func (w *Want) Devices() uint32 {
	if !w.dra {
		return w.Shape.Count
	}
	return claimsDevices(w.claims)
}
