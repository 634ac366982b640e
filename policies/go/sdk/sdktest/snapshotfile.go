package sdktest

import (
	"encoding/json"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	wt "wit_component/wasmgpu_policy_types"
)

// Contract is the contract the snapshot files SnapshotFile writes follow.
const Contract = "wasmgpu:policy@0.3.0"

// SnapshotFile is s as a snapshot file (JSON, the host's SnapshotFile of
// crates/contract/src/snapshot_file.rs, camelCase), for `wasmgpu policy run
// --snapshot FILE`, `policy validate` (Validate) and the other commands that
// read one: GPU UUIDs as GpuName names them, a node's labels by key (its
// values for s.LabelKeys), eligible sets as node positions, NVLink as GPU
// indices.
func SnapshotFile(s *wt.Snapshot) []byte {
	nodes := make([]fileNode, len(s.Nodes))
	for i := range s.Nodes {
		n := &s.Nodes[i]
		labels := map[string]string{}
		for k, value := range n.Labels {
			if k < len(s.LabelKeys) && value.IsSome() {
				labels[s.LabelKeys[k]] = value.Some()
			}
		}
		gpus := make([]fileGpu, len(n.Gpus))
		for p := range n.Gpus {
			g := &n.Gpus[p]
			var mig *migInstance
			if g.Mig.IsSome() {
				mig = &migInstance{Parent: g.Mig.Some().Parent, Profile: g.Mig.Some().Profile}
			}
			nvlink := []uint32{}
			for b := uint32(0); b < 64; b++ {
				if g.Nvlink>>b&1 == 1 {
					nvlink = append(nvlink, b)
				}
			}
			gpus[p] = fileGpu{
				UUID: GpuName(n, uint32(p)), Index: g.Index, Model: g.Model, MemoryMib: g.MemoryMib,
				AllocatedMib: g.AllocatedMib, Held: g.Held, SharedOwners: g.SharedOwners,
				NumaNode: option(g.NumaNode), Nvlink: nvlink, Healthy: g.Healthy, Mig: mig,
				PublishedBy: publishers[g.PublishedBy],
			}
		}
		nodes[i] = fileNode{Name: n.Name, Labels: labels, Gpus: gpus}
	}
	pending := make([]fileRequest, len(s.Pending))
	for i := range s.Pending {
		r := &s.Pending[i]
		pending[i] = fileRequest{
			Pod: r.Pod, Namespace: r.Namespace, Tenant: option(r.Tenant), Priority: r.Priority,
			Preemption: preemptions[r.Preemption], CreatedMs: r.CreatedMs, EligibleSet: r.EligibleSet,
			Gang: option(r.Gang), Ask: ask(&r.Ask),
		}
	}
	running := make([]fileRunning, len(s.Running))
	for i := range s.Running {
		r := &s.Running[i]
		running[i] = fileRunning{
			Pod: r.Pod, Namespace: r.Namespace, Tenant: option(r.Tenant), Priority: r.Priority, Node: r.Node,
			Gpus: nonNil(r.Gpus), SharedMib: r.SharedMib, StartedMs: r.StartedMs, Gang: option(r.Gang),
			Evictable: r.Evictable, ProtectedMs: r.ProtectedMs,
		}
	}
	sets := make([][]uint32, len(s.EligibleSets))
	for i, words := range s.EligibleSets {
		sets[i] = []uint32{}
		for n := range s.Nodes {
			if n/64 < len(words) && words[n/64]>>(n%64)&1 == 1 {
				sets[i] = append(sets[i], uint32(n))
			}
		}
	}
	candidates := make([][]gpuRef, len(s.CandidateSets))
	for i, set := range s.CandidateSets {
		candidates[i] = []gpuRef{}
		for _, ref := range set {
			candidates[i] = append(candidates[i], gpuRef{Node: ref.Node, Gpu: ref.Gpu})
		}
	}
	gangs := make([]fileGang, len(s.Gangs))
	for i, g := range s.Gangs {
		gangs[i] = fileGang{Name: g.Name, MinMember: g.MinMember, Bound: g.Bound, Pending: nonNil(g.Pending), Running: nonNil(g.Running)}
	}
	tenants := make([]fileTenant, len(s.Tenants))
	for i, t := range s.Tenants {
		tenants[i] = fileTenant{Name: t.Name, Weight: t.Weight, Quota: t.Quota, Limit: option(t.Limit), Holding: t.Holding, Waiting: t.Waiting}
	}
	file := snapshotFile{
		Contract: Contract, Round: s.Round, Models: nonNil(s.Models), MigProfiles: nonNil(s.MigProfiles),
		Namespaces: nonNil(s.Namespaces), Nodes: nodes, Pending: pending, Running: running,
		EligibleSets: sets, CandidateSets: candidates, Gangs: gangs, Tenants: tenants, Config: s.Config,
	}
	text, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		panic("SnapshotFile: " + err.Error()) // plain structs: cannot happen
	}
	return append(text, '\n')
}

