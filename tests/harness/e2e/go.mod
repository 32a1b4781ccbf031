// The end-to-end harness's own programs (tests/harness/build.sh e2e):
// - kfp-launcher-standin: a STAND-IN for KFP's launcher (ghcr.io/kubeflow/kfp-launcher), standard
//   library only: KFP's own launcher cannot be built here (the Go module proxy refuses the
//   github.com/kubeflow/pipelines root module);
// - fake-device-plugin: the fake NVIDIA GPU's resources on the kubelet's device-plugin API
//   (k8s.io/kubelet at the node's version, so Go's build cache serves what the kubelet compiled).
// build.sh also builds Argo's argoexec and workflow-controller (tests/harness/argo.py) from Argo's
// own module, the version on the `argoexec` line below (KFP 2.17's pin); no Argo source is kept here.
//
// argoexec: github.com/argoproj/argo-workflows/v4 v4.0.5
module secureml.dev/tests/harness/e2e

go 1.26.0

require (
	google.golang.org/grpc v1.79.3
	k8s.io/kubelet v0.36.3
)

require (
	golang.org/x/net v0.49.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.33.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
)
