// Command fitgate-oracle answers DRA allocation questions with the upstream structured
// allocator (k8s.io/dynamic-resource-allocation/structured), the code kube-scheduler runs in
// its DynamicResources plugin. fitgate's fit engine is tested against it.
//
// It reads one JSON case per line on stdin and writes one JSON answer per line on stdout.
// The protocol is described in README.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// defaultTimeout is kube-scheduler's default DynamicResourcesArgs.filterTimeout.
const defaultTimeout = 10 * time.Second

// Case is one input line.
type Case struct {
	ID        json.RawMessage              `json:"id"`
	Mode      string                       `json:"mode"`
	Node      *v1.Node                     `json:"node"`
	Nodes     []*v1.Node                   `json:"nodes"`
	Slices    []*resourceapi.ResourceSlice `json:"slices"`
	Classes   []*resourceapi.DeviceClass   `json:"classes"`
	Allocated []*resourceapi.ResourceClaim `json:"allocated"`
	Claims    []*resourceapi.ResourceClaim `json:"claims"`
	Pods      []Pod                        `json:"pods"`
	Features  map[string]bool              `json:"features"`
	Repeat    int                          `json:"repeat"`
	TimeoutMS *int64                       `json:"timeout_ms"`
	Full      bool                         `json:"full"`
	// Filter, mode "gang": "first" (default) takes the first node that fits; "scheduler"
	// filters nodes as kube-scheduler does, until it has found as many feasible nodes as
	// its adaptive percentageOfNodesToScore asks for, then takes the first of them.
	Filter string `json:"filter"`
	// Expression, mode "cost": a device selector to compile.
	Expression string `json:"expression"`
}

var caseKeys = sets.New("id", "mode", "node", "nodes", "slices", "classes", "allocated",
	"claims", "pods", "features", "repeat", "timeout_ms", "full", "filter", "expression")

// Pod is one member of a gang in mode "gang".
type Pod struct {
	Name   string                       `json:"name"`
	Node   string                       `json:"node"`
	Claims []*resourceapi.ResourceClaim `json:"claims"`
}

// Result is one allocated device, flattened from DeviceRequestAllocationResult.
type Result struct {
	Request          string            `json:"request"`
	Driver           string            `json:"driver"`
	Pool             string            `json:"pool"`
	Device           string            `json:"device"`
	AdminAccess      bool              `json:"adminAccess"`
	ShareID          *string           `json:"shareID"`
	ConsumedCapacity map[string]string `json:"consumedCapacity"`
}

// NodeAnswer answers mode "node".
type NodeAnswer struct {
	ID          json.RawMessage                `json:"id"`
	Fits        bool                           `json:"fits"`
	Error       *string                        `json:"error"`
	Reason      string                         `json:"reason,omitempty"`
	Timeout     bool                           `json:"timeout,omitempty"`
	Results     [][]Result                     `json:"results"`
	Nanos       int64                          `json:"nanos"`
	NanosAll    []int64                        `json:"nanos_all,omitempty"`
	Invocations *int64                         `json:"invocations"`
	Allocator   string                         `json:"allocator,omitempty"`
	Allocations []resourceapi.AllocationResult `json:"allocations,omitempty"`
}

// PodAnswer is one pod of a GangAnswer.
type PodAnswer struct {
	Name     string     `json:"name"`
	Node     *string    `json:"node"`
	Error    *string    `json:"error"`
	Reason   string     `json:"reason,omitempty"`
	Timeouts int        `json:"timeouts,omitempty"`
	Results  [][]Result `json:"results"`
}

// GangAnswer answers mode "gang".
type GangAnswer struct {
	ID          json.RawMessage `json:"id"`
	Error       *string         `json:"error"`
	Pods        []PodAnswer     `json:"pods"`
	Placed      int             `json:"placed"`
	Nanos       int64           `json:"nanos"`
	Calls       int             `json:"calls"`
	Invocations *int64          `json:"invocations"`
	Allocator   string          `json:"allocator,omitempty"`
}

// CostAnswer answers mode "cost": the worst-case cost the API server estimates for a
// device selector (CompilationResult.MaxCost), or the compile error.
type CostAnswer struct {
	ID      json.RawMessage `json:"id"`
	Error   *string         `json:"error"`
	MaxCost uint64          `json:"max_cost"`
}

