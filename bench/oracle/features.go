package main

import "k8s.io/dynamic-resource-allocation/structured"

// kubeMinor is the Kubernetes minor version whose scheduler this build follows.
const kubeMinor = "1.36"

// defaultFeatures is what kube-scheduler 1.36 enables by default (feature gates in
// pkg/features, mapped to the allocator's Features the way the scheduler's
// dynamicresources.AllocatorFeatures does). See README.md for the gate stages.
var defaultFeatures = structured.Features{
	AdminAccess:            true,  // DRAAdminAccess: GA in 1.36
	PrioritizedList:        true,  // DRAPrioritizedList: GA in 1.36
	PartitionableDevices:   true,  // DRAPartitionableDevices: beta, on in 1.36
	DeviceTaints:           true,  // DRADeviceTaints: beta, on in 1.36
	ConsumableCapacity:     true,  // DRAConsumableCapacity: beta, on in 1.36
	DeviceBindingAndStatus: true,  // DRADeviceBindingConditions (beta, on) && DRAResourceClaimDeviceStatus (beta, on)
	ListTypeAttributes:     false, // DRAListTypeAttributes: alpha in 1.36, off
}
