package main

import (
	"math"
	"testing"
)

// vm_stat's output on an Apple Silicon Mac (16 KiB pages).
const vmStatSample = `Mach Virtual Memory Statistics: (page size of 16384 bytes)
Pages free:                                5000.
Pages active:                             40000.
Pages inactive:                           35000.
Pages speculative:                         5000.
Pages throttled:                              0.
Pages wired down:                         10000.
Pages purgeable:                            900.
"Translation faults":                 123456789.
Pages copy-on-write:                    1234567.
Pages zero filled:                     98765432.
Pages reactivated:                        12345.
Pages purged:                              6789.
File-backed pages:                        20000.
Anonymous pages:                          60000.
Pages stored in compressor:               20000.
Pages occupied by compressor:              5000.
Decompressions:                          111111.
Compressions:                            222222.
Pageins:                                 333333.
Pageouts:                                  4444.
Swapins:                                      0.
Swapouts:                                     0.
`

func TestParseVMStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want float64 // -1: an error
	}{
		// (40000 + 10000 + 5000) / (5000 + 40000 + 35000 + 5000 + 10000 + 5000)
		{"apple silicon", vmStatSample, 0.55},
		{"empty", "", -1},
		{"garbage", "vm_stat: command not found\n", -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVMStat(tc.in)
			if tc.want < 0 {
				if err == nil {
					t.Fatalf("parseVMStat = %v, want an error", got)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("parseVMStat = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
