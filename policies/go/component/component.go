// Package component is the entry point of a Go policy's component: the
// canonical-ABI glue of the contract's two exports (wit_exports.go, adapted
// from wit-bindgen's output by build.sh --generate) calls the policy that
// the main package gives to Export in its init:
//
//	package main
//
//	import (
//		"wit_component/component"
//		"wit_component/sdk"
//		. "wit_component/wasmgpu_policy_types"
//	)
//
//	func init() { component.Export(Describe, Allocate) }
//
//	// main is never called (the component is a library), but Go wants one.
//	func main() {}
//
//	func Describe() Info { return sdk.NewInfo("first-fit", "0.1.0", "First eligible node that fits") }
//
//	func Allocate(snapshot Snapshot) []Decision { ... }
//
// build.sh builds any such main package (binpack's, main.go in this
// directory, or a policy's own module with --policy DIR). Natively (go test)
// the glue is left out and Export only records the two functions, so a
// policy's tests call Describe and Allocate directly.
package component

import (
	"fmt"

	"wit_component/sdk"
	. "wit_component/wasmgpu_policy_types"
)

var (
	describePolicy func() Info
	allocatePolicy func(Snapshot) []Decision
)

// Export makes describe and allocate the component's exports (call it once,
// from the main package's init). In the component, the SDK's Log lines go to
// the host's log.
func Export(describe func() Info, allocate func(Snapshot) []Decision) {
	if describe == nil || allocate == nil {
		panic("component.Export needs both the policy's Describe and its Allocate")
	}
	describePolicy, allocatePolicy = describe, allocate
}

// describe is the export describe: the policy's Info.
func describe() Info {
	if describePolicy == nil {
		sdk.Fail(notExported)
	}
	return describePolicy()
}

// allocate is the export allocate: the policy's decisions for one round. A
// panic other than sdk.Fail's is logged before the round fails, so the
// controller's log says what went wrong.
func allocate(snapshot Snapshot) []Decision {
	if allocatePolicy == nil {
		sdk.Fail(notExported)
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(sdk.PolicyError); !ok {
				sdk.Log(fmt.Sprintf("allocate failed: %v", r))
			}
			panic(r)
		}
	}()
	return allocatePolicy(snapshot)
}

const notExported = "no policy in this component: its main package must call component.Export(Describe, Allocate) in an init function"
