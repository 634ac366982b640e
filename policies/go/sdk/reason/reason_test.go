package reason

import (
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	wt "wit_component/wasmgpu_policy_types"
)

func request(shape wt.GpuShape) *wt.Request {
	return &wt.Request{Pod: "ns/p", Ask: wt.MakeAskGpus(shape)}
}

// claim is a claim of one request per (name, count), each with one
// alternative.
func claim(name string, requests map[string]uint32) wt.Claim {
	c := wt.Claim{Name: name}
	for r, count := range requests {
		c.Requests = append(c.Requests, wt.ClaimRequest{Name: r, Alternatives: []wt.Alternative{{Count: count}}})
	}
	return c
}

func TestTheRustSdksWords(t *testing.T) {
	none, some := witTypes.None[string](), witTypes.Some[string]
	for _, c := range []struct{ got, want string }{
		{Asked(request(wt.GpuShape{Count: 4, Model: none, MigProfile: none, MemoryMib: 40960})), "4 GPU(s) with at least 40960 MiB each"},
		{NotNow(Asked(request(wt.GpuShape{Count: 4, MemoryMib: 40960}))), "no eligible node has 4 GPU(s) with at least 40960 MiB each free right now"},
		{Asked(request(wt.GpuShape{Count: 2, Model: some("NVIDIA H100*")})), `2 GPU(s) matching "NVIDIA H100*"`},
		{Asked(request(wt.GpuShape{Count: 1, MemoryMib: 8192, Sharing: wt.Sharing_Shared})), "1 GPU(s) with 8192 MiB to share"},
		{Asked(request(wt.GpuShape{Count: 1, MigProfile: some("1g.10gb"), Model: some("*A100*")})), `1 MIG instance(s) of profile "1g.10gb" matching "*A100*"`},
		{AskedNvlink(request(wt.GpuShape{Count: 3})), "3 GPU(s) that are all NVLink peers of one another"},
		{Asked(&wt.Request{Ask: wt.MakeAskClaims(nil)}), "no devices: its claims are allocated already"},
		{Asked(&wt.Request{}), "no devices: its claims are allocated already"},
		{Asked(&wt.Request{Ask: wt.MakeAskClaims([]wt.Claim{claim("ml/train", map[string]uint32{"gpus": 2})})}), "2 device(s) for claim ml/train"},
		{Asked(&wt.Request{Ask: wt.MakeAskClaims([]wt.Claim{claim("ml/a", map[string]uint32{"gpus": 2}), claim("ml/b", map[string]uint32{"nic": 1})})}), "2 device(s) for claim ml/a, 1 device(s) for claim ml/b"},
		{Asked(&wt.Request{Ask: wt.MakeAskClaims([]wt.Claim{claim("ml/x", map[string]uint32{"a": 2, "b": 3}), {Name: "ml/none", Requests: []wt.ClaimRequest{{Name: "r"}}}})}), "5 device(s) for claim ml/x, 0 device(s) for claim ml/none"},
		{Never(ClaimRequest("ml/train", "gpus", 3, 2)), `no eligible node has 3 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes), even when idle`},
		{NotNow(ClaimRequest("ml/train", "gpu\"s", 2, 8)), `no eligible node has 2 device(s) for claim ml/train request "gpu\"s" (8 candidate(s) on eligible nodes) free right now`},
		{Never(ClaimsTogether("3 device(s) for claim ml/c", true)), "no eligible node has 3 device(s) for claim ml/c within the claims' constraints, even when idle"},
		{ClaimsTogether("2 device(s) for claim ml/both", false), "2 device(s) for claim ml/both"},
		{ClaimsMostFree(1), "at most 1 free on any eligible node"},
		{Never("2 GPU(s)"), "no eligible node has 2 GPU(s), even when idle"},
		{NoEligibleNode(), "no eligible node: node selector, affinity or taints exclude every GPU node"},
		{GangNever("ns/g", "ns/w", "why"), "gang ns/g can never be placed: member ns/w fits nowhere (why)"},
		{GangShort("ns/g", 1, 3, 2, 5), "gang ns/g: 1 of the 3 more members needed fit now (2 bound, minMember 5); all or nothing, so none is placed yet"},
		{GangPlacedWithout("ns/g", 2, 2), "gang ns/g is placed without this member (2 of 2 needed fit); it waits for room"},
		{TenantLimit("ml", 3, 3, 1), "tenant ml holds 3 of its limit 3 GPUs (GPUTenant ml: spec.limit); this pod needs 1 more"},
		{PreemptionBlocked(2), "2 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now"},
		{PreemptionMinimumRuntime(3, 2), "3 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 2 s)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestQuoteIsRustsDebug(t *testing.T) {
	for in, want := range map[string]string{
		"1g.10gb":        `"1g.10gb"`,
		`a"b\c`:          `"a\"b\\c"`,
		"t\tn\nr\r0\x00": `"t\tn\nr\r0\0"`,
		"\x01\x7f":       `"\u{1}\u{7f}"`,
		"é ü 漢":          `"é ü 漢"`,
		"\u00a0\u200b":   `"\u{a0}\u{200b}"`,
		"\u0301x\u0301":  `"\u{301}x\u{301}"`,
		"'":              `"'"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}
