package main

// kube-controller-manager's part the tests and the demo depend on, run in
// process once the API server is ready: the resourceclaim controller (it
// makes a pod's claims from ResourceClaimTemplates, records them in
// pod.status.resourceClaimStatuses, takes finished and deleted pods out of
// reservedFor, deallocates claims no pod is reserved for, and deletes the
// claims it made once their pod is done) — the same code kube-controller-manager
// runs, from k8s.io/kubernetes.

import (
	"context"
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
)

// knownControllers are the names --controllers accepts.
var knownControllers = []string{"resourceclaim"}

// startControllers starts the named controllers; they stop with ctx.
func startControllers(ctx context.Context, kubeconfig []byte, names []string) error {
	if len(names) == 0 {
		return nil
	}
	restConfig, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	restConfig.UserAgent = "kube-controller-manager/resourceclaim (wasmgpu control plane)"
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	logger := klog.FromContext(ctx).WithName("resourceclaim-controller")
	for _, name := range names {
		switch name {
		case "resourceclaim":
			controller, err := resourceclaim.NewController(logger, client,
				factory.Core().V1().Pods(),
				factory.Scheduling().V1beta1().PodGroups(),
				factory.Resource().V1().ResourceClaims(),
				factory.Resource().V1().ResourceClaimTemplates())
			if err != nil {
				return fmt.Errorf("starting the resourceclaim controller: %w", err)
			}
			go controller.Run(klog.NewContext(ctx, logger), 2)
		default:
			return fmt.Errorf("unknown controller %q (known: %v)", name, knownControllers)
		}
	}
	factory.Start(ctx.Done())
	return nil
}
