package main

// The namespace controller empties a namespace being deleted, 5 s after the
// deletion: it deletes its pods and, once they are gone, every other
// namespaced object of every resource discovery lists; then it removes the
// namespace's "kubernetes" finalizer, and the namespace is gone.

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/namespace"
)

const (
	// kube-controller-manager's defaults: --concurrent-namespace-syncs and
	// --namespace-sync-period.
	namespaceWorkers    = 10
	namespaceSyncPeriod = 5 * time.Minute
)

func startNamespaceController(ctx context.Context, c *controllerContext) error {
	// Emptying a namespace takes many discovery and delete calls: as
	// kube-controller-manager does, this client's rate limits are lifted.
	config := c.config("namespace-controller")
	config.QPS *= 20
	config.Burst *= 100
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	metadataClient, err := metadata.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("namespace-controller"))
	controller := namespace.NewNamespaceController(ctx, client, metadataClient,
		client.Discovery().ServerPreferredNamespacedResources,
		c.informers.Core().V1().Namespaces(), namespaceSyncPeriod, v1.FinalizerKubernetes)
	go controller.Run(ctx, namespaceWorkers)
	return nil
}
