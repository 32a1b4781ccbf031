// The node's SPIFFE CSI driver, github.com/spiffe/spiffe-csi v0.2.6 (the module proxy serves that
// version only, and refuses the version list: name it exactly), built from the Go module proxy,
// with two small programs of ours: registrar (registers the driver with the kubelet's plugin
// registration API: github.com/kubernetes-csi/node-driver-registrar is not served) and svidprobe
// (a static Workload API client for the node's test image, on go-spiffe).
module secureml.dev/tests/harness/spiffe-csi

go 1.26.0

tool github.com/spiffe/spiffe-csi/cmd/spiffe-csi-driver

require (
	github.com/spiffe/go-spiffe/v2 v2.6.0
	google.golang.org/grpc v1.79.3
	k8s.io/kubelet v0.36.3
)

require (
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/container-storage-interface/spec v1.9.0 // indirect
	github.com/go-jose/go-jose/v4 v4.1.3 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/zapr v1.3.0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/spiffe/spiffe-csi v0.2.6 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	golang.org/x/net v0.49.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.33.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
)