// InfoAnswer answers mode "info": what this binary was built from.
type InfoAnswer struct {
	ID        json.RawMessage   `json:"id"`
	Error     *string           `json:"error"`
	Go        string            `json:"go"`
	Modules   map[string]string `json:"modules"`
	Features  map[string]bool   `json:"features"`
	Allocator string            `json:"allocator"`
	Kube      string            `json:"kube"`
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if encErr := enc.Encode(answer(line)); encErr != nil {
				fmt.Fprintln(os.Stderr, "fitgate-oracle: encode:", encErr)
				os.Exit(1)
			}
			if flushErr := out.Flush(); flushErr != nil {
				os.Exit(1) // reader went away
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fitgate-oracle: read:", err)
			os.Exit(1)
		}
	}
}

func errText(err error) *string {
	s := err.Error()
	return &s
}

// answer decodes one case and runs it. It never panics: a panic inside the allocator is
// reported as the case's error.
func answer(line []byte) (ans any) {
	var id json.RawMessage
	defer func() {
		if r := recover(); r != nil {
			ans = NodeAnswer{ID: id, Error: errText(fmt.Errorf("panic: %v", r))}
		}
	}()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(line, &keys); err != nil {
		return NodeAnswer{Error: errText(fmt.Errorf("invalid input: %w", err))}
	}
	id = keys["id"]
	for key := range keys {
		if !caseKeys.Has(key) {
			return NodeAnswer{ID: id, Error: errText(fmt.Errorf("invalid input: unknown key %q", key))}
		}
	}
	var c Case
	if err := json.Unmarshal(line, &c); err != nil {
		return NodeAnswer{ID: id, Error: errText(fmt.Errorf("invalid input: %w", err))}
	}
	features, err := parseFeatures(c.Features)
	if err != nil {
		return NodeAnswer{ID: id, Error: errText(fmt.Errorf("invalid input: %w", err))}
	}
	timeout := defaultTimeout
	if c.TimeoutMS != nil {
		timeout = time.Duration(*c.TimeoutMS) * time.Millisecond
	}
	switch c.Mode {
	case "", "node":
		return runNode(&c, features, timeout)
	case "gang":
		return runGang(&c, features, timeout)
	case "info":
		return info(c.ID)
	case "cost":
		result := cel.GetCompiler(cel.Features{
			EnableConsumableCapacity: features.ConsumableCapacity,
			EnableListTypeAttributes: features.ListTypeAttributes,
		}).CompileCELExpression(c.Expression, cel.Options{})
		if result.Error != nil {
			return CostAnswer{ID: id, Error: errText(result.Error)}
		}
		return CostAnswer{ID: id, MaxCost: result.MaxCost}
	default:
		return NodeAnswer{ID: id, Error: errText(fmt.Errorf("invalid input: unknown mode %q", c.Mode))}
	}
}

// parseFeatures applies an override to the defaults. Keys are the allocator's Features
// field names ("ConsumableCapacity"), optionally with the gate's "DRA" prefix.
func parseFeatures(override map[string]bool) (structured.Features, error) {
	features := defaultFeatures
	fields := reflect.ValueOf(&features).Elem()
	for name, on := range override {
		field := fields.FieldByName(strings.TrimPrefix(name, "DRA"))
		if !field.IsValid() || field.Kind() != reflect.Bool {
			return features, fmt.Errorf("unknown feature %q, known: %s", name,
				strings.Join(featureNames(), ", "))
		}
		field.SetBool(on)
	}
	return features, nil
}

func featureNames() []string {
	t := reflect.TypeFor[structured.Features]()
	var names []string
	for i := range t.NumField() {
		if t.Field(i).Type.Kind() == reflect.Bool {
			names = append(names, t.Field(i).Name)
		}
	}
	return names
}

func featureMap(features structured.Features) map[string]bool {
	v := reflect.ValueOf(features)
	m := make(map[string]bool)
	for _, name := range featureNames() {
		m[name] = v.FieldByName(name).Bool()
	}
	return m
}

// celCaches keeps one compiled-expression cache per feature set for the life of the process,
// as kube-scheduler keeps one across scheduling cycles (it uses size 10; we keep more so
// that timings of repeated cases do not include recompiling).
var celCaches = map[cel.Features]*cel.Cache{}

