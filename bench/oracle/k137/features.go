package main

import "k8s.io/dynamic-resource-allocation/structured"

// kubeMinor is the Kubernetes minor version whose scheduler this build follows.
const kubeMinor = "1.37"

// defaultFeatures is what kube-scheduler 1.37 enables by default (k8s.io/kubernetes
// v1.37.2 pkg/features, mapped the way dynamicresources.AllocatorFeatures does).
var defaultFeatures = structured.Features{
	AdminAccess:             true,  // DRAAdminAccess: GA (locked) since 1.36
	PrioritizedList:         true,  // DRAPrioritizedList: GA, locked in 1.37
	PartitionableDevices:    true,  // DRAPartitionableDevices: beta, on
	DeviceTaints:            true,  // DRADeviceTaints: GA in 1.37
	ConsumableCapacity:      true,  // DRAConsumableCapacity: beta, on
	DeviceBindingAndStatus:  true,  // DRADeviceBindingConditions (beta, on) && DRAResourceClaimDeviceStatus (GA)
	FractionalCapacityRange: true,  // DRAFractionalCapacityRange: beta, on at emulation version 1.37
	ListTypeAttributes:      false, // DRAListTypeAttributes: alpha, off
	OptionalNodeOperations:  false, // DRAOptionalNodeOperations: alpha, off
	DerivedAttributes:       false, // DRADerivedAttributes: alpha, off
	CompatibilityGroups:     false, // DRADeviceCompatibilityGroups: alpha, off
}
