package sdktest_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/sdk"
	st "wit_component/sdk/sdktest"
	. "wit_component/wasmgpu_policy_types"
)

// These run the host's validator (wasmgpu policy validate): they skip when
// there is no wasmgpu binary ($WASMGPU or on PATH).

func TestTheHostAcceptsAValidRoundByName(t *testing.T) {
	s := st.Snapshot(
		[]Node{st.Node("a", 2, "NVIDIA L4", 23034)},
		[]Request{st.Request("ns/p", 2, sdk.Exclusive, 0), st.Request("ns/q", 1, sdk.Exclusive, 0)},
	)
	decisions := []Decision{sdk.Assign(0, 0, []uint32{0, 1}), sdk.Wait(1, "no room")}
	verdict := st.ValidateOrSkip(t, s, decisions)
	if !verdict.Valid || len(verdict.Refused) != 0 {
		t.Fatalf("refused: %v", verdict.Refused)
	}
	want := []st.Placement{{Pod: "ns/p", Node: "a", Gpus: []string{"GPU-a-0", "GPU-a-1"}}}
	if !reflect.DeepEqual(verdict.Accepted, want) {
		t.Fatalf("accepted: %+v", verdict.Accepted)
	}
	if !reflect.DeepEqual(verdict.Waiting, []st.Deferred{{Pod: "ns/q", Reason: "no room"}}) {
		t.Fatalf("waiting: %+v", verdict.Waiting)
	}
}

func TestTheHostRefusesAGpuGivenToTwoPods(t *testing.T) {
	s := st.Snapshot(
		[]Node{st.Node("a", 2, "NVIDIA L4", 23034)},
		[]Request{st.Request("ns/p", 1, sdk.Exclusive, 0), st.Request("ns/q", 1, sdk.Exclusive, 0)},
	)
	verdict := st.ValidateOrSkip(t, s, []Decision{sdk.Assign(0, 0, []uint32{0}), sdk.Assign(1, 0, []uint32{0})})
	if verdict.Valid || len(verdict.Refused) != 1 {
		t.Fatalf("want one refusal: %+v", verdict)
	}
	r := verdict.Refused[0]
	if r.Index != 1 || r.Pod != "ns/q" || r.Reason.Kind != "gpu-taken" || r.Why == "" {
		t.Fatalf("refusal: %+v", r)
	}
	if len(verdict.Accepted) != 1 || verdict.Accepted[0].Pod != "ns/p" {
		t.Fatalf("the first assignment stands: %+v", verdict.Accepted)
	}
}

func TestTheHostRefusesAWrongGpuCount(t *testing.T) {
	s := st.Snapshot(
		[]Node{st.Node("a", 4, "NVIDIA L4", 23034)},
		[]Request{st.Request("ns/p", 2, sdk.Exclusive, 0)},
	)
	verdict := st.ValidateOrSkip(t, s, []Decision{sdk.Assign(0, 0, []uint32{0})})
	if verdict.Valid || len(verdict.Refused) != 1 || len(verdict.Accepted) != 0 {
		t.Fatalf("want one refusal: %+v", verdict)
	}
	r := verdict.Refused[0]
	if r.Reason.Kind != "wrong-count" || r.Reason.Fields["got"] != 1.0 || r.Reason.Fields["want"] != 2.0 {
		t.Fatalf("refusal: %+v", r)
	}
	if !strings.Contains(r.String(), "decision [0]") {
		t.Fatalf("in words: %s", r)
	}
}

