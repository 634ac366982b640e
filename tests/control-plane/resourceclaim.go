package main

// The resourceclaim controller makes a pod's claims from
// ResourceClaimTemplates, records them in pod.status.resourceClaimStatuses,
// takes finished and deleted pods out of reservedFor, deallocates claims no
// pod is reserved for, and deletes the claims it made once their pod is done.

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
)

// Workers: kube-controller-manager's default is 50; two keep up with the
// tests.
const resourceClaimWorkers = 2

func startResourceClaimController(ctx context.Context, c *controllerContext) error {
	client, err := kubernetes.NewForConfig(c.config("resourceclaim-controller"))
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithName("resourceclaim-controller")
	controller, err := resourceclaim.NewController(logger, client,
		c.informers.Core().V1().Pods(),
		c.informers.Scheduling().V1beta1().PodGroups(),
		c.informers.Resource().V1().ResourceClaims(),
		c.informers.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		return err
	}
	go controller.Run(klog.NewContext(ctx, logger), resourceClaimWorkers)
	return nil
}
