package main

// The DRA scenario (--scenario dra): GPUs published as NVIDIA's DRA driver
// publishes them, one ResourceSlice per node, and pods asking through
// ResourceClaims; after each run, every claim and binding is checked.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

const (
	// The driver, its DeviceClass and the pod's name for its claim.
	draDriver = "gpu.nvidia.com"
	draClass  = "gpu.nvidia.com"
	podClaim  = "gpu"
	// The ResourceClaimTemplate of --dra-claims template.
	claimTemplate = "one-gpu"
)

// Scenarios and the ways a DRA pod names its claim.
const (
	scenarioGPUs       = "gpus"
	scenarioDRA        = "dra"
	claimsByName       = "name"
	claimsFromTemplate = "template"
)

// createDeviceClass makes the DeviceClass every claim asks for.
func createDeviceClass(ctx context.Context, client kubernetes.Interface) error {
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == '%s'", draDriver)},
		}}},
	}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating DeviceClass %s: %w", draClass, err)
	}
	return nil
}

// createSlice publishes a node's GPUs as NVIDIA's driver does: one pool
// named after the node, devices gpu-0..gpu-7.
func createSlice(ctx context.Context, client kubernetes.Interface, node string) error {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	devices := make([]resourceapi.Device, gpusPerNode)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":        str("gpu"),
				"uuid":        str(fmt.Sprintf("GPU-%s-%d", node, i)),
				"productName": str(h100),
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse("80Gi")},
			},
		}
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + draDriver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   draDriver,
			NodeName: &node,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ResourceSlice %s: %w", slice.Name, err)
	}
	return nil
}

// oneGPU is the spec of every claim: exactly one device of the class.
func oneGPU() resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: podClaim,
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: draClass,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           1,
		},
	}}}}
}

// createClaims makes what the pods will name before any pod exists: a claim
// per pod (named as the pod), or the one template.
func createClaims(ctx context.Context, client kubernetes.Interface, mode string, names []string) error {
	if mode == claimsFromTemplate {
		template := &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: claimTemplate, Namespace: namespace},
			Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: oneGPU()},
		}
		if _, err := client.ResourceV1().ResourceClaimTemplates(namespace).Create(ctx, template, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ResourceClaimTemplate %s: %w", claimTemplate, err)
		}
		return nil
	}
	return parallel(32, len(names), func(i int) error {
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: namespace},
			Spec:       oneGPU(),
		}
		if _, err := client.ResourceV1().ResourceClaims(namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ResourceClaim %s: %w", names[i], err)
		}
		return nil
	})
}

// useClaim makes pod ask for one GPU through its claim: the claim named as
// the pod, or one made from the template.
func useClaim(pod *corev1.Pod, mode string) {
	ref := corev1.PodResourceClaim{Name: podClaim}
	if mode == claimsFromTemplate {
		name := claimTemplate
		ref.ResourceClaimTemplateName = &name
	} else {
		name := pod.Name
		ref.ResourceClaimName = &name
	}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{ref}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: podClaim}}
}

// claimOf is the name of the claim a pod uses, or "" while a template's
// claim is not made yet.
func claimOf(pod *corev1.Pod) string {
	for _, ref := range pod.Spec.ResourceClaims {
		if ref.Name != podClaim {
			continue
		}
		if ref.ResourceClaimName != nil {
			return *ref.ResourceClaimName
		}
		for _, status := range pod.Status.ResourceClaimStatuses {
			if status.Name == podClaim && status.ResourceClaimName != nil {
				return *status.ResourceClaimName
			}
		}
	}
	return ""
}

// draCheck is the check after a run: every bound pod's claim allocated
// once, to one device of the pod's node, reserved for the pod alone; no
// device in two claims; no claim allocated for a pod that is not bound.
// It returns what it checked, or every problem found.
func draCheck(ctx context.Context, client kubernetes.Interface) (claims, devices int, problems []string, err error) {
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, nil, err
	}
	claimList, err := client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, nil, err
	}
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, nil, err
	}
	nodes := map[string]*corev1.Node{}
	for i := range nodeList.Items {
		nodes[nodeList.Items[i].Name] = &nodeList.Items[i]
	}
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claimList.Items {
		byName[claimList.Items[i].Name] = &claimList.Items[i]
	}

	usedBy := map[string]string{} // claim → the bound pod using it
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == "" {
			continue
		}
		name := claimOf(pod)
		claim := byName[name]
		switch {
		case name == "":
			problems = append(problems, fmt.Sprintf("pod %s is bound to %s, but no claim of its is recorded", pod.Name, pod.Spec.NodeName))
			continue
		case claim == nil:
			problems = append(problems, fmt.Sprintf("pod %s is bound to %s, but its claim %s does not exist", pod.Name, pod.Spec.NodeName, name))
			continue
		case usedBy[name] != "":
			problems = append(problems, fmt.Sprintf("claim %s is used by two bound pods, %s and %s", name, usedBy[name], pod.Name))
			continue
		}
		usedBy[name] = pod.Name
		problems = append(problems, checkClaim(pod, claim, nodes[pod.Spec.NodeName])...)
	}

	holder := map[string]string{} // driver/pool/device → claim
	for i := range claimList.Items {
		claim := &claimList.Items[i]
		if claim.Status.Allocation == nil {
			continue
		}
		claims++
		if usedBy[claim.Name] == "" {
			problems = append(problems, fmt.Sprintf("claim %s is allocated, but no bound pod uses it", claim.Name))
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			if other, taken := holder[key]; taken {
				problems = append(problems, fmt.Sprintf("device %s is allocated to two claims, %s and %s", key, other, claim.Name))
				continue
			}
			holder[key] = claim.Name
		}
	}
	sort.Strings(problems)
	return claims, len(holder), problems, nil
}

