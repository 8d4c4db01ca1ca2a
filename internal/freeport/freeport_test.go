package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsOutsideEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	ports := Ports(t, 8)
	seen := map[int]bool{}
	for _, p := range ports {
		if p >= lo && p <= hi {
			t.Errorf("port %d is inside the ephemeral range %d-%d", p, lo, hi)
		}
		if p < lowest || seen[p] {
			t.Errorf("port %d below %d or given twice in %v", p, lowest, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
	for _, p := range Ports(t, 8) {
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
	}
}

func TestPickRegion(t *testing.T) {
	for _, c := range []struct {
		name         string
		ephLo, ephHi int
		wantLo       int
		wantHi       int
	}{
		{"below the range", 32768, 60999, lowest, 32767},
		{"range reaching low: above it", 1024, 50000, 50001, 65535},
	} {
		t.Run(c.name, func(t *testing.T) {
			ports, err := pick(20, c.ephLo, c.ephHi)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ports {
				if p < c.wantLo || p > c.wantHi {
					t.Errorf("port %d outside %d-%d", p, c.wantLo, c.wantHi)
				}
			}
		})
	}
	if _, err := pick(1, 1024, 65000); err == nil {
		t.Error("no room outside 1024-65000, want an error")
	}
}
