package main

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// requestCount is how many requests of one verb on one resource the API
// server answered.
type requestCount struct {
	what  string // e.g. "POST pods/binding"
	count int64
}

// apiRequests reads the API server's apiserver_request_total, summed over
// response codes, scopes and components, by verb and resource, and its
// apiserver_terminated_watchers_total by resource.
func apiRequests(ctx context.Context, client kubernetes.Interface) (map[string]int64, error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's /metrics: %w", err)
	}
	counts := map[string]int64{}
	scanner := bufio.NewScanner(strings.NewReader(string(raw)))
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		metric, _, _ := strings.Cut(line, "{")
		if metric != "apiserver_request_total" && metric != "apiserver_terminated_watchers_total" {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		labels := parseLabels(line[len(metric)+1 : end])
		value, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", metric, line, err)
		}
		what := labels["resource"]
		if labels["subresource"] != "" {
			what += "/" + labels["subresource"]
		}
		if what == "" {
			continue // /metrics, /healthz and other paths
		}
		if metric == "apiserver_terminated_watchers_total" {
			// Watches the API server closed because their client read too slowly.
			counts["watches of "+what+" closed as unresponsive"] += int64(value)
			continue
		}
		counts[labels["verb"]+" "+what] += int64(value)
	}
	return counts, scanner.Err()
}

// parseLabels splits a Prometheus label set: name="value",... (values
// here hold no escaped quotes).
func parseLabels(s string) map[string]string {
	labels := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		name := s[:eq]
		rest := s[eq+2:]
		q := strings.IndexByte(rest, '"')
		if q < 0 {
			break
		}
		labels[name] = rest[:q]
		s = strings.TrimPrefix(rest[q+1:], ",")
	}
	return labels
}

// requestsDuring is what after counts beyond before, largest first; WATCH
// and LIST requests of the informers already running are not among them.
func requestsDuring(before, after map[string]int64) []requestCount {
	var out []requestCount
	for what, n := range after {
		if d := n - before[what]; d > 0 {
			out = append(out, requestCount{what, d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].count != out[j].count {
			return out[i].count > out[j].count
		}
		return out[i].what < out[j].what
	})
	return out
}

// formatRequests writes the counts as "1000 POST pods, 1000 POST pods/binding".
func formatRequests(counts []requestCount) string {
	if len(counts) == 0 {
		return "none"
	}
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%d %s", c.count, c.what)
	}
	return strings.Join(parts, ", ")
}
