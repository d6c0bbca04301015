//go:build fitgatetable

// Package fitgatetable runs upstream's own allocator test table
// (k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting) with an
// allocator that delegates to fitcore.
//
// The table is an internal package: Go lets only packages under structured/ import it.
// bench/oracle/harness/build.sh therefore copies the module out of the Go module cache
// into a build directory (outside the repository), places this file and the oracle's
// features.go (the scheduler's default features for that release) at
// structured/internal/fitgatetable, and builds the test binary there.
//
// For every case, the table's driver calls newAllocator with the case's inputs and then
// Allocate. Allocate sends the inputs to the fitcore worker (FITGATE_TABLE_WORKER, a JSON
// argv: `python -m bench.oracle.table worker --kube 1.37`), which makes the table's
// placeholder names valid, answers with fitcore and returns the inputs as it used them.
// Upstream's allocator then answers the same inputs with the default feature set (not
// the case's own features, which may switch on alpha features no default scheduler
// has), and one line
//
//	FITGATE-TABLE {"case": ..., "fitcore": ..., "upstream": ...}
//
// is printed. fitcore's answer is what Allocate returns, so the table's own assertions
// check fitcore against the table's expectations too (they were written for the case's
// features; bench/oracle/table.py compares with upstream's default-feature answer
// instead, and ignores the test verdicts).
package fitgatetable

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/dynamic-resource-allocation/structured/internal"
	"k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting"
	"k8s.io/dynamic-resource-allocation/structured/schedulerapi"
)

// filterTimeout is kube-scheduler's default DynamicResourcesArgs.filterTimeout.
const filterTimeout = 10 * time.Second

func TestFitcoreTable(t *testing.T) {
	allocatortesting.TestAllocator(t, internal.FeaturesAll, newAllocator)
}

func TestFitcoreLexicographicalTable(t *testing.T) {
	allocatortesting.TestLexicographicalAllocator(t, internal.FeaturesAll, newAllocator)
}

// ---------------------------------------------------------------------- the worker

type worker struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  *bufio.Writer
	out *bufio.Reader
}

var fitcore *worker

func TestMain(m *testing.M) {
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv("FITGATE_TABLE_WORKER")), &argv); err != nil || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "fitgatetable: FITGATE_TABLE_WORKER must be a JSON argv, e.g. "+
			`["python", "-m", "bench.oracle.table", "worker", "--kube", "1.37"]`)
		os.Exit(2)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		panic(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fitgatetable: starting the fitcore worker:", err)
		os.Exit(2)
	}
	fitcore = &worker{cmd: cmd, in: bufio.NewWriter(stdin), out: bufio.NewReaderSize(stdout, 1<<20)}
	code := m.Run()
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "fitgatetable: the fitcore worker:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

// ask sends one case and reads fitcore's answer (one JSON line each way).
func (w *worker) ask(c *tableCase) (*workerAnswer, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if _, err := w.in.Write(append(line, '\n')); err != nil {
		return nil, err
	}
	if err := w.in.Flush(); err != nil {
		return nil, err
	}
	reply, err := w.out.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("reading the fitcore worker's answer: %w", err)
	}
	var answer workerAnswer
	if err := json.Unmarshal(reply, &answer); err != nil {
		return nil, fmt.Errorf("decoding the fitcore worker's answer: %w", err)
	}
	return &answer, nil
}

// -------------------------------------------------------------------- the exchange

// tableCase is one Allocate call of the table, as plain API JSON.
type tableCase struct {
	Features  map[string]bool              `json:"features"` // the case's own (for the record)
	Node      *v1.Node                     `json:"node"`
	Slices    []*resourceapi.ResourceSlice `json:"slices"`
	Classes   []*resourceapi.DeviceClass   `json:"classes"`
	Claims    []*resourceapi.ResourceClaim `json:"claims"`
	Allocated allocated                    `json:"allocated"`
}

// allocated is the scheduler's AllocatedState: devices in use, shares of devices that
// allow multiple allocations, and the capacity those shares consume per device.
type allocated struct {
	Devices  []deviceRef `json:"devices"`
	Shares   []deviceRef `json:"shares"`
	Consumed []consumed  `json:"consumed"`
}

type deviceRef struct {
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
}

type consumed struct {
	deviceRef
	Capacity map[string]resource.Quantity `json:"capacity"`
}

// answer is one allocator's answer: verdict "fits", "no-fit" or "error" (fitcore may
// also answer "refused": it does not take the input, or "undecided").
type answer struct {
	Verdict string     `json:"verdict"`
	Reasons []string   `json:"reasons,omitempty"`
	Results [][]result `json:"results"`
}

