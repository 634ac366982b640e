// Why a request is not placed, and the wait or reject decision that says
// so: for a GPUResource request from the fit checks, for a DRA request from
// its claims.

package sdk

import (
	. "wit_component/wasmgpu_policy_types"
)

// Shortfall says why w fits on none of its eligible nodes (for a DRA
// request, ClaimsShortfall).
func (c *Cluster) Shortfall(w *Want) Shortfall {
	if w.dra {
		return c.ClaimsShortfall(w)
	}
	return c.gpuShortfall(w)
}

// ShortfallWith is Shortfall for a request placed under nvlink. With
// NvlinkRequire (for a request it applies to), what is missing is Count GPUs
// that are all NVLink peers of one another (reason.AskedNvlink): NotNow when
// an eligible node has such a set once idle, Never when none has.
func (c *Cluster) ShortfallWith(w *Want, nvlink Nvlink) Shortfall {
	if w.dra {
		return c.ClaimsShortfall(w)
	}
	return c.gpuShortfallWith(w, nvlink)
}

// Unplaced is wait (GPUs may free up) or reject (it can never fit) for a
// request placed nowhere (for a DRA request, ClaimsUnplaced).
func (c *Cluster) Unplaced(w *Want) Decision { return c.UnplacedWith(w, NvlinkPrefer) }

// UnplacedWith is Unplaced for a request placed under nvlink: with
// NvlinkRequire the reason says the GPUs must be NVLink peers (see
// ShortfallWith). For a DRA request it is ClaimsUnplaced.
func (c *Cluster) UnplacedWith(w *Want, nvlink Nvlink) Decision {
	if w.dra {
		return c.ClaimsUnplaced(w)
	}
	return c.gpuUnplacedWith(w, nvlink)
}
