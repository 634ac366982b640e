// Package reason is the standard wording of wait and reject reasons, as the
// SDK's own placement writes them (Shortfall.Reason, Cluster.Unplaced,
// Cluster.PlaceGang), byte for byte the Rust SDK's (policies/sdk/src/reason.rs).
// A policy that decides on its own can word its reasons the same way, so
// users see one vocabulary whichever policy runs:
//
//	why := reason.NotNow(reason.Asked(&snapshot.Pending[0]))
//	// "no eligible node has 4 GPU(s) with at least 40960 MiB each free right now"
//	decision := sdk.Wait(0, why)
//
// The wording is for people; match on sdk.Shortfall, not on these strings.
package reason

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	wt "wit_component/wasmgpu_policy_types"
)

// shape is the GPUResource shape of r; ok is false for a DRA request (or a
// Request built without its Ask).
func shape(r *wt.Request) (s wt.GpuShape, ok bool) {
	if r.Ask.Tag() != wt.Ask_Gpus {
		return wt.GpuShape{}, false
	}
	defer func() {
		if recover() != nil {
			s, ok = wt.GpuShape{}, false
		}
	}()
	return r.Ask.Gpus(), true
}

// Asked is what request asks for, in words: `2 GPU(s) matching "NVIDIA
// H100*" with at least 40960 MiB each`, `1 GPU(s) with 8192 MiB to share`,
// `1 MIG instance(s) of profile "1g.10gb"`; for a DRA request (ask claims),
// per claim the sum of its requests' first alternative's count: `2
// device(s) for claim ml/train`, `2 device(s) for claim ml/a, 1 device(s)
// for claim ml/b` (`no devices: its claims are allocated already` for none,
// and for a Request built without its Ask).
func Asked(request *wt.Request) string {
	if s, ok := shape(request); ok {
		return AskedShape(&s)
	}
	var claims []wt.Claim
	if request.Ask.Tag() == wt.Ask_Claims {
		claims = request.Ask.Claims()
	}
	if len(claims) == 0 {
		return "no devices: its claims are allocated already"
	}
	each := make([]string, len(claims))
	for i := range claims {
		each[i] = fmt.Sprintf("%d device(s) for claim %s", claimDevices(&claims[i]), claims[i].Name)
	}
	return strings.Join(each, ", ")
}

// claimDevices is the devices a claim asks for: the sum over its requests
// of their first alternative's count (saturating; sdk.DevicesOf counts so).
func claimDevices(claim *wt.Claim) uint32 {
	sum := uint32(0)
	for _, r := range claim.Requests {
		if len(r.Alternatives) > 0 {
			count := r.Alternatives[0].Count
			if sum > ^uint32(0)-count {
				sum = ^uint32(0)
			} else {
				sum += count
			}
		}
	}
	return sum
}

// AskedShape is Asked for a GPUResource shape.
func AskedShape(r *wt.GpuShape) string {
	model := ""
	if r.Model.IsSome() {
		model = " matching \"" + r.Model.Some() + "\""
	}
	if r.MigProfile.IsSome() {
		return fmt.Sprintf("%d MIG instance(s) of profile %s%s", r.Count, Quote(r.MigProfile.Some()), model)
	}
	if r.Sharing == wt.Sharing_Shared {
		return fmt.Sprintf("%d GPU(s)%s with %d MiB to share", r.Count, model, r.MemoryMib)
	}
	if r.MemoryMib == 0 {
		return fmt.Sprintf("%d GPU(s)%s", r.Count, model)
	}
	return fmt.Sprintf("%d GPU(s)%s with at least %d MiB each", r.Count, model, r.MemoryMib)
}

// AskedNvlink is Asked, with the GPUs required to be NVLink peers of one
// another (sdk.NvlinkRequire).
func AskedNvlink(request *wt.Request) string {
	return Asked(request) + " that are all NVLink peers of one another"
}

// NoEligibleNode: the request has no eligible node at all (a reject reason).
func NoEligibleNode() string {
	return "no eligible node: node selector, affinity or taints exclude every GPU node"
}

// Never: no eligible node could hold what (an Asked phrase) even with all of
// its GPUs free (a reject reason).
func Never(what string) string {
	return "no eligible node has " + what + ", even when idle"
}

