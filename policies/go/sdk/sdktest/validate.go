package sdktest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	wt "wit_component/wasmgpu_policy_types"
)

// Verdict is the host's verdict on a round's decisions, as `wasmgpu policy
// validate --output json` prints it: what the controller would apply
// (Accepted, Preempting), the pods left for later (Waiting) or turned away
// (Rejected), and each decision it refuses (Refused), by name.
type Verdict struct {
	// No decision was refused.
	Valid      bool         `json:"valid"`
	Accepted   []Placement  `json:"accepted"`
	Preempting []Preempting `json:"preempting"`
	Waiting    []Deferred   `json:"waiting"`
	Rejected   []Deferred   `json:"rejected"`
	Refused    []Refused    `json:"refused"`
}

// Preempting is an accepted preemption: where the pod goes once its victims
// (namespace/name) are gone.
type Preempting struct {
	Placement Placement `json:"placement"`
	Victims   []string  `json:"victims"`
}

// Deferred is a pod left waiting or rejected, with the policy's reason, and
// its gang (namespace/name; "" when it is in none).
type Deferred struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
	Gang   string `json:"gang,omitempty"`
}

// Refused is a decision the host refused: its position in the decisions
// given, the pod it names ("" when the position names none), the decision
// in words, the rule it broke and the same in words (Why).
type Refused struct {
	Index    int    `json:"index"`
	Pod      string `json:"pod"`
	Decision string `json:"decision"`
	Reason   Reason `json:"reason"`
	Why      string `json:"why"`
}

func (r Refused) String() string {
	return fmt.Sprintf("decision [%d] (%s): %s", r.Index, r.Decision, r.Why)
}

// Reason is the rule a refused decision broke: its Kind (kebab-case, e.g.
// "wrong-count") and the rule's other fields as JSON gives them (numbers
// are float64), e.g. {"got": 1, "want": 4}.
type Reason struct {
	Kind   string
	Fields map[string]any
}

// UnmarshalJSON reads {"kind": "...", fields...}.
func (r *Reason) UnmarshalJSON(data []byte) error {
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	kind, ok := fields["kind"].(string)
	if !ok {
		return fmt.Errorf("a refusal's reason without a kind: %s", data)
	}
	delete(fields, "kind")
	*r = Reason{Kind: kind, Fields: fields}
	return nil
}

// ErrNoWasmgpu is Validate's error when there is no wasmgpu binary to run.
var ErrNoWasmgpu = errors.New("no wasmgpu binary to validate with: WASMGPU is not set and there is no wasmgpu on PATH " +
	"(build it with `make build` in the wasmgpu checkout, then set WASMGPU=target/release/wasmgpu, as an absolute path, or put it on PATH)")

// Validate holds decisions (a round of Allocate on s) to the host's own
// rules, the ones the controller applies to every round: it writes s as a
// snapshot file (SnapshotFile) and the decisions as JSON into a temporary
// directory and runs `wasmgpu policy validate --snapshot … --decisions …
// --output json` ($WASMGPU, else wasmgpu on PATH). It returns the verdict
// whether or not the host refused a decision (then Valid is false and
// Refused says which and why); the error is ErrNoWasmgpu when there is no
// binary, or says what failed (the binary's own message included).
func Validate(s *wt.Snapshot, decisions []wt.Decision) (Verdict, error) {
	binary := os.Getenv("WASMGPU")
	if binary == "" {
		found, err := exec.LookPath("wasmgpu")
		if err != nil {
			return Verdict{}, ErrNoWasmgpu
		}
		binary = found
	} else if _, err := exec.LookPath(binary); err != nil {
		return Verdict{}, fmt.Errorf("WASMGPU=%s: %v (set it to the wasmgpu binary, e.g. the checkout's target/release/wasmgpu after `make build`, as an absolute path)", binary, err)
	}
	dir, err := os.MkdirTemp("", "wasmgpu-validate-")
	if err != nil {
		return Verdict{}, fmt.Errorf("validate: a temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	snapshotPath := filepath.Join(dir, "snapshot.json")
	decisionsPath := filepath.Join(dir, "decisions.json")
	if err := os.WriteFile(snapshotPath, SnapshotFile(s), 0o644); err != nil {
		return Verdict{}, fmt.Errorf("validate: writing the snapshot: %w", err)
	}
	if err := os.WriteFile(decisionsPath, DecisionsJSON(decisions), 0o644); err != nil {
		return Verdict{}, fmt.Errorf("validate: writing the decisions: %w", err)
	}
	cmd := exec.Command(binary, "policy", "validate", "--snapshot", snapshotPath, "--decisions", decisionsPath, "--output", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	// Exit status 0: nothing refused; 2: something refused (the verdict is
	// printed either way); anything else is an error.
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 2) {
		return Verdict{}, fmt.Errorf("%s policy validate failed (%v): %s", binary, err, strings.TrimSpace(stderr.String()))
	}
	var verdict Verdict
	if err := json.Unmarshal(stdout.Bytes(), &verdict); err != nil {
		return Verdict{}, fmt.Errorf("%s policy validate printed no verdict (%v): %s", binary, err, strings.TrimSpace(stdout.String()+stderr.String()))
	}
	return verdict, nil
}

// ValidateOrSkip is Validate for a test: it skips t when there is no
// wasmgpu binary (saying why) and fails it on any other error.
func ValidateOrSkip(t testing.TB, s *wt.Snapshot, decisions []wt.Decision) Verdict {
	t.Helper()
	verdict, err := Validate(s, decisions)
	if errors.Is(err, ErrNoWasmgpu) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return verdict
}

// DecisionsJSON is decisions as `wasmgpu policy validate --decisions` reads
// them: a JSON array in serde's externally tagged form of the contract's
// Decision, positions into the snapshot as the policy returns them:
// [{"assign": {"pod": 0, "node": 1, "gpus": [0, 1]}}, {"wait": {"pod": 1,
// "reason": "…"}}, {"preempt": {"assignment": {…}, "victims": [0]}}].
func DecisionsJSON(decisions []wt.Decision) []byte {
	out := make([]map[string]any, 0, len(decisions))
	for _, d := range decisions {
		switch d.Tag() {
		case wt.Decision_Assign:
			out = append(out, map[string]any{"assign": assignment(d.Assign())})
		case wt.Decision_Preempt:
			p := d.Preempt()
			out = append(out, map[string]any{"preempt": map[string]any{"assignment": assignment(p.Assignment), "victims": nonNil(p.Victims)}})
		case wt.Decision_Wait:
			out = append(out, map[string]any{"wait": deferral(d.Wait())})
		default:
			out = append(out, map[string]any{"reject": deferral(d.Reject())})
		}
	}
	text, err := json.Marshal(out)
	if err != nil {
		panic("DecisionsJSON: " + err.Error()) // plain values: cannot happen
	}
	return text
}

// assignment is an Assignment as serde writes it (claims only when there
// are some, as the Rust type skips an empty list).
func assignment(a wt.Assignment) map[string]any {
	out := map[string]any{"pod": a.Pod, "node": a.Node, "gpus": nonNil(a.Gpus)}
	if len(a.Claims) > 0 {
		claims := []map[string]any{}
		for _, c := range a.Claims {
			claims = append(claims, map[string]any{"claim": c.Claim, "request": c.Request, "alternative": c.Alternative, "gpus": nonNil(c.Gpus)})
		}
		out["claims"] = claims
	}
	return out
}

func deferral(d wt.Deferral) map[string]any {
	return map[string]any{"pod": d.Pod, "reason": d.Reason}
}
