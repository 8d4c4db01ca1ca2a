//go:build race

package otelstats

const raceEnabled = true