// NotNow: some eligible node could hold what once GPUs are released, none
// can now (a wait reason).
func NotNow(what string) string {
	return "no eligible node has " + what + " free right now"
}

// GangNever: gang can never be placed, member pod fits nowhere, for why (a
// reject reason for every member).
func GangNever(gang, pod, why string) string {
	return fmt.Sprintf("gang %s can never be placed: member %s fits nowhere (%s)", gang, pod, why)
}

// GangShort: fit of the need more members gang needs fit now, with bound
// bound and minMember needed (a wait reason for every member).
func GangShort(gang string, fit, need int, bound, minMember uint32) string {
	return fmt.Sprintf("gang %s: %d of the %d more members needed fit now (%d bound, minMember %d); all or nothing, so none is placed yet", gang, fit, need, bound, minMember)
}

// GangPlacedWithout: gang is placed without this member, fit members fit,
// need were needed (a wait reason for the members left over).
func GangPlacedWithout(gang string, fit, need int) string {
	return fmt.Sprintf("gang %s is placed without this member (%d of %d needed fit); it waits for room", gang, fit, need)
}

// TenantLimit: the pod's tenant holds held of its limit GPUs and the pod
// needs count more (a wait reason; see sdk.Cluster.OverTenantLimit).
func TenantLimit(tenant string, held, limit, count uint32) string {
	return fmt.Sprintf("tenant %s holds %d of its limit %d GPUs (GPUTenant %s: spec.limit); this pod needs %d more", tenant, held, limit, tenant, count)
}

// PreemptionBlocked: protected pods of lower priority the pod could preempt
// are protected by a PodDisruptionBudget (appended to a wait reason).
func PreemptionBlocked(protected int) string {
	return fmt.Sprintf("%d pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now", protected)
}

// PreemptionMinimumRuntime: young pods of lower priority the pod could
// preempt are within their minimum runtime, and the first is past it in
// seconds (appended to a wait reason, after PreemptionBlocked when both
// apply).
func PreemptionMinimumRuntime(young int, seconds uint64) string {
	return fmt.Sprintf("%d pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in %d s)", young, seconds)
}

// ClaimRequest is one request of a DRA claim, as what is missing: `2
// device(s) for claim ml/train request "gpus" (8 candidate(s) on eligible
// nodes)`: count is its first alternative's, candidates how many of that
// alternative's candidates sit on nodes the pod may use. Framed by Never or
// NotNow.
func ClaimRequest(claim, request string, count, candidates uint32) string {
	return fmt.Sprintf("%d device(s) for claim %s request %s (%d candidate(s) on eligible nodes)", count, claim, Quote(request), candidates)
}

// ClaimsTogether is a DRA pod's claims taken together (asked, an Asked
// phrase), when each request alone could be served but not all at once:
// with constrained (some claim has constraints), `… within the claims'
// constraints`. Framed by Never or NotNow.
func ClaimsTogether(asked string, constrained bool) string {
	if constrained {
		return asked + " within the claims' constraints"
	}
	return asked
}

// ClaimsMostFree is what follows a NotNow of a ClaimRequest: the most of its
// candidates free on one eligible node.
func ClaimsMostFree(most uint32) string {
	return fmt.Sprintf("at most %d free on any eligible node", most)
}

// Quote writes s in double quotes the way Rust's `{:?}` writes a string (the
// Rust SDK quotes MIG profiles so): `\"`, `\\`, `\t`, `\r`, `\n`, `\0`
// escaped; control, unprintable and combining (Grapheme_Extend) characters
// as `\u{hex}`; the rest as they are.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			// Not UTF-8 (a WIT string always is): keep the byte.
			b.WriteByte(s[0])
			s = s[1:]
			continue
		}
		s = s[size:]
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case '\n':
			b.WriteString(`\n`)
		case 0:
			b.WriteString(`\0`)
		default:
			grapheme := unicode.In(r, unicode.Mn, unicode.Me, unicode.Other_Grapheme_Extend)
			if grapheme || (r < 0x80 && !strconv.IsPrint(r)) || (r >= 0x80 && !unicode.IsPrint(r)) {
				b.WriteString(`\u{` + strconv.FormatInt(int64(r), 16) + `}`)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
