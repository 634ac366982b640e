package component

import (
	"strings"
	"testing"

	"wit_component/sdk"
	. "wit_component/wasmgpu_policy_types"
)

// The exports call the policy given to Export; a panic in it is logged
// (unless it is sdk.Fail's, which logged already) and fails the round.
func TestTheExportsCallThePolicyAndLogAPanic(t *testing.T) {
	var logged []string
	sdk.SetLogSink(func(line string) { logged = append(logged, line) })
	defer sdk.SetLogSink(func(string) {})
	defer func() { describePolicy, allocatePolicy = nil, nil }()

	func() {
		defer func() {
			if e, ok := recover().(sdk.PolicyError); !ok || !strings.Contains(e.Message, "component.Export(Describe, Allocate)") {
				t.Fatalf("without Export: %v", e)
			}
		}()
		describe()
	}()

	Export(func() Info { return sdk.NewInfo("p", "1", "d") }, func(s Snapshot) []Decision {
		if s.Round == 2 {
			var none []int
			_ = none[3]
		}
		return []Decision{sdk.Wait(0, "later")}
	})
	if info := describe(); info.Name != "p" {
		t.Fatalf("describe: %+v", info)
	}
	if decisions := allocate(Snapshot{Round: 1}); len(decisions) != 1 {
		t.Fatalf("allocate: %v", decisions)
	}
	logged = nil
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic fails the round")
			}
		}()
		allocate(Snapshot{Round: 2})
	}()
	if len(logged) != 1 || !strings.HasPrefix(logged[0], "allocate failed: runtime error: index out of range") {
		t.Fatalf("logged: %q", logged)
	}
}

func TestExportWantsBothFunctions(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "Describe and its Allocate") {
			t.Fatalf("%v", r)
		}
	}()
	Export(nil, nil)
}
