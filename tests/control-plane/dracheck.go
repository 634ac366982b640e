package main

// control-plane dra-check: upstream's judgement of every allocated
// ResourceClaim in the cluster. Devices are read from the ResourceSlices by
// the consumer rules (the newest generation of each pool), selectors are
// compiled and evaluated by k8s.io/dynamic-resource-allocation/cel (what
// kube-scheduler's structured allocator and the API server use), and
// each allocation is checked: every device exists, matches its DeviceClass's
// and its request's selectors, the counts are the requests', the
// matchAttribute/distinctAttribute constraints hold, the node selector names
// the devices' node, and no device is allocated to two claims (adminAccess
// results aside).
//
//	control-plane dra-check --kubeconfig PATH [--namespace NS]   JSON summary on stdout; exit 1 on any problem

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	draCEL "k8s.io/dynamic-resource-allocation/cel"
)

type publishedDevice struct {
	node   string
	driver string
	device resourceapi.Device
}

type checkSummary struct {
	Claims   int      `json:"claims"`
	Devices  int      `json:"devices"`
	Problems []string `json:"problems"`
}

func draCheck(args []string) int {
	fs := flag.NewFlagSet("dra-check", flag.ContinueOnError)
	kubeconfigPath := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "the cluster's kubeconfig")
	namespace := fs.String("namespace", "", "check only the claims of this namespace (default: all)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfigPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dra-check: %v\n", err)
		return 2
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dra-check: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	summary, err := checkAllocations(ctx, client, *namespace)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dra-check: %v\n", err)
		return 2
	}
	out, _ := json.MarshalIndent(summary, "", "  ")
	fmt.Println(string(out))
	if len(summary.Problems) > 0 {
		return 1
	}
	return 0
}

func checkAllocations(ctx context.Context, client kubernetes.Interface, namespace string) (checkSummary, error) {
	summary := checkSummary{Problems: []string{}}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return summary, err
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return summary, err
	}
	claims, err := client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return summary, err
	}
	devices := publishedDevices(slices.Items)
	classByName := map[string]*resourceapi.DeviceClass{}
	for i := range classes.Items {
		classByName[classes.Items[i].Name] = &classes.Items[i]
	}
	holder := map[string]string{}
	for i := range claims.Items {
		claim := &claims.Items[i]
		if claim.Status.Allocation == nil {
			continue
		}
		summary.Claims++
		name := claim.Namespace + "/" + claim.Name
		problems := checkClaim(ctx, claim, devices, classByName)
		for _, result := range claim.Status.Allocation.Devices.Results {
			summary.Devices++
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			key := result.Driver + "/" + result.Pool + "/" + result.Device
			if other, taken := holder[key]; taken {
				problems = append(problems, fmt.Sprintf("device %s is allocated to %s too", key, other))
			}
			holder[key] = name
		}
		for _, p := range problems {
			summary.Problems = append(summary.Problems, name+": "+p)
		}
	}
	return summary, nil
}

// publishedDevices: driver/pool/device → the device, from each pool's newest
// generation.
func publishedDevices(slices []resourceapi.ResourceSlice) map[string]publishedDevice {
	newest := map[string]int64{}
	for _, s := range slices {
		key := s.Spec.Driver + "/" + s.Spec.Pool.Name
		if g, ok := newest[key]; !ok || s.Spec.Pool.Generation > g {
			newest[key] = s.Spec.Pool.Generation
		}
	}
	out := map[string]publishedDevice{}
	for _, s := range slices {
		pool := s.Spec.Driver + "/" + s.Spec.Pool.Name
		if s.Spec.Pool.Generation != newest[pool] {
			continue
		}
		for _, d := range s.Spec.Devices {
			node := ""
			if s.Spec.NodeName != nil {
				node = *s.Spec.NodeName
			}
			if d.NodeName != nil {
				node = *d.NodeName
			}
			out[pool+"/"+d.Name] = publishedDevice{node: node, driver: s.Spec.Driver, device: d}
		}
	}
	return out
}

type requestSpec struct {
	class     string
	selectors []resourceapi.DeviceSelector
	mode      resourceapi.DeviceAllocationMode
	count     int64
}

// requestOf finds `name` or `name/subrequest` in the claim's spec.
func requestOf(claim *resourceapi.ResourceClaim, name string) (requestSpec, bool) {
	parent, sub, hasSub := strings.Cut(name, "/")
	for _, r := range claim.Spec.Devices.Requests {
		if r.Name != parent {
			continue
		}
		if !hasSub && r.Exactly != nil {
			return requestSpec{r.Exactly.DeviceClassName, r.Exactly.Selectors, r.Exactly.AllocationMode, r.Exactly.Count}, true
		}
		for _, s := range r.FirstAvailable {
			if hasSub && s.Name == sub {
				return requestSpec{s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count}, true
			}
		}
	}
	return requestSpec{}, false
}

