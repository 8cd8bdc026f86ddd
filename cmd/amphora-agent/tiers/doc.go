// Package tiers holds the agent's system, interop, VM, bench, soak and
// demo tests. They drive the built binary (AMPHORA_AGENT_BIN, or the
// package for the VM tier) from outside, so they live apart from the
// code they test, in the black-box package tiers_test, each tier behind
// its build tag (see README.md, "Tests"); the harness they share is under
// internal/.
package tiers