func celCache(features structured.Features) *cel.Cache {
	key := cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	}
	if celCaches[key] == nil {
		celCaches[key] = cel.NewCache(1000, key)
	}
	return celCaches[key]
}

// classLister serves DeviceClasses from the case.
type classLister map[string]*resourceapi.DeviceClass

func newClassLister(classes []*resourceapi.DeviceClass) classLister {
	l := classLister{}
	for _, class := range classes {
		l[class.Name] = class
	}
	return l
}

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	list := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, class := range l {
		list = append(list, class)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := l[name]; ok {
		return class, nil
	}
	return nil, apierrors.NewNotFound(
		schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
}

// allocatedState builds what the scheduler passes to NewAllocator from the allocated claims:
// like its foreachAllocatedDevice, admin-access results do not count as in use, and with
// consumable capacity a result with a shareID is a share (plus its consumed capacity), not
// an exclusively allocated device. Claims without status.allocation are ignored.
func allocatedState(claims []*resourceapi.ResourceClaim, consumableCapacity bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if consumableCapacity && result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// withDefaults returns copies of the claims with the apiserver's defaulting for
// resource.k8s.io/v1 applied (allocationMode ExactCount, count 1), so hand-written claims
// behave like claims read back from a cluster.
func withDefaults(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, len(claims))
	for i, claim := range claims {
		claim = claim.DeepCopy()
		for j := range claim.Spec.Devices.Requests {
			request := &claim.Spec.Devices.Requests[j]
			if e := request.Exactly; e != nil {
				defaultMode(&e.AllocationMode, &e.Count)
			}
			for k := range request.FirstAvailable {
				sub := &request.FirstAvailable[k]
				defaultMode(&sub.AllocationMode, &sub.Count)
			}
		}
		out[i] = claim
	}
	return out
}

func defaultMode(mode *resourceapi.DeviceAllocationMode, count *int64) {
	if *mode == "" {
		*mode = resourceapi.DeviceAllocationModeExactCount
	}
	if *mode == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
		*count = 1
	}
}

// preFilter does the checks kube-scheduler's PreFilter makes before building the allocator;
// a failure makes the pod unschedulable (not an error).
func preFilter(claims []*resourceapi.ResourceClaim, classes classLister, features structured.Features) string {
	missing := func(request, class string) string {
		if _, err := classes.Get(class); err != nil {
			return fmt.Sprintf("request %s: device class %s does not exist", request, class)
		}
		return ""
	}
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			switch {
			case request.Exactly != nil:
				if reason := missing(request.Name, request.Exactly.DeviceClassName); reason != "" {
					return reason
				}
			case len(request.FirstAvailable) > 0:
				if !features.PrioritizedList {
					return fmt.Sprintf("resource claim %s, request %s: has subrequests, but the DRAPrioritizedList feature is disabled", claim.Name, request.Name)
				}
				for _, sub := range request.FirstAvailable {
					if reason := missing(request.Name+"/"+sub.Name, sub.DeviceClassName); reason != "" {
						return reason
					}
				}
			default:
				return fmt.Sprintf("resource claim %s, request %s: unknown request type", claim.Name, request.Name)
			}
		}
	}
	return ""
}

// outcome of one Allocate call, classified the way the scheduler's Filter does.
type outcome struct {
	results []resourceapi.AllocationResult // nil: does not fit
	reason  string                         // node-local reason why not (unschedulable)
	timeout bool                           // the filter timeout expired
	err     error                          // fatal: the scheduler aborts the pod
	nanos   int64
}

func allocate(a structured.Allocator, node *v1.Node, claims []*resourceapi.ResourceClaim, timeout time.Duration) (o outcome) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			o = outcome{err: fmt.Errorf("panic in Allocate: %v", r)}
		}
	}()
	start := time.Now()
	results, err := a.Allocate(ctx, node, claims)
	o.nanos = time.Since(start).Nanoseconds()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		o.timeout = true
		o.reason = "timed out trying to allocate devices"
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		o.reason = err.Error()
	case err != nil:
		o.err = err
	case len(results) != len(claims):
		o.reason = "cannot allocate all claims"
	default:
		o.results = results
	}
	return o
}

