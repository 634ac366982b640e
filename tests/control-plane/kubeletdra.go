package main

// control-plane kubelet-dra: the kubelet's own DRA manager
// (k8s.io/kubernetes/pkg/kubelet/cm/dra) prepares pods' ResourceClaims as the
// kubelet of NODE does before it starts them. The driver it talks to is a
// stub of NVIDIA's kubelet plugin (driver gpu.nvidia.com), served by
// upstream's k8s.io/dynamic-resource-allocation/kubeletplugin on Unix sockets
// in a temporary directory and registered through the kubelet's plugin
// manager (k8s.io/kubernetes/pkg/kubelet/pluginmanager) watching that
// directory: registration, version negotiation, the claim checks and the
// gRPC calls are all the kubelet's code.
//
// The manager reads each claim and refuses a pod that is not in its
// reservedFor, a claim that is not allocated, a driver that is not
// registered, and whatever the plugin refuses. The stub refuses, as NVIDIA's
// driver does, a device outside the node's pool (pool name = node name) or
// missing from the node's ResourceSlices, and a device another prepared
// claim holds. It answers CDI IDs as NVIDIA's driver names them.
//
// All pods are prepared first (as if running together on the node), then
// each container's CDI devices are read back from the manager, then every
// pod is unprepared.
//
//	control-plane kubelet-dra --kubeconfig PATH --node NODE --pod NS/NAME [--pod NS/NAME ...]
//	  JSON report on stdout; exit 1 if a pod was refused or could not be unprepared
//
// It is not the node's kubelet: it must never delete the node's
// ResourceSlices, which the kubelet's plugin manager does for the node
// getNode names when it starts and when a driver has been gone 30 s. So
// getNode says there is no Node object (the manager then retries in the
// background until it stops), and the reconcile loop, which unprepares the
// claims of pods no longer active, is left idle (no sources are ready).

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

const nvidiaDriver = "gpu.nvidia.com"

type kubeletReport struct {
	Node string      `json:"node"`
	Pods []podReport `json:"pods"`
}

type podReport struct {
	Pod      string `json:"pod"`
	UID      string `json:"uid"`
	NodeName string `json:"nodeName"`
	// Prepared: the manager prepared every claim of the pod.
	Prepared bool `json:"prepared"`
	// Error: the manager's error, verbatim.
	Error string `json:"error,omitempty"`
	// Claims: the pod's claims as the plugin prepared them.
	Claims []preparedClaim `json:"claims"`
	// Containers: container name → the CDI device IDs the manager hands
	// the container runtime.
	Containers     map[string][]string `json:"containers"`
	UnprepareError string              `json:"unprepareError,omitempty"`
}

type preparedClaim struct {
	Name    string           `json:"name"` // namespace/name
	UID     types.UID        `json:"uid"`
	Devices []preparedDevice `json:"devices"`
}

type preparedDevice struct {
	Request string   `json:"request"`
	Driver  string   `json:"driver"`
	Pool    string   `json:"pool"`
	Device  string   `json:"device"`
	CDIIDs  []string `json:"cdiIDs"`
}

type podRefs []types.NamespacedName

func (r *podRefs) String() string { return fmt.Sprint(*r) }

func (r *podRefs) Set(value string) error {
	namespace, name, ok := strings.Cut(value, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%q is not NAMESPACE/NAME", value)
	}
	*r = append(*r, types.NamespacedName{Namespace: namespace, Name: name})
	return nil
}

func kubeletDRA(args []string) int {
	fs := flag.NewFlagSet("kubelet-dra", flag.ContinueOnError)
	kubeconfigPath := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "the cluster's kubeconfig")
	node := fs.String("node", "", "the node whose kubelet prepares the pods (required)")
	var pods podRefs
	fs.Var(&pods, "pod", "NAMESPACE/NAME of a pod to prepare (repeatable; at least one)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *node == "" || len(pods) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "kubelet-dra: --node and at least one --pod are required")
		return 2
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfigPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra: %v\n", err)
		return 2
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := prepareAsKubelet(ctx, client, *node, pods)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-dra: %v\n", err)
		return 2
	}
	out, _ := json.MarshalIndent(report, "", "  ")
	fmt.Println(string(out))
	for _, pod := range report.Pods {
		if !pod.Prepared || pod.UnprepareError != "" {
			return 1
		}
	}
	return 0
}

