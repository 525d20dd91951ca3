//go:build linux

package main

import (
	"syscall"
	"testing"
)

// TestResetPeakRSSStartsThePeakOver: a 128 MiB mapping touched and
// unmapped leaves VmHWM that far above VmRSS; the reset brings it back,
// and says so, so the ingest's peak excludes the seed phase's.
func TestResetPeakRSSStartsThePeakOver(t *testing.T) {
	const size = 128 << 20
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("no anonymous mapping:", err)
	}
	for i := 0; i < size; i += 4096 {
		mem[i] = 1
	}
	if err := syscall.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	if hwm, rss := procStatus("VmHWM"), procStatus("VmRSS"); hwm < rss+size/2 {
		t.Skipf("setup: VmHWM %d MiB, VmRSS %d MiB: the peak did not outlive the mapping", hwm>>20, rss>>20)
	}
	if err := resetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	if hwm, rss := procStatus("VmHWM"), procStatus("VmRSS"); hwm > rss+16<<20 {
		t.Errorf("after the reset VmHWM %d MiB, VmRSS %d MiB", hwm>>20, rss>>20)
	}
}
