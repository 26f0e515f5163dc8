package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts chatbench's own CPU profile when cpu is set; the
// returned stop writes it, and the heap profile when heap is set. They show
// whether the load generator, not the server, is what limits a run.
func startProfiles(cpu, heap string) (stop func() error, err error) {
	var f *os.File
	if cpu != "" {
		if f, err = os.Create(cpu); err != nil {
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	return func() error {
		if f != nil {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				return fmt.Errorf("-cpuprofile: %w", err)
			}
		}
		if heap == "" {
			return nil
		}
		h, err := os.Create(heap)
		if err != nil {
			return fmt.Errorf("-memprofile: %w", err)
		}
		defer h.Close()
		runtime.GC()
		if err := pprof.WriteHeapProfile(h); err != nil {
			return fmt.Errorf("-memprofile: %w", err)
		}
		return nil
	}, nil
}
