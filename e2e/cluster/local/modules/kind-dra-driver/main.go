// Command kind-dra-driver is fitgate's fake DRA driver for the offline kind cluster
// (e2e/cluster/kind): a real kubelet plugin, built on
// k8s.io/dynamic-resource-allocation/kubeletplugin. It runs as a DaemonSet, one pod per
// node, and
//   - registers with the kubelet (plugin registration socket) and serves
//     NodePrepareResources / NodeUnprepareResources;
//   - publishes the node's devices as ResourceSlices: four GPUs behind two PCIe roots, each
//     also offered as two MIG-style "3g" partitions that consume the GPU's shared counter
//     (a full GPU consumes all 7 slices of it, a partition 3, so a GPU is either whole or
//     partitioned), and two NICs, one per PCIe root; the same attributes the local
//     harness's fake driver publishes (index, model, resource.kubernetes.io/pcieRoot,
//     profile, parent; memory capacity);
//   - on prepare, writes a CDI spec per claim under /var/run/cdi whose devices set one
//     environment variable per allocated device in the container,
//     FITGATE_DEVICE_<DEVICE>=<namespace>/<claim>/<request> (as dra-example-driver tells a
//     container its GPUs), and returns those CDI device IDs to the kubelet; on unprepare,
//     removes the spec.
//
// Test infrastructure only: the devices do not exist.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const (
	pcieRoot   = resourceapi.QualifiedName("resource.kubernetes.io/pcieRoot")
	cdiVendor  = "kind.fitgate.io"
	cdiClass   = "device"
	gpus       = 4
	perRoot    = 2
	gpuSlices  = 7
	migSlices  = 3
	migPerGPU  = 2
	nics       = 2
	envPrefix  = "FITGATE_DEVICE_"
	specPrefix = "kind.fitgate.io-claim-"
)

type driver struct {
	name   string
	node   string
	cdiDir string
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
func num(i int64) resourceapi.DeviceAttribute  { return resourceapi.DeviceAttribute{IntValue: &i} }

func counter(n int) map[string]resourceapi.Counter {
	return map[string]resourceapi.Counter{"slices": {Value: resource.MustParse(fmt.Sprint(n))}}
}

// devices: the node's GPUs, their partitions and NICs; counters: one set per GPU.
func inventory() ([]resourceapi.Device, []resourceapi.CounterSet) {
	var devices []resourceapi.Device
	var sets []resourceapi.CounterSet
	for g := 0; g < gpus; g++ {
		set := fmt.Sprintf("gpu-%d-slices", g)
		root := fmt.Sprintf("pci%d", g/perRoot)
		sets = append(sets, resourceapi.CounterSet{Name: set, Counters: counter(gpuSlices)})
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", g),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": str("gpu"), "index": num(int64(g)), "model": str("H100"), pcieRoot: str(root)},
			Capacity:         map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: counter(gpuSlices)}},
		})
		for k := 0; k < migPerGPU; k++ {
			devices = append(devices, resourceapi.Device{
				Name: fmt.Sprintf("gpu-%d-3g-%d", g, k),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type": str("mig"), "profile": str("3g"), "parent": str(fmt.Sprintf("gpu-%d", g)),
					"model": str("H100"), pcieRoot: str(root)},
				Capacity:         map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}},
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: counter(migSlices)}},
			})
		}
	}
	for n := 0; n < nics; n++ {
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("nic-%d", n),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": str("nic"), "index": num(int64(n)), "model": str("CX7"), pcieRoot: str(fmt.Sprintf("pci%d", n))},
		})
	}
	return devices, sets
}

func envName(device string) string {
	return envPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(device))
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, specPrefix+string(uid)+".json")
}

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		out[claim.UID] = d.prepare(ctx, claim)
	}
	return out, nil
}

func (d *driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: not allocated", claim.Namespace, claim.Name)}
	}
	type cdiDevice struct {
		Name           string              `json:"name"`
		ContainerEdits map[string][]string `json:"containerEdits"`
	}
	var cdiDevices []cdiDevice
	var result kubeletplugin.PrepareResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		if r.Pool != d.node {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is in pool %s, not this node's (%s)",
				claim.Namespace, claim.Name, r.Device, r.Pool, d.node)}
		}
		name := string(claim.UID) + "-" + r.Device
		cdiDevices = append(cdiDevices, cdiDevice{Name: name, ContainerEdits: map[string][]string{
			"env": {fmt.Sprintf("%s=%s/%s/%s", envName(r.Device), claim.Namespace, claim.Name, r.Request)}}})
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{cdiVendor + "/" + cdiClass + "=" + name}})
	}
	spec := map[string]any{"cdiVersion": "0.6.0", "kind": cdiVendor + "/" + cdiClass, "devices": cdiDevices}
	data, err := json.Marshal(spec)
	if err == nil {
		tmp := d.specPath(claim.UID) + ".tmp"
		if err = os.WriteFile(tmp, data, 0o644); err == nil {
			err = os.Rename(tmp, d.specPath(claim.UID))
		}
	}
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: writing CDI spec: %w", claim.Namespace, claim.Name, err)}
	}
	klog.FromContext(ctx).Info("prepared", "claim", klog.KObj(claim), "devices", len(result.Devices))
	return result
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		err := os.Remove(d.specPath(c.UID))
		if os.IsNotExist(err) {
			err = nil
		}
		out[c.UID] = err
		klog.FromContext(ctx).Info("unprepared", "claim", c.NamespacedName, "err", err)
	}
	return out, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (d *driver) WatchHealthStatus(ctx context.Context, _ chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done()
	return nil
}

func main() {
	klog.InitFlags(nil)
	name := flag.String("driver-name", "dra.kind.fitgate.io", "DRA driver name")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where CDI specs are written")
	flag.Parse()
	node := os.Getenv("NODE_NAME")
	if node == "" {
		klog.Fatal("NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := rest.InClusterConfig()
	if err != nil {
		klog.Fatalf("in-cluster config: %v", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	dataDir := filepath.Join("/var/lib/kubelet/plugins", *name)
	for _, dir := range []string{*cdiDir, dataDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			klog.Fatalf("creating %s: %v", dir, err)
		}
	}
	d := &driver{name: *name, node: node, cdiDir: *cdiDir}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(*name), kubeletplugin.NodeName(node), kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(dataDir))
	if err != nil {
		klog.Fatalf("starting the kubelet plugin: %v", err)
	}
	defer helper.Stop()
	devices, sets := inventory()
	// A pool with shared counters is two slices: one with the devices, one with the sets.
	pool := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: devices}, {SharedCounters: sets}}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: pool}}); err != nil {
		klog.Fatalf("publishing ResourceSlices: %v", err)
	}
	klog.Info("serving", "driver", *name, "node", node, "devices", len(devices))
	<-ctx.Done()
}
