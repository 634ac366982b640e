// Placing a gang: all its members or none.

package sdk

import (
	"sort"

	"wit_component/sdk/reason"
	. "wit_component/wasmgpu_policy_types"
)

type left struct {
	want      *Want
	shortfall Shortfall
}

// PlaceGang is PlaceGangWith with the older preferNvlink flag: true is
// NvlinkPrefer, false NvlinkIgnore.
func (c *Cluster) PlaceGang(gang uint32, fit Fit, preferNvlink bool) []Decision {
	return c.PlaceGangWith(gang, fit, NvlinkFromBool(preferNvlink))
}

// PlaceGangWith places the pending members of gang (an index into
// snapshot.Gangs) all together or not at all: each member, in order, goes
// where ChooseNodeWith and PickGpusWith put it under nvlink, on a trial copy
// of the round's state. When enough fit to reach the gang's MinMember with
// the members already bound, the trial becomes the state and the members
// that fit are assigned (the others wait); otherwise nothing is committed
// and every member waits, with the reason. A member that can never fit is
// rejected on its own reason; when without such members the gang could
// never reach MinMember, every member is rejected, naming the one that fits
// nowhere. The host applies a gang's assignments on the same rule. A DRA
// member (ask claims) gets no decision and is not placed; it counts as a
// member that may fit later.
func (c *Cluster) PlaceGangWith(gang uint32, fit Fit, nvlink Nvlink) []Decision {
	if int(gang) >= len(c.Snapshot.Gangs) {
		return nil
	}
	g := &c.Snapshot.Gangs[gang]
	pending := c.Snapshot.Pending
	var members []uint32
	for _, p := range g.Pending {
		if int(p) < len(pending) {
			members = append(members, p)
		}
	}
	sort.SliceStable(members, func(a, b int) bool {
		return compareRequests(&pending[members[a]], &pending[members[b]]) < 0
	})
	dra := 0
	kept := members[:0]
	for _, p := range members {
		if _, ok := Shape(&pending[p]); ok {
			kept = append(kept, p)
		} else {
			dra++
		}
	}
	members = kept
	need := 0
	if g.MinMember > g.Bound {
		need = int(g.MinMember - g.Bound)
	}
	trial := c.Clone()
	var placed []Decision
	var lefts []left
	for _, pod := range members {
		w := trial.Want(pod)
		var d Decision
		ok := false
		if node, found := trial.ChooseNodeWith(w, fit, nvlink); found {
			d, ok = trial.PlaceWith(node, w, fit, nvlink)
		}
		if ok {
			placed = append(placed, d)
		} else {
			lefts = append(lefts, left{w, trial.ShortfallWith(w, nvlink)})
		}
	}
	// Members that can never fit are rejected on their own; the gang waits
	// for the others as long as they could still reach its MinMember.
	var never, later []left
	for _, l := range lefts {
		if l.shortfall.Permanent() {
			never = append(never, l)
		} else {
			later = append(later, l)
		}
	}
	if len(placed)+len(later)+dra < need {
		why := reason.GangShort(g.Name, len(placed), need, g.Bound, g.MinMember)
		if len(never) > 0 {
			why = reason.GangNever(g.Name, never[0].want.Request.Pod, never[0].shortfall.Reason())
		}
		out := make([]Decision, 0, len(members))
		for _, d := range placed {
			out = append(out, Reject(d.Assign().Pod, why))
		}
		for _, l := range later {
			out = append(out, Reject(l.want.Pod, why))
		}
		for _, l := range never {
			out = append(out, Reject(l.want.Pod, why))
		}
		return out
	}
	var rejected []Decision
	for _, l := range never {
		rejected = append(rejected, Reject(l.want.Pod, l.shortfall.Reason()))
	}
	if len(placed) >= need {
		*c = *trial
		why := reason.GangPlacedWithout(g.Name, len(placed), need)
		for _, l := range later {
			placed = append(placed, Wait(l.want.Pod, why))
		}
		return append(placed, rejected...)
	}
	why := reason.GangShort(g.Name, len(placed), need, g.Bound, g.MinMember)
	out := make([]Decision, 0, len(members))
	for _, d := range placed {
		out = append(out, Wait(d.Assign().Pod, why))
	}
	for _, l := range later {
		out = append(out, Wait(l.want.Pod, why))
	}
	return append(out, rejected...)
}