type result struct {
	Request          string            `json:"request"`
	Driver           string            `json:"driver"`
	Pool             string            `json:"pool"`
	Device           string            `json:"device"`
	AdminAccess      bool              `json:"adminAccess"`
	Shared           bool              `json:"shared"`
	ConsumedCapacity map[string]string `json:"consumedCapacity"`
}

type workerAnswer struct {
	Case    *tableCase        `json:"case"`    // the inputs as fitcore took them
	Fitcore map[string]answer `json:"fitcore"` // by engine
	Engine  string            `json:"engine"`  // the engine whose answer Allocate returns
	Error   string            `json:"error"`   // the worker failed (not fitcore's verdict)
}

type record struct {
	Case     *tableCase        `json:"case"`
	Fitcore  map[string]answer `json:"fitcore"`
	Upstream answer            `json:"upstream"`
}

// ------------------------------------------------------------------- the allocator

type delegating struct {
	features Features
	state    schedulerapi.AllocatedState
	classes  internal.DeviceClassLister
	slices   []*resourceapi.ResourceSlice
	stats    internal.Stats
}

type Features = internal.Features

func newAllocator(_ context.Context, features Features, state schedulerapi.AllocatedState,
	classes internal.DeviceClassLister, slices []*resourceapi.ResourceSlice, _ *cel.Cache,
) (internal.Allocator, error) {
	return &delegating{features: features, state: state, classes: classes, slices: slices}, nil
}

func (a *delegating) Channel() internal.AllocatorChannel { return internal.Incubating }

// GetStats reports upstream's search statistics (the table checks them for some cases;
// implementing the interface keeps those cases from being skipped).
func (a *delegating) GetStats() internal.Stats { return a.stats }

func (a *delegating) Allocate(ctx context.Context, node *v1.Node, claims []*resourceapi.ResourceClaim,
) ([]resourceapi.AllocationResult, error) {
	if err := ctx.Err(); err != nil {
		// The table's interrupt cases: nothing to compare.
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	classList, err := a.classes.List()
	if err != nil {
		return nil, err
	}
	c := &tableCase{
		Features: featureMap(a.features), Node: node, Slices: a.slices, Classes: classList,
		Claims: claims, Allocated: fromState(a.state),
	}
	reply, err := fitcore.ask(c)
	if err == nil && reply.Error != "" {
		err = errors.New(reply.Error)
	}
	if err != nil {
		// bench/oracle/table.py fails the run on this line.
		fmt.Fprintf(os.Stderr, "fitgatetable: the fitcore worker failed: %v\n", err)
		return nil, err
	}
	up := a.upstream(reply.Case)
	line, err := json.Marshal(record{Case: reply.Case, Fitcore: reply.Fitcore, Upstream: up})
	if err != nil {
		return nil, err
	}
	fmt.Printf("FITGATE-TABLE %s\n", line)
	return toResults(reply.Fitcore[reply.Engine])
}

// upstream answers the case with the published allocator and the scheduler's default
// features for this release (defaultFeatures, from the oracle's features.go).
func (a *delegating) upstream(c *tableCase) answer {
	ctx, cancel := context.WithTimeout(context.Background(), filterTimeout)
	defer cancel()
	state, err := toState(c.Allocated)
	if err != nil {
		return answer{Verdict: "error", Reasons: []string{err.Error()}}
	}
	celCache := cel.NewCache(10, cel.Features{
		EnableConsumableCapacity: defaultFeatures.ConsumableCapacity,
		EnableListTypeAttributes: defaultFeatures.ListTypeAttributes,
	})
	alloc, err := structured.NewAllocator(ctx, defaultFeatures, state, classLister(c.Classes), c.Slices, celCache)
	if err != nil {
		return answer{Verdict: "error", Reasons: []string{err.Error()}}
	}
	results, err := alloc.Allocate(ctx, c.Node, c.Claims)
	if extended, ok := alloc.(internal.AllocatorExtended); ok {
		a.stats = extended.GetStats()
	}
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return answer{Verdict: "no-fit", Reasons: []string{err.Error()}}
	case err != nil:
		return answer{Verdict: "error", Reasons: []string{err.Error()}}
	case results == nil:
		return answer{Verdict: "no-fit"}
	}
	out := answer{Verdict: "fits"}
	for _, r := range results {
		var claim []result
		for _, d := range r.Devices.Results {
			res := result{Request: d.Request, Driver: d.Driver, Pool: d.Pool, Device: d.Device,
				AdminAccess: d.AdminAccess != nil && *d.AdminAccess, Shared: d.ShareID != nil}
			if d.ConsumedCapacity != nil {
				res.ConsumedCapacity = map[string]string{}
				for name, q := range d.ConsumedCapacity {
					res.ConsumedCapacity[string(name)] = q.String()
				}
			}
			claim = append(claim, res)
		}
		out.Results = append(out.Results, claim)
	}
	return out
}

