// Package tiers holds the agent's system, interop, VM, cloud, bench, soak
// and demo tests. They drive the built binary (AMPHORA_AGENT_BIN, or the
// package for the VM and cloud tiers) from outside, so they live apart
// from the code they test, in the black-box package tiers_test, each tier
// behind its build tag (README.md in this folder says how to run each and
// what it proves); the harness they share is under internal/.
package tiers