// prepareAsKubelet starts the manager, the stub plugin and the plugin
// manager that registers one with the other, then prepares, reads back and
// unprepares the pods.
func prepareAsKubelet(ctx context.Context, client kubernetes.Interface, node string, refs []types.NamespacedName) (kubeletReport, error) {
	report := kubeletReport{Node: node, Pods: []podReport{}}
	dir, err := os.MkdirTemp("", "kubelet-dra-")
	if err != nil {
		return report, err
	}
	defer os.RemoveAll(dir)
	stateDir := filepath.Join(dir, "state")
	registryDir := filepath.Join(dir, "plugins_registry")
	pluginDir := filepath.Join(dir, "plugins", nvidiaDriver)
	for _, d := range []string{stateDir, registryDir, pluginDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return report, err
		}
	}

	manager, err := dra.NewManager(klog.FromContext(ctx), client, stateDir)
	if err != nil {
		return report, err
	}
	noNode := func(context.Context) (*v1.Node, error) {
		return nil, apierrors.NewNotFound(v1.Resource("nodes"), node)
	}
	if err := manager.Start(ctx, func() []*v1.Pod { return nil }, noNode, nil); err != nil {
		return report, err
	}
	defer manager.Stop()

	stub := &stubNvidiaPlugin{node: node, client: client, prepared: map[types.UID]preparedClaim{}, record: map[string]preparedClaim{}}
	helper, err := kubeletplugin.Start(ctx, stub,
		kubeletplugin.DriverName(nvidiaDriver),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node),
		kubeletplugin.RegistrarDirectoryPath(registryDir),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return report, fmt.Errorf("start the plugin: %w", err)
	}
	defer helper.Stop()

	// The kubelet's plugin manager finds the registration socket, asks it
	// for the driver's endpoint and versions, and hands them to the DRA
	// manager's handler. Its Event recorder is never used.
	watcher := pluginmanager.NewPluginManager(registryDir, nil)
	watcher.AddHandler(registerapi.DRAPlugin, manager.GetWatcherHandler())
	stop := make(chan struct{})
	defer close(stop)
	go watcher.Run(ctx, nil, stop)
	if err := waitRegistered(ctx, manager); err != nil {
		return report, err
	}

	pods := make([]*v1.Pod, 0, len(refs))
	for _, ref := range refs {
		pod, err := client.CoreV1().Pods(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return report, err
		}
		pods = append(pods, pod)
		result := podReport{
			Pod:        ref.String(),
			UID:        string(pod.UID),
			NodeName:   pod.Spec.NodeName,
			Claims:     []preparedClaim{},
			Containers: map[string][]string{},
		}
		if err := manager.PrepareResources(ctx, pod); err != nil {
			result.Error = err.Error()
		} else {
			result.Prepared = true
		}
		report.Pods = append(report.Pods, result)
	}
	for i, pod := range pods {
		result := &report.Pods[i]
		for _, name := range claimNames(pod) {
			if claim, ok := stub.preparedAs(pod.Namespace + "/" + name); ok {
				result.Claims = append(result.Claims, claim)
			}
		}
		if !result.Prepared {
			continue
		}
		containers := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
		for c := range containers {
			info, err := manager.GetResources(pod, &containers[c])
			if err != nil {
				result.Prepared = false
				result.Error = err.Error()
				break
			}
			ids := []string{}
			for _, device := range info.CDIDevices {
				ids = append(ids, device.Name)
			}
			result.Containers[containers[c].Name] = ids
		}
	}
	for i, pod := range pods {
		if err := manager.UnprepareResources(ctx, pod); err != nil {
			report.Pods[i].UnprepareError = err.Error()
		}
	}
	return report, nil
}