func checkClaim(ctx context.Context, claim *resourceapi.ResourceClaim,
	devices map[string]publishedDevice, classes map[string]*resourceapi.DeviceClass) []string {
	var problems []string
	results := claim.Status.Allocation.Devices.Results
	perRequest := map[string]int64{}
	nodes := map[string]bool{}
	chosen := map[string][]publishedDevice{}
	for _, result := range results {
		key := result.Driver + "/" + result.Pool + "/" + result.Device
		device, ok := devices[key]
		if !ok {
			problems = append(problems, fmt.Sprintf("device %s is not published", key))
			continue
		}
		nodes[device.node] = true
		perRequest[result.Request]++
		parent, _, _ := strings.Cut(result.Request, "/")
		chosen[parent] = append(chosen[parent], device)
		request, ok := requestOf(claim, result.Request)
		if !ok {
			problems = append(problems, fmt.Sprintf("result names request %q, which the claim does not have", result.Request))
			continue
		}
		class, ok := classes[request.class]
		if !ok {
			problems = append(problems, fmt.Sprintf("request %q names DeviceClass %q, which does not exist", result.Request, request.class))
			continue
		}
		selectors := append(append([]resourceapi.DeviceSelector{}, class.Spec.Selectors...), request.selectors...)
		for _, selector := range selectors {
			if selector.CEL == nil {
				continue
			}
			matches, err := celMatches(ctx, selector.CEL.Expression, device)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("device %s: selector %q: %v", key, selector.CEL.Expression, err))
			case !matches:
				problems = append(problems, fmt.Sprintf("device %s does not match selector %q of request %q", key, selector.CEL.Expression, result.Request))
			}
		}
	}
	for name, got := range perRequest {
		request, ok := requestOf(claim, name)
		if ok && request.mode != resourceapi.DeviceAllocationModeAll {
			want := request.count
			if want == 0 {
				want = 1
			}
			if got != want {
				problems = append(problems, fmt.Sprintf("request %q has %d devices, it asks %d", name, got, want))
			}
		}
	}
	if len(nodes) > 1 {
		problems = append(problems, fmt.Sprintf("devices on %d nodes", len(nodes)))
	}
	for node := range nodes {
		if !selectorNames(claim.Status.Allocation, node) {
			problems = append(problems, fmt.Sprintf("allocation.nodeSelector does not name node %q", node))
		}
	}
	problems = append(problems, checkConstraints(claim, chosen)...)
	return problems
}

// celMatches evaluates a selector on a device with upstream's compiler.
func celMatches(ctx context.Context, expression string, device publishedDevice) (bool, error) {
	result := draCEL.GetCompiler(draCEL.Features{}).CompileCELExpression(expression, draCEL.Options{})
	if result.Error != nil {
		return false, result.Error
	}
	matches, _, err := result.DeviceMatches(ctx, draCEL.Device{
		Driver:     device.driver,
		Attributes: device.device.Attributes,
		Capacity:   device.device.Capacity,
	})
	return matches, err
}

// selectorNames: the allocation's node selector matches node by name.
func selectorNames(allocation *resourceapi.AllocationResult, node string) bool {
	if allocation.NodeSelector == nil {
		return false
	}
	for _, term := range allocation.NodeSelector.NodeSelectorTerms {
		for _, field := range term.MatchFields {
			if field.Key == "metadata.name" && string(field.Operator) == "In" {
				for _, v := range field.Values {
					if v == node {
						return true
					}
				}
			}
		}
	}
	return false
}

func attribute(device publishedDevice, name resourceapi.FullyQualifiedName) (resourceapi.DeviceAttribute, bool) {
	if a, ok := device.device.Attributes[resourceapi.QualifiedName(name)]; ok {
		return a, true
	}
	domain, short, _ := strings.Cut(string(name), "/")
	if domain == device.driver {
		a, ok := device.device.Attributes[resourceapi.QualifiedName(short)]
		return a, ok
	}
	return resourceapi.DeviceAttribute{}, false
}

func checkConstraints(claim *resourceapi.ResourceClaim, chosen map[string][]publishedDevice) []string {
	var problems []string
	for i, c := range claim.Spec.Devices.Constraints {
		requests := c.Requests
		if len(requests) == 0 {
			for _, r := range claim.Spec.Devices.Requests {
				requests = append(requests, r.Name)
			}
		}
		var values []resourceapi.DeviceAttribute
		name := c.MatchAttribute
		if name == nil {
			name = c.DistinctAttribute
		}
		if name == nil {
			continue
		}
		for _, r := range requests {
			parent, _, _ := strings.Cut(r, "/")
			for _, d := range chosen[parent] {
				v, ok := attribute(d, *name)
				if !ok {
					problems = append(problems, fmt.Sprintf("constraints[%d]: device %s lacks %s", i, d.device.Name, *name))
					continue
				}
				values = append(values, v)
			}
		}
		for a := range values {
			for b := a + 1; b < len(values); b++ {
				equal := reflect.DeepEqual(values[a], values[b])
				if c.MatchAttribute != nil && !equal {
					problems = append(problems, fmt.Sprintf("constraints[%d]: matchAttribute %s differs", i, *name))
				}
				if c.DistinctAttribute != nil && equal {
					problems = append(problems, fmt.Sprintf("constraints[%d]: distinctAttribute %s repeats", i, *name))
				}
			}
		}
	}
	return problems
}
