package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// runScheduler is kube-scheduler itself, as cmd/kube-scheduler builds it.
func runScheduler(args []string) int {
	command := app.NewSchedulerCommand()
	command.SetArgs(args)
	os.Args = append([]string{"kube-scheduler"}, args...)
	return cli.Run(command)
}