// invocations reads the allocator's statistics (GetStats on the implementation; its result
// type is internal to the module, hence reflection). Nil when not available.
func invocations(a structured.Allocator) *int64 {
	method := reflect.ValueOf(a).MethodByName("GetStats")
	if !method.IsValid() || method.Type().NumIn() != 0 || method.Type().NumOut() != 1 {
		return nil
	}
	stats := method.Call(nil)[0]
	if stats.Kind() != reflect.Struct {
		return nil
	}
	n := stats.FieldByName("NumAllocateOneInvocations")
	if !n.IsValid() || !n.CanInt() {
		return nil
	}
	count := n.Int()
	return &count
}

// implementation names the allocator variant NewAllocator picked (stable, incubating,
// experimental).
func implementation(a structured.Allocator) string {
	name := strings.TrimPrefix(fmt.Sprintf("%T", a), "*")
	name, _, _ = strings.Cut(name, ".")
	return name
}

func flatten(results []resourceapi.AllocationResult) [][]Result {
	if results == nil {
		return nil
	}
	out := make([][]Result, len(results))
	for i, allocation := range results {
		out[i] = make([]Result, 0, len(allocation.Devices.Results))
		for _, r := range allocation.Devices.Results {
			flat := Result{
				Request:     r.Request,
				Driver:      r.Driver,
				Pool:        r.Pool,
				Device:      r.Device,
				AdminAccess: r.AdminAccess != nil && *r.AdminAccess,
			}
			if r.ShareID != nil {
				share := string(*r.ShareID)
				flat.ShareID = &share
			}
			if r.ConsumedCapacity != nil {
				flat.ConsumedCapacity = make(map[string]string, len(r.ConsumedCapacity))
				for name, q := range r.ConsumedCapacity {
					flat.ConsumedCapacity[string(name)] = q.String()
				}
			}
			out[i] = append(out[i], flat)
		}
	}
	return out
}

func median(values []int64) int64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// runNode answers mode "node": can the claims be allocated on this one node?
// With repeat N, a fresh allocator is built N times (outside the timed part) and the median
// Allocate time is reported.
func runNode(c *Case, features structured.Features, timeout time.Duration) NodeAnswer {
	ans := NodeAnswer{ID: c.ID}
	if c.Node == nil {
		ans.Error = errText(errors.New("invalid input: mode node needs \"node\""))
		return ans
	}
	claims := withDefaults(c.Claims)
	classes := newClassLister(c.Classes)
	if reason := preFilter(claims, classes, features); reason != "" {
		ans.Reason = reason
		return ans
	}
	state := allocatedState(c.Allocated, features.ConsumableCapacity)
	var last outcome
	for range max(1, c.Repeat) {
		a, err := structured.NewAllocator(context.Background(), features, state, classes, c.Slices, celCache(features))
		if err != nil {
			ans.Error = errText(err)
			return ans
		}
		ans.Allocator = implementation(a)
		last = allocate(a, c.Node, claims, timeout)
		ans.NanosAll = append(ans.NanosAll, last.nanos)
		ans.Invocations = invocations(a)
		if last.err != nil {
			break // a fatal error does not need timing
		}
	}
	ans.Nanos = median(ans.NanosAll)
	if c.Repeat <= 1 {
		ans.NanosAll = nil
	}
	ans.Fits = last.results != nil
	ans.Reason = last.reason
	ans.Timeout = last.timeout
	if last.err != nil {
		ans.Error = errText(last.err)
	}
	ans.Results = flatten(last.results)
	if c.Full {
		ans.Allocations = last.results
	}
	return ans
}

