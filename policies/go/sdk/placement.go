package sdk

import . "wit_component/wasmgpu_policy_types"

// PlacementParams are the parameters PlaceEach understands (config.json,
// all optional), as the Rust SDK's:
//
//	{"nvlink": "prefer", "preemption": true}
//
// nvlink is "prefer" (the default), "require" or "ignore"; see Nvlink. The
// older "preferNvlink": true | false means "prefer" | "ignore"; when both
// are given, nvlink wins. preemption (default true) lets a pod that fits
// nowhere now evict lower-priority pods, as kube-scheduler does
// (Cluster.Preempt); false leaves it waiting. Any other key is refused,
// naming it and the known ones.
type PlacementParams struct {
	// Keep multi-GPU exclusive requests on GPUs joined by NVLink when
	// possible ("prefer"), or not ("ignore").
	PreferNvlink bool `json:"preferNvlink"`
	// How multi-GPU exclusive requests use NVLink; overrides PreferNvlink
	// when set.
	Nvlink *Nvlink `json:"nvlink"`
	// Preempt lower-priority pods for a pod that fits nowhere now.
	Preemption bool `json:"preemption"`
}

// DefaultPlacementParams is what an empty config.json means.
func DefaultPlacementParams() PlacementParams {
	return PlacementParams{PreferNvlink: true, Preemption: true}
}

// NvlinkMode is the NVLink mode the parameters ask for: Nvlink when set,
// else what PreferNvlink means.
func (p PlacementParams) NvlinkMode() Nvlink {
	if p.Nvlink != nil {
		return *p.Nvlink
	}
	return NvlinkFromBool(p.PreferNvlink)
}

// ParsePlacementParams reads config (snapshot.Config) on the defaults.
func ParsePlacementParams(config string) (PlacementParams, error) {
	params := DefaultPlacementParams()
	err := ParseConfig(config, &params)
	return params, err
}

// PlaceEach serves the snapshot's requests, GPUResource and DRA alike, by
// priority then age (AllPendingInOrder); each GPUResource request goes to
// the eligible node ChooseNodeWith picks for fit, on the GPUs PickGpusWith
// picks for the same fit, under the config's NVLink mode
// (PlacementParams.NvlinkMode), and each DRA request (ask claims) where
// PlaceClaims puts it for fit. A gang is served whole, all or nothing
// (PlaceGangWith), when its first GPUResource member's turn comes (members
// asking through DRA claims get no decision: they wait). A pod whose tenant
// is at its limit waits saying so (OverTenantLimit). A request that fits
// nowhere now preempts lower-priority pods when the config allows it
// (Preempt), GPUResource and DRA alike. The others that fit nowhere get
// wait or reject with the reason (for a DRA request, ClaimsUnplaced's), a
// wait with what keeps the pod from preempting: the pods a
// PodDisruptionBudget protects and those within their minimum runtime
// (PreemptionBlocked). An invalid config.json fails the round (Fail). It
// decides what the Rust SDK's place_each decides, byte for byte.
func PlaceEach(s *Snapshot, fit Fit) []Decision {
	params, err := ParsePlacementParams(s.Config)
	if err != nil {
		Fail(err.Error())
	}
	nvlink := params.NvlinkMode()
	c := NewCluster(s)
	decisions := make([]Decision, 0, len(s.Pending))
	gangServed := make([]bool, len(s.Gangs))
	for _, pod := range c.AllPendingInOrder() {
		r := &s.Pending[pod]
		_, gpus := Shape(r)
		if r.Gang.IsSome() && int(r.Gang.Some()) < len(gangServed) {
			g := r.Gang.Some()
			if gpus && !gangServed[g] {
				gangServed[g] = true
				decisions = append(decisions, c.PlaceGangWith(g, fit, nvlink)...)
			}
			continue
		}
		w := c.Want(pod)
		if d, over := c.OverTenantLimit(w); over {
			decisions = append(decisions, d)
			continue
		}
		if !gpus {
			decisions = append(decisions, placeClaims(c, w, fit, params.Preemption))
			continue
		}
		var d Decision
		ok := false
		if node, found := c.ChooseNodeWith(w, fit, nvlink); found {
			d, ok = c.PlaceWith(node, w, fit, nvlink)
		}
		if !ok && params.Preemption && !c.ShortfallWith(w, nvlink).Permanent() {
			d, ok = c.Preempt(w, fit, nvlink)
		}
		if !ok {
			d = c.UnplacedWith(w, nvlink)
			if d.Tag() == Decision_Wait && params.Preemption {
				if blocked, yes := c.PreemptionBlocked(w); yes {
					d = Wait(w.Pod, d.Wait().Reason+"; "+blocked)
				}
			}
		}
		decisions = append(decisions, d)
	}
	return decisions
}

// placeClaims is a DRA request's decision in PlaceEach: placed by
// PlaceClaims; else, when waiting could help and the config allows it
// (preemption), a preemption of lower-priority pods (Preempt); else
// ClaimsUnplaced's, a wait saying what keeps the pod from preempting
// (PreemptionBlocked).
func placeClaims(c *Cluster, w *Want, fit Fit, preemption bool) Decision {
	if d, ok := c.PlaceClaims(w, fit); ok {
		return d
	}
	if preemption && !c.ClaimsShortfall(w).Permanent() {
		if d, ok := c.Preempt(w, fit, NvlinkIgnore); ok {
			return d
		}
	}
	d := c.ClaimsUnplaced(w)
	if d.Tag() == Decision_Wait && preemption {
		if blocked, yes := c.PreemptionBlocked(w); yes {
			return Wait(w.Pod, d.Wait().Reason+"; "+blocked)
		}
	}
	return d
}
