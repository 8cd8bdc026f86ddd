// Package tiers holds the agent's tests that drive the built binary (or
// its package, for the VM and cloud tiers) from outside, one package per
// tier, each under the build tag it is named after: system (with the
// demo), interop, vm, cloud, bench, soak and openstack (opt-in: a whole
// OpenStack with Octavia's own gate suite). They never import the
// agent's core; the harness they share is under internal/ (README.md in
// this folder says how to run each tier and what it proves).
//
// This package itself, built without tags, runs in the unit tier: the
// layering test (deps_test.go), whose tag sets come from the tree's
// //go:build lines (buildlines_test.go), and a unit test of the packaged
// LVS masquerade script.
package tiers