// A snapshot with every part the file carries (MIG, NVLink, labels, running
// pods, gangs, tenants, restricted sets, DRA claims) reads back in the host,
// which holds a preemption and a MIG placement to its rules.
func TestTheHostReadsEveryPartOfASnapshotFile(t *testing.T) {
	nodes := []Node{
		st.WithLabels(st.WithFullNvlink(st.Node("a", 2, "NVIDIA H100", 81920)), "topology.kubernetes.io/zone", "z1"),
		st.WithMig(st.Node("b", 1, "NVIDIA A100", 40960), 0, st.Mig{Profile: "1g.5gb", MemoryMib: 4864}),
	}
	s := st.Snapshot(nodes, []Request{
		st.Request("ns/big", 2, sdk.Exclusive, 0),
		st.MigRequest("ns/small", 1, "1g.5gb"),
		st.Request("ns/g0", 1, sdk.Exclusive, 0),
		st.ClaimsRequest("ns/dra"),
	})
	s.Pending[0].Priority = 10
	st.Running(s, "other/low", 0, 0, []uint32{0}, 0)
	st.Gang(s, "ns/gang", 1, 2)
	s.Tenants = []Tenant{{Name: "team", Weight: 1, Quota: 4, Limit: witTypes.Some[uint32](8)}}
	s.Pending[2].Tenant = witTypes.Some[uint32](0)
	st.Restrict(s, 2, 1)
	s.CandidateSets = [][]GpuRef{{{Node: 1, Gpu: 0}}} // the DRA alternative's devices
	s.Config = `{"x": 1}`
	decisions := []Decision{
		sdk.Preempt(0, 0, []uint32{0, 1}, []uint32{0}),
		sdk.Assign(1, 1, []uint32{1}),
		sdk.Wait(2, "later"),
		sdk.Reject(3, "no DRA here"),
	}
	verdict := st.ValidateOrSkip(t, s, decisions)
	if !verdict.Valid {
		t.Fatalf("refused: %v", verdict.Refused)
	}
	if len(verdict.Preempting) != 1 || !reflect.DeepEqual(verdict.Preempting[0].Victims, []string{"other/low"}) ||
		!reflect.DeepEqual(verdict.Preempting[0].Placement.Gpus, []string{"GPU-a-0", "GPU-a-1"}) {
		t.Fatalf("preempting: %+v", verdict.Preempting)
	}
	if !reflect.DeepEqual(verdict.Accepted, []st.Placement{{Pod: "ns/small", Node: "b", Gpus: []string{"MIG-GPU-b-0-0"}}}) {
		t.Fatalf("accepted: %+v", verdict.Accepted)
	}
	if len(verdict.Waiting) != 1 || verdict.Waiting[0].Gang == "" || len(verdict.Rejected) != 1 {
		t.Fatalf("waiting %+v, rejected %+v", verdict.Waiting, verdict.Rejected)
	}
}

func TestWithoutAWasmgpuBinaryValidateSaysHowToGetOne(t *testing.T) {
	t.Setenv("WASMGPU", "")
	t.Setenv("PATH", t.TempDir())
	_, err := st.Validate(st.Snapshot(nil, nil), nil)
	if !errors.Is(err, st.ErrNoWasmgpu) || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "WASMGPU") {
		t.Fatalf("%v", err)
	}
	t.Setenv("WASMGPU", "/nonexistent/wasmgpu")
	if _, err := st.Validate(st.Snapshot(nil, nil), nil); err == nil || !strings.Contains(err.Error(), "WASMGPU=/nonexistent/wasmgpu") {
		t.Fatalf("%v", err)
	}
}

func TestDecisionsInSerdesTaggedForm(t *testing.T) {
	got := string(st.DecisionsJSON([]Decision{
		sdk.Assign(0, 1, []uint32{0, 1}),
		sdk.Wait(1, "no room"),
		sdk.Reject(2, "never"),
		sdk.Preempt(3, 0, []uint32{2}, []uint32{5}),
		MakeDecisionAssign(Assignment{Pod: 4, Node: 0, Gpus: []uint32{3}, Claims: []ClaimChoice{{Claim: 0, Request: 1, Alternative: 2, Gpus: []uint32{3}}}}),
	}))
	want := `[{"assign":{"gpus":[0,1],"node":1,"pod":0}},{"wait":{"pod":1,"reason":"no room"}},{"reject":{"pod":2,"reason":"never"}},` +
		`{"preempt":{"assignment":{"gpus":[2],"node":0,"pod":3},"victims":[5]}},` +
		`{"assign":{"claims":[{"alternative":2,"claim":0,"gpus":[3],"request":1}],"gpus":[3],"node":0,"pod":4}}]`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if string(st.DecisionsJSON(nil)) != "[]" {
		t.Fatal("no decisions: []")
	}
}

