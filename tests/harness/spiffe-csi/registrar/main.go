// registrar registers a CSI driver with the kubelet the way node-driver-registrar does
// (github.com/kubernetes-csi/node-driver-registrar is not served by the module proxy): it serves
// the kubelet's plugin registration API (k8s.io/kubelet/pkg/apis/pluginregistration/v1) on a
// socket in the kubelet's plugins_registry folder, where the kubelet's plugin watcher finds it,
// answers GetInfo with the driver's name and CSI endpoint, and logs the kubelet's verdict.
//
//	registrar -registration-socket <kubelet root>/plugins_registry/csi.spiffe.io-reg.sock \
//	          -plugin-name csi.spiffe.io -csi-endpoint <path of the driver's csi.sock>
//
// It removes its socket on SIGTERM/SIGINT, which unregisters the driver.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type server struct {
	registration.UnimplementedRegistrationServer
	name, endpoint string
}

func (s *server) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	log.Printf("GetInfo: %s at %s", s.name, s.endpoint)
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              s.name,
		Endpoint:          s.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (s *server) NotifyRegistrationStatus(
	_ context.Context, status *registration.RegistrationStatus,
) (*registration.RegistrationStatusResponse, error) {
	if status.PluginRegistered {
		log.Printf("registered with the kubelet")
	} else {
		log.Printf("the kubelet refused the registration: %s", status.Error)
	}
	return &registration.RegistrationStatusResponse{}, nil
}

func main() {
	socket := flag.String("registration-socket", "", "the socket to serve, in the kubelet's plugins_registry")
	name := flag.String("plugin-name", "csi.spiffe.io", "the CSI driver's name")
	endpoint := flag.String("csi-endpoint", "", "the path of the driver's CSI socket")
	flag.Parse()
	if *socket == "" || *endpoint == "" {
		log.Fatal("usage: registrar -registration-socket PATH -csi-endpoint PATH [-plugin-name NAME]")
	}
	_ = os.Remove(*socket)
	listener, err := net.Listen("unix", *socket)
	if err != nil {
		log.Fatalf("listening on %s: %v", *socket, err)
	}
	grpcServer := grpc.NewServer()
	registration.RegisterRegistrationServer(grpcServer, &server{name: *name, endpoint: *endpoint})
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		grpcServer.Stop()
	}()
	log.Printf("serving plugin registration for %s on %s", *name, *socket)
	if err := grpcServer.Serve(listener); err != nil {
		log.Printf("serve: %v", err)
	}
	_ = os.Remove(*socket)
}