// checkClaim checks the claim of a pod bound to node.
func checkClaim(pod *corev1.Pod, claim *resourceapi.ResourceClaim, node *corev1.Node) []string {
	where := fmt.Sprintf("claim %s of pod %s (bound to %s)", claim.Name, pod.Name, pod.Spec.NodeName)
	allocation := claim.Status.Allocation
	if allocation == nil {
		return []string{where + " is not allocated"}
	}
	var problems []string
	results := allocation.Devices.Results
	if len(results) != 1 {
		problems = append(problems, fmt.Sprintf("%s has %d devices allocated, not 1", where, len(results)))
	}
	for _, r := range results {
		if r.Request != podClaim || r.Driver != draDriver || r.Pool != pod.Spec.NodeName {
			problems = append(problems, fmt.Sprintf("%s has device %s/%s/%s for request %q: not of the pod's node", where, r.Driver, r.Pool, r.Device, r.Request))
		}
	}
	switch {
	case node == nil:
		problems = append(problems, where+": the node does not exist")
	case allocation.NodeSelector == nil:
		problems = append(problems, where+": the allocation has no node selector")
	default:
		selector, err := nodeaffinity.NewNodeSelector(allocation.NodeSelector)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: the allocation's node selector is invalid: %v", where, err))
		} else if !selector.Match(node) {
			problems = append(problems, where+": the allocation's node selector does not select the pod's node")
		}
	}
	reserved := claim.Status.ReservedFor
	if len(reserved) != 1 || reserved[0].Resource != "pods" || reserved[0].UID != pod.UID {
		var got []string
		for _, r := range reserved {
			got = append(got, fmt.Sprintf("%s/%s (%s)", r.Resource, r.Name, r.UID))
		}
		problems = append(problems, fmt.Sprintf("%s is reserved for [%s], not the pod alone (%s)", where, strings.Join(got, ", "), pod.UID))
	}
	return problems
}

// verifyDRA runs draCheck and upstream's (control-plane dra-check: the
// devices exist and match the class, through k8s.io/dynamic-resource-allocation)
// and writes both reports into dir; an error names every problem.
func verifyDRA(ctx context.Context, client kubernetes.Interface, controlPlane, kubeconfig, dir string) (string, error) {
	claims, devices, problems, err := draCheck(ctx, client)
	if err != nil {
		return "", fmt.Errorf("checking the claims: %w", err)
	}
	report := fmt.Sprintf("%d claims allocated, %d devices, %d problems\n%s", claims, devices, len(problems), strings.Join(problems, "\n"))
	if err := os.WriteFile(filepath.Join(dir, "dra-check.txt"), []byte(report), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, controlPlane, "dra-check", "--kubeconfig", kubeconfig, "--namespace", namespace)
	upstream, upstreamErr := cmd.CombinedOutput()
	if err := os.WriteFile(filepath.Join(dir, "dra-check-upstream.json"), upstream, 0o644); err != nil {
		return "", err
	}
	if len(problems) > 0 {
		shown := problems
		if len(shown) > 20 {
			shown = shown[:20]
		}
		return "", fmt.Errorf("DRA CHECK FAILED: %d problems (all in %s/dra-check.txt):\n      %s",
			len(problems), dir, strings.Join(shown, "\n      "))
	}
	if upstreamErr != nil {
		return "", fmt.Errorf("DRA CHECK FAILED: control-plane dra-check: %v (its report: %s/dra-check-upstream.json)\n%s",
			upstreamErr, dir, upstream)
	}
	return fmt.Sprintf("claims checked: %d allocated, %d distinct devices, each bound pod on its claim's node; upstream's dra-check agrees", claims, devices), nil
}