// waitRegistered waits until the manager has the driver's plugin.
func waitRegistered(ctx context.Context, manager *dra.Manager) error {
	plugins, ok := manager.GetWatcherHandler().(*draplugin.DRAPluginManager)
	if !ok {
		return errors.New("the DRA manager's registration handler is not a DRAPluginManager")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := plugins.GetPlugin(nvidiaDriver)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the plugin did not register with the kubelet's plugin manager in 30s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// claimNames: the names of the pod's ResourceClaims, as the kubelet resolves
// them (templates' through pod.status), the extended resources' claim last.
func claimNames(pod *v1.Pod) []string {
	var names []string
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err == nil && name != nil {
			names = append(names, *name)
		}
	}
	if pod.Status.ExtendedResourceClaimStatus != nil {
		names = append(names, pod.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	}
	return names
}

// === impl stubNvidiaPlugin ===

// stubNvidiaPlugin checks and "prepares" claims as NVIDIA's kubelet plugin
// for one node would, without a GPU: every device of its driver in a claim's
// allocation must be in the node's pool, published in the node's
// ResourceSlices (newest generation), and held by no other prepared claim.
type stubNvidiaPlugin struct {
	node   string
	client kubernetes.Interface

	mutex sync.Mutex
	// prepared: claim UID → what is prepared for it now.
	prepared map[types.UID]preparedClaim
	// record: namespace/name → what was prepared for the claim, kept after
	// it is unprepared, for the report.
	record map[string]preparedClaim
}

var _ kubeletplugin.DRAPlugin = &stubNvidiaPlugin{}

// preparedAs: what was prepared for the claim namespace/name.
func (p *stubNvidiaPlugin) preparedAs(name string) (preparedClaim, bool) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	claim, ok := p.record[name]
	return claim, ok
}

func (p *stubNvidiaPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	published, err := p.publishedDevices(ctx)
	if err != nil {
		return nil, err
	}
	p.mutex.Lock()
	defer p.mutex.Unlock()
	results := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		prepared, err := p.check(claim, published)
		if err != nil {
			results[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		p.prepared[claim.UID] = prepared
		p.record[prepared.Name] = prepared
		var devices []kubeletplugin.Device
		for _, d := range prepared.Devices {
			devices = append(devices, kubeletplugin.Device{
				Requests:     []string{d.Request},
				PoolName:     d.Pool,
				DeviceName:   d.Device,
				CDIDeviceIDs: d.CDIIDs,
			})
		}
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	return results, nil
}

// check: the claim's devices of this driver, or why they cannot be prepared
// on this node. Must be called with the mutex held.
func (p *stubNvidiaPlugin) check(claim *resourceapi.ResourceClaim, published map[string]bool) (preparedClaim, error) {
	prepared := preparedClaim{Name: claim.Namespace + "/" + claim.Name, UID: claim.UID, Devices: []preparedDevice{}}
	if claim.Status.Allocation == nil {
		return prepared, errors.New("the claim is not allocated")
	}
	holder := map[string]string{}
	for uid, other := range p.prepared {
		if uid == claim.UID {
			continue
		}
		for _, d := range other.Devices {
			holder[d.Pool+"/"+d.Device] = other.Name
		}
	}
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != nvidiaDriver {
			continue
		}
		key := result.Pool + "/" + result.Device
		switch {
		case result.Pool != p.node:
			return prepared, fmt.Errorf("device %s/%s is not in node %s's pool %q", result.Driver, key, p.node, p.node)
		case !published[result.Device]:
			return prepared, fmt.Errorf("device %s/%s is not in node %s's ResourceSlices", result.Driver, key, p.node)
		case holder[key] != "":
			return prepared, fmt.Errorf("device %s/%s is prepared for claim %s", result.Driver, key, holder[key])
		}
		prepared.Devices = append(prepared.Devices, preparedDevice{
			Request: result.Request,
			Driver:  result.Driver,
			Pool:    result.Pool,
			Device:  result.Device,
			CDIIDs:  []string{fmt.Sprintf("k8s.gpu.nvidia.com/claim=%s-%s", claim.UID, result.Device)},
		})
	}
	if len(prepared.Devices) == 0 {
		return prepared, fmt.Errorf("the allocation has no device of driver %s", nvidiaDriver)
	}
	return prepared, nil
}

// publishedDevices: the names of the devices in the node's pool, from the
// pool's newest generation of the driver's slices for the node.
func (p *stubNvidiaPlugin) publishedDevices(ctx context.Context) (map[string]bool, error) {
	selector := fields.Set{
		resourceapi.ResourceSliceSelectorDriver:   nvidiaDriver,
		resourceapi.ResourceSliceSelectorNodeName: p.node,
	}
	slices, err := p.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list the node's ResourceSlices: %w", err)
	}
	var newest int64
	for _, s := range slices.Items {
		if s.Spec.Pool.Name == p.node && s.Spec.Pool.Generation > newest {
			newest = s.Spec.Pool.Generation
		}
	}
	devices := map[string]bool{}
	for _, s := range slices.Items {
		if s.Spec.Pool.Name != p.node || s.Spec.Pool.Generation != newest {
			continue
		}
		for _, d := range s.Spec.Devices {
			devices[d.Name] = true
		}
	}
	return devices, nil
}

func (p *stubNvidiaPlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	results := map[types.UID]error{}
	for _, claim := range claims {
		delete(p.prepared, claim.UID)
		results[claim.UID] = nil
	}
	return results, nil
}

func (p *stubNvidiaPlugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (p *stubNvidiaPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