// The serde forms of the contract's enums.
var (
	publishers  = map[wt.Publisher]string{wt.Publisher_Agent: "agent", wt.Publisher_DraDriver: "draDriver", wt.Publisher_Both: "both"}
	preemptions = map[wt.PreemptionPolicy]string{wt.PreemptionPolicy_PreemptLowerPriority: "PreemptLowerPriority", wt.PreemptionPolicy_Never: "Never"}
	sharings    = map[wt.Sharing]string{wt.Sharing_Exclusive: "exclusive", wt.Sharing_Shared: "shared"}
)

// option is an option as JSON: null or the value.
func option[T any](o witTypes.Option[T]) *T {
	if o.IsNone() {
		return nil
	}
	v := o.Some()
	return &v
}

// nonNil is list, [] rather than null when empty.
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

// ask is a request's ask in serde's externally tagged form: {"gpus": {…}}
// or {"claims": […]}.
func ask(a *wt.Ask) map[string]any {
	if a.Tag() == wt.Ask_Gpus {
		g := a.Gpus()
		return map[string]any{"gpus": gpuShape{
			Count: g.Count, Model: option(g.Model), MigProfile: option(g.MigProfile),
			MemoryMib: g.MemoryMib, Sharing: sharings[g.Sharing],
		}}
	}
	claims := []claim{}
	for _, c := range a.Claims() {
		out := claim{Name: c.Name, Requests: []claimRequest{}, Constraints: []constraint{}}
		for _, r := range c.Requests {
			alternatives := []alternative{}
			for _, alt := range r.Alternatives {
				alternatives = append(alternatives, alternative{Subrequest: option(alt.Subrequest), Count: alt.Count, Candidates: alt.Candidates})
			}
			out.Requests = append(out.Requests, claimRequest{Name: r.Name, Alternatives: alternatives})
		}
		for _, k := range c.Constraints {
			values := []attributeValue{}
			for _, v := range k.Values {
				values = append(values, attributeValue{Device: gpuRef{Node: v.Device.Node, Gpu: v.Device.Gpu}, Value: v.Value})
			}
			out.Constraints = append(out.Constraints, constraint{Requests: nonNil(k.Requests), Distinct: k.Distinct, Attribute: k.Attribute, Values: values})
		}
		claims = append(claims, out)
	}
	return map[string]any{"claims": claims}
}

// The file's shapes (field names as the Rust serde derives write them).
type snapshotFile struct {
	Contract      string        `json:"contract"`
	Round         uint64        `json:"round"`
	Models        []string      `json:"models"`
	MigProfiles   []string      `json:"migProfiles"`
	Namespaces    []string      `json:"namespaces"`
	Nodes         []fileNode    `json:"nodes"`
	Pending       []fileRequest `json:"pending"`
	Running       []fileRunning `json:"running"`
	EligibleSets  [][]uint32    `json:"eligibleSets"`
	CandidateSets [][]gpuRef    `json:"candidateSets"`
	Gangs         []fileGang    `json:"gangs"`
	Tenants       []fileTenant  `json:"tenants"`
	Config        string        `json:"config"`
}

