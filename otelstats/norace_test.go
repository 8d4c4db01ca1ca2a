//go:build !race

package otelstats

const raceEnabled = false