// runGang answers mode "gang": place the pods one after the other like kube-scheduler
// (allocator built from the allocated state at PreFilter, Allocate per candidate node in
// order, first fitting node wins, its allocation is committed before the next pod).
func runGang(c *Case, features structured.Features, timeout time.Duration) GangAnswer {
	ans := GangAnswer{ID: c.ID, Pods: []PodAnswer{}}
	nodes := make(map[string]*v1.Node, len(c.Nodes))
	for _, node := range c.Nodes {
		nodes[node.Name] = node
	}
	classes := newClassLister(c.Classes)
	allocated := slices.Clone(c.Allocated)
	var total int64
	haveStats := false
	if c.Filter != "" && c.Filter != "first" && c.Filter != "scheduler" {
		ans.Error = errText(fmt.Errorf("invalid input: filter %q: want first or scheduler", c.Filter))
		return ans
	}
	start := 0 // the scheduler's nextStartNodeIndex
	for _, pod := range c.Pods {
		pa := PodAnswer{Name: pod.Name}
		claims := withDefaults(pod.Claims)
		candidates := c.Nodes
		if pod.Node != "" {
			if nodes[pod.Node] == nil {
				pa.Error = errText(fmt.Errorf("invalid input: pod %s: unknown node %q", pod.Name, pod.Node))
				ans.Pods = append(ans.Pods, pa)
				continue
			}
			candidates = []*v1.Node{nodes[pod.Node]}
		}
		if reason := preFilter(claims, classes, features); reason != "" {
			pa.Reason = reason
			ans.Pods = append(ans.Pods, pa)
			continue
		}
		state := allocatedState(allocated, features.ConsumableCapacity)
		a, err := structured.NewAllocator(context.Background(), features, state, classes, c.Slices, celCache(features))
		if err != nil {
			pa.Error = errText(err)
			ans.Pods = append(ans.Pods, pa)
			continue
		}
		ans.Allocator = implementation(a)
		want := 1
		if c.Filter == "scheduler" && pod.Node == "" {
			want = feasibleNodesToFind(len(candidates))
			candidates = append(slices.Clone(candidates[start:]), candidates[:start]...)
		}
		var chosen *v1.Node
		var chosenResults []resourceapi.AllocationResult
		feasible, processed := 0, 0
		for _, node := range candidates {
			o := allocate(a, node, claims, timeout)
			processed++
			ans.Calls++
			ans.Nanos += o.nanos
			if o.timeout {
				pa.Timeouts++
			}
			if o.err != nil {
				pa.Error = errText(o.err)
				break
			}
			if o.results == nil {
				pa.Reason = o.reason
				continue
			}
			feasible++
			if chosen == nil {
				chosen, chosenResults = node, o.results
			}
			if feasible >= want {
				break
			}
		}
		if len(c.Nodes) > 0 {
			start = (start + processed) % len(c.Nodes)
		}
		if chosen != nil && pa.Error == nil {
			pa.Node = &chosen.Name
			pa.Reason = ""
			pa.Results = flatten(chosenResults)
			for i, claim := range claims {
				committed := claim.DeepCopy()
				committed.Status.Allocation = &chosenResults[i]
				allocated = append(allocated, committed)
			}
			ans.Placed++
		}
		if n := invocations(a); n != nil {
			total += *n
			haveStats = true
		}
		ans.Pods = append(ans.Pods, pa)
	}
	if haveStats {
		ans.Invocations = &total
	}
	return ans
}

// feasibleNodesToFind is kube-scheduler's numFeasibleNodesToFind with the default
// (adaptive) percentageOfNodesToScore: all of a small cluster, else 50% minus 1% per 125
// nodes, at least 5% and at least 100 nodes.
func feasibleNodesToFind(numAllNodes int) int {
	const minFeasibleNodesToFind, minPercentage, basePercentage = 100, 5, 50
	if numAllNodes < minFeasibleNodesToFind {
		return numAllNodes
	}
	percentage := basePercentage - numAllNodes/125
	if percentage < minPercentage {
		percentage = minPercentage
	}
	n := numAllNodes * percentage / 100
	if n < minFeasibleNodesToFind {
		return minFeasibleNodesToFind
	}
	return n
}

// info reports the module versions this binary was built with and the default features.
func info(id json.RawMessage) InfoAnswer {
	ans := InfoAnswer{ID: id, Go: runtime.Version(), Modules: map[string]string{}, Kube: kubeMinor,
		Features: featureMap(defaultFeatures)}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if strings.HasPrefix(dep.Path, "k8s.io/") {
				ans.Modules[dep.Path] = dep.Version
			}
		}
	}
	a, err := structured.NewAllocator(context.Background(), defaultFeatures, allocatedState(nil, true),
		classLister{}, nil, celCache(defaultFeatures))
	if err != nil {
		ans.Error = errText(err)
		return ans
	}
	ans.Allocator = implementation(a)
	return ans
}