type fileNode struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	Gpus   []fileGpu         `json:"gpus"`
}

type fileGpu struct {
	UUID         string       `json:"uuid"`
	Index        uint32       `json:"index"`
	Model        uint32       `json:"model"`
	MemoryMib    uint64       `json:"memoryMiB"`
	AllocatedMib uint64       `json:"allocatedMiB"`
	Held         bool         `json:"held"`
	SharedOwners uint32       `json:"sharedOwners"`
	NumaNode     *uint32      `json:"numaNode"`
	Nvlink       []uint32     `json:"nvlink"`
	Healthy      bool         `json:"healthy"`
	Mig          *migInstance `json:"mig"`
	PublishedBy  string       `json:"publishedBy"`
}

type migInstance struct {
	Parent  uint32 `json:"parent"`
	Profile uint32 `json:"profile"`
}

type fileRequest struct {
	Pod         string         `json:"pod"`
	Namespace   uint32         `json:"namespace"`
	Tenant      *uint32        `json:"tenant"`
	Priority    int32          `json:"priority"`
	Preemption  string         `json:"preemption"`
	CreatedMs   uint64         `json:"createdMs"`
	EligibleSet uint32         `json:"eligibleSet"`
	Gang        *uint32        `json:"gang"`
	Ask         map[string]any `json:"ask"`
}

type gpuShape struct {
	Count      uint32  `json:"count"`
	Model      *string `json:"model"`
	MigProfile *string `json:"migProfile"`
	MemoryMib  uint64  `json:"memoryMiB"`
	Sharing    string  `json:"sharing"`
}

type claim struct {
	Name        string         `json:"name"`
	Requests    []claimRequest `json:"requests"`
	Constraints []constraint   `json:"constraints"`
}

type claimRequest struct {
	Name         string        `json:"name"`
	Alternatives []alternative `json:"alternatives"`
}

type alternative struct {
	Subrequest *string `json:"subrequest"`
	Count      uint32  `json:"count"`
	Candidates uint32  `json:"candidates"`
}

type constraint struct {
	Requests  []uint32         `json:"requests"`
	Distinct  bool             `json:"distinct"`
	Attribute string           `json:"attribute"`
	Values    []attributeValue `json:"values"`
}

type attributeValue struct {
	Device gpuRef `json:"device"`
	Value  uint32 `json:"value"`
}

type gpuRef struct {
	Node uint32 `json:"node"`
	Gpu  uint32 `json:"gpu"`
}

type fileRunning struct {
	Pod         string   `json:"pod"`
	Namespace   uint32   `json:"namespace"`
	Tenant      *uint32  `json:"tenant"`
	Priority    int32    `json:"priority"`
	Node        uint32   `json:"node"`
	Gpus        []uint32 `json:"gpus"`
	SharedMib   uint64   `json:"sharedMiB"`
	StartedMs   uint64   `json:"startedMs"`
	Gang        *uint32  `json:"gang"`
	Evictable   bool     `json:"evictable"`
	ProtectedMs uint64   `json:"protectedMs"`
}

type fileGang struct {
	Name      string   `json:"name"`
	MinMember uint32   `json:"minMember"`
	Bound     uint32   `json:"bound"`
	Pending   []uint32 `json:"pending"`
	Running   []uint32 `json:"running"`
}

type fileTenant struct {
	Name    string  `json:"name"`
	Weight  uint32  `json:"weight"`
	Quota   uint32  `json:"quota"`
	Limit   *uint32 `json:"limit"`
	Holding uint32  `json:"holding"`
	Waiting uint32  `json:"waiting"`
}