func TestASnapshotFileNamesGpusAndLabels(t *testing.T) {
	zone := "topology.kubernetes.io/zone"
	s := st.Snapshot([]Node{
		st.WithLabels(st.WithNvlink(st.Node("a", 2, "NVIDIA L4", 23034), [2]uint32{0, 1}), zone, "z1"),
		st.WithMig(st.Node("b", 1, "NVIDIA A100", 40960), 0, st.Mig{Profile: "1g.5gb", MemoryMib: 4864}),
	}, []Request{st.Request("ns/p", 1, sdk.Shared, 1000)})
	st.Restrict(s, 0, 1)
	var file map[string]any
	if err := json.Unmarshal(st.SnapshotFile(s), &file); err != nil {
		t.Fatal(err)
	}
	nodes := file["nodes"].([]any)
	a, b := nodes[0].(map[string]any), nodes[1].(map[string]any)
	gpu := a["gpus"].([]any)[0].(map[string]any)
	if file["contract"] != st.Contract || !reflect.DeepEqual(a["labels"], map[string]any{zone: "z1"}) ||
		!reflect.DeepEqual(b["labels"], map[string]any{}) || gpu["uuid"] != "GPU-a-0" ||
		!reflect.DeepEqual(gpu["nvlink"], []any{1.0}) || gpu["publishedBy"] != "agent" || gpu["memoryMiB"] != 23034.0 {
		t.Fatalf("nodes: %v", nodes)
	}
	if instance := b["gpus"].([]any)[1].(map[string]any); instance["uuid"] != "MIG-GPU-b-0-0" ||
		!reflect.DeepEqual(instance["mig"], map[string]any{"parent": 0.0, "profile": float64(st.MigProfile("1g.5gb"))}) {
		t.Fatalf("MIG instance: %v", instance)
	}
	if !reflect.DeepEqual(file["eligibleSets"], []any{[]any{0.0, 1.0}, []any{1.0}}) {
		t.Fatalf("eligible sets: %v", file["eligibleSets"])
	}
	pod := file["pending"].([]any)[0].(map[string]any)
	shape := pod["ask"].(map[string]any)["gpus"].(map[string]any)
	if pod["eligibleSet"] != 1.0 || pod["preemption"] != "PreemptLowerPriority" || pod["tenant"] != nil ||
		shape["sharing"] != "shared" || shape["memoryMiB"] != 1000.0 || shape["model"] != nil {
		t.Fatalf("pending: %v", pod)
	}
}

// PlaceEach's round on a large snapshot (NVLink pairs and boards, held and shared
// GPUs, labels, restricted sets) is one the host accepts whole.
func TestTheHostAcceptsPlaceEachOnALargeSnapshot(t *testing.T) {
	s := st.Large(100, 200)
	decisions := sdk.PlaceEach(s, sdk.Tightest)
	verdict := st.ValidateOrSkip(t, s, decisions)
	if !verdict.Valid || len(verdict.Accepted)+len(verdict.Preempting)+len(verdict.Waiting)+len(verdict.Rejected) != len(decisions) {
		t.Fatalf("refused: %v", verdict.Refused)
	}
	if got := st.Assigned(s, decisions); !reflect.DeepEqual(got, verdict.Accepted) {
		t.Fatalf("the host names the placements as Assigned does:\n%v\n%v", got, verdict.Accepted)
	}
}
