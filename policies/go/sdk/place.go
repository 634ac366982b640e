// Placing one request: commit the GPUs picked on the chosen node, and for a
// GPUResource request placed nowhere the wait or reject that says why.

package sdk

import (
	. "wit_component/wasmgpu_policy_types"
)

// Place picks (PickGpus), commits and returns the assign decision; ok is
// false when node does not fit.
func (c *Cluster) Place(node uint32, w *Want, fit Fit, preferNvlink bool) (Decision, bool) {
	return c.PlaceWith(node, w, fit, NvlinkFromBool(preferNvlink))
}

// PlaceWith picks (PickGpusWith, under nvlink), commits and returns the
// assign decision; ok is false when node does not fit.
func (c *Cluster) PlaceWith(node uint32, w *Want, fit Fit, nvlink Nvlink) (Decision, bool) {
	positions := c.PickGpusWith(node, w, fit, nvlink)
	if positions == nil {
		return Decision{}, false
	}
	c.Commit(node, positions, w)
	return Assign(w.Pod, node, positions), true
}

// gpuUnplacedWith is UnplacedWith for a GPUResource request.
func (c *Cluster) gpuUnplacedWith(w *Want, nvlink Nvlink) Decision {
	s := c.gpuShortfallWith(w, nvlink)
	if s.Permanent() {
		return Reject(w.Pod, s.Reason())
	}
	return Wait(w.Pod, s.Reason())
}
