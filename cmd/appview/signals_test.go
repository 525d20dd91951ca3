package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The first signal starts the clean stop; a second one exits at once, for
// an operator who will not wait for it.
func TestASecondSignalExitsAtOnce(t *testing.T) {
	var mu sync.Mutex
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	ctx, stop := onSignals(context.Background(), &lockedWriter{mu: &mu, w: &stderr}, func(code int) { exited <- code }, syscall.SIGUSR1)
	defer stop()

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not end the context")
	}
	select {
	case code := <-exited:
		t.Fatalf("the first signal exited (%d)", code)
	case <-time.After(50 * time.Millisecond):
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code == 0 {
			t.Error("a forced exit reported success")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not exit")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(stderr.String(), "exiting now") {
		t.Errorf("stderr %q does not say why it exited", stderr.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