// toResults turns fitcore's answer into what Allocate returns.
func toResults(a answer) ([]resourceapi.AllocationResult, error) {
	switch a.Verdict {
	case "fits":
	case "no-fit", "undecided":
		return nil, nil
	default:
		return nil, fmt.Errorf("fitcore: %s: %s", a.Verdict, strings.Join(a.Reasons, "; "))
	}
	out := make([]resourceapi.AllocationResult, 0, len(a.Results))
	for _, claim := range a.Results {
		var ar resourceapi.AllocationResult
		for _, r := range claim {
			d := resourceapi.DeviceRequestAllocationResult{
				Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device,
			}
			if r.AdminAccess {
				d.AdminAccess = &r.AdminAccess
			}
			if r.Shared {
				id := types.UID("aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa")
				d.ShareID = &id
			}
			if r.ConsumedCapacity != nil {
				d.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
				for name, text := range r.ConsumedCapacity {
					q, err := resource.ParseQuantity(text)
					if err != nil {
						return nil, fmt.Errorf("fitcore: consumed capacity %q: %w", text, err)
					}
					d.ConsumedCapacity[resourceapi.QualifiedName(name)] = q
				}
			}
			ar.Devices.Results = append(ar.Devices.Results, d)
		}
		out = append(out, ar)
	}
	return out, nil
}

// ------------------------------------------------------------------------- helpers

func featureMap(f Features) map[string]bool {
	out := map[string]bool{}
	v := reflect.ValueOf(f)
	for i := range v.NumField() {
		if v.Field(i).Kind() == reflect.Bool && v.Field(i).Bool() {
			out[v.Type().Field(i).Name] = true
		}
	}
	return out
}

func ref(id schedulerapi.DeviceID) deviceRef {
	return deviceRef{Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()}
}

func fromState(s schedulerapi.AllocatedState) allocated {
	out := allocated{Devices: []deviceRef{}, Shares: []deviceRef{}, Consumed: []consumed{}}
	for id := range s.AllocatedDevices {
		out.Devices = append(out.Devices, ref(id))
	}
	for id := range s.AllocatedSharedDeviceIDs {
		r := ref(id.GetDeviceID())
		r.ShareID = id.ShareID.String()
		out.Shares = append(out.Shares, r)
	}
	for id, capacity := range s.AggregatedCapacity {
		c := consumed{deviceRef: ref(id), Capacity: map[string]resource.Quantity{}}
		for name, q := range capacity {
			if q != nil {
				c.Capacity[string(name)] = *q
			}
		}
		out.Consumed = append(out.Consumed, c)
	}
	key := func(r deviceRef) string { return r.Driver + "/" + r.Pool + "/" + r.Device + "/" + r.ShareID }
	sort.Slice(out.Devices, func(i, j int) bool { return key(out.Devices[i]) < key(out.Devices[j]) })
	sort.Slice(out.Shares, func(i, j int) bool { return key(out.Shares[i]) < key(out.Shares[j]) })
	sort.Slice(out.Consumed, func(i, j int) bool {
		return key(out.Consumed[i].deviceRef) < key(out.Consumed[j].deviceRef)
	})
	return out
}

func toState(a allocated) (schedulerapi.AllocatedState, error) {
	state := schedulerapi.AllocatedState{
		AllocatedDevices:         sets.New[schedulerapi.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[schedulerapi.SharedDeviceID](),
		AggregatedCapacity:       schedulerapi.NewConsumedCapacityCollection(),
	}
	for _, d := range a.Devices {
		state.AllocatedDevices.Insert(schedulerapi.MakeDeviceID(d.Driver, d.Pool, d.Device))
	}
	for _, d := range a.Shares {
		id := types.UID(d.ShareID)
		state.AllocatedSharedDeviceIDs.Insert(schedulerapi.MakeSharedDeviceID(
			schedulerapi.MakeDeviceID(d.Driver, d.Pool, d.Device), &id))
	}
	for _, c := range a.Consumed {
		amounts := map[resourceapi.QualifiedName]resource.Quantity{}
		for name, q := range c.Capacity {
			amounts[resourceapi.QualifiedName(name)] = q
		}
		state.AggregatedCapacity.Insert(schedulerapi.NewDeviceConsumedCapacity(
			schedulerapi.MakeDeviceID(c.Driver, c.Pool, c.Device), amounts))
	}
	return state, nil
}

// classLister serves the case's DeviceClasses in the table's order.
type classLister []*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, class := range l {
		if class.Name == name {
			return class, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
}
