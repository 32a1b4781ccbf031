// Command fake-device-plugin advertises one extended resource of the fake NVIDIA GPU
// (enforcement/shim/fake) to a kubelet, over the kubelet's own device-plugin API (v1beta1), and
// gives each container that is allocated one what the NVIDIA container toolkit gives a container
// with a real GPU: the driver's libcuda.so.1 and libnvidia-ml.so.1 mounted into the image's
// library folder, and the driver's state; here also the fake driver's configuration variable.
//
//	fake-device-plugin -registry DIR -resource nvidia.com/mig-1g.10gb -count 1 \
//	    -mount HOST:CONTAINER[:rw] ... -env NAME=VALUE ...
//
// DIR is the kubelet's plugin registry folder (<root-dir>/plugins_registry): the plugin serves
// the kubelet's plugin-registration API (type DevicePlugin) and the device-plugin API on one
// socket there, and the kubelet's plugin watcher finds it. Not the kubelet's device-plugins folder:
// the kubelet keeps that at /var/lib/kubelet/device-plugins whatever its --root-dir, and several
// test nodes run on this machine. It runs until it is stopped.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registry "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type registration struct {
	registry.UnimplementedRegistrationServer
	resource, socket string
}

func (r *registration) GetInfo(context.Context, *registry.InfoRequest) (*registry.PluginInfo, error) {
	return &registry.PluginInfo{Type: registry.DevicePlugin, Name: r.resource, Endpoint: r.socket,
		SupportedVersions: []string{api.Version}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, status *registry.RegistrationStatus) (*registry.RegistrationStatusResponse, error) {
	if !status.PluginRegistered {
		log.Printf("the kubelet refused %s: %s", r.resource, status.Error)
	} else {
		log.Printf("registered %s", r.resource)
	}
	return &registry.RegistrationStatusResponse{}, nil
}

type plugin struct {
	api.UnimplementedDevicePluginServer
	resource string
	devices  []*api.Device
	mounts   []*api.Mount
	envs     map[string]string
}

func (p *plugin) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *api.Empty, stream api.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&api.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *api.AllocateRequest) (*api.AllocateResponse, error) {
	response := &api.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		log.Printf("allocate %s: %v", p.resource, container.DevicesIds)
		envs := map[string]string{}
		for k, v := range p.envs {
			envs[k] = v
		}
		response.ContainerResponses = append(response.ContainerResponses,
			&api.ContainerAllocateResponse{Envs: envs, Mounts: p.mounts})
	}
	return response, nil
}

func (p *plugin) PreStartContainer(context.Context, *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	return &api.PreStartContainerResponse{}, nil
}

func main() {
	var mounts, envs list
	dir := flag.String("registry", "", "the kubelet's plugin registry folder")
	resource := flag.String("resource", "", "the extended resource name")
	count := flag.Int("count", 1, "how many devices to advertise")
	flag.Var(&mounts, "mount", "HOST:CONTAINER[:rw], repeated")
	flag.Var(&envs, "env", "NAME=VALUE, repeated")
	flag.Parse()
	p := &plugin{resource: *resource, envs: map[string]string{}}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &api.Device{ID: fmt.Sprintf("fake-%d", i), Health: api.Healthy})
	}
	for _, m := range mounts {
		parts := strings.Split(m, ":")
		p.mounts = append(p.mounts, &api.Mount{
			HostPath: parts[0], ContainerPath: parts[1], ReadOnly: len(parts) < 3 || parts[2] != "rw"})
	}
	for _, e := range envs {
		name, value, _ := strings.Cut(e, "=")
		p.envs[name] = value
	}
	endpoint := strings.NewReplacer("/", "-", ".", "-").Replace(*resource) + ".sock"
	socket := filepath.Join(*dir, endpoint)
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatal(err)
	}
	server := grpc.NewServer()
	api.RegisterDevicePluginServer(server, p)
	registry.RegisterRegistrationServer(server, &registration{resource: *resource, socket: socket})
	log.Printf("serving %s (%d devices) at %s", *resource, *count, socket)
	log.Fatal(server.Serve(listener))
}
