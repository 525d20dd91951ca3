package replay

import (
	"fmt"
	"os"

	"github.com/atfeeds/appview/workload"
)

// rewindLog keeps the frames the server sent most recently, so that a
// client reconnecting with a cursor gets again what it had not applied,
// as Jetstream replays from its own store. The daemon steps away from a
// connection while its queue stays full, and a frame in flight then (in
// the sockets' buffers, or read and not handed over) would otherwise be
// lost. The frames sit in a temporary file used as a ring, not in
// memory: the benchmark measures the daemon's RSS, and this process is
// the daemon's.
type rewindLog struct {
	f    *os.File
	size int64 // bytes of the file used as a ring
	// pending holds the newest frames, not yet written to f.
	pending    []byte
	pendingPos int64 // the stream position of pending[0]
	// end is the stream position after the last frame added: positions
	// count every byte ever added, a frame's file offset is pos % size.
	end int64
	// entries is a ring of the kept frames, oldest at head.
	entries     []rewindEntry
	head, count int
	// evictedUS is the newest time_us among the frames dropped from the
	// ring: a cursor at or before it can no longer be served in full.
	evictedUS int64
	buf       []byte
}

type rewindEntry struct {
	timeUS int64
	pos    int64
	n      int32
	kind   workload.Kind
}

const pendingFlush = 256 << 10

func newRewindLog(dir string, size int64, frames int) (*rewindLog, error) {
	f, err := os.CreateTemp(dir, "replay-rewind-*")
	if err != nil {
		return nil, fmt.Errorf("rewind log: %w", err)
	}
	// Unlinked at once: the open file is all the log needs.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewind log: %w", err)
	}
	return &rewindLog{f: f, size: size, entries: make([]rewindEntry, frames)}, nil
}

func (l *rewindLog) close() error { return l.f.Close() }

// add keeps a copy of f.
func (l *rewindLog) add(f workload.Frame) error {
	n := int64(len(f.Data))
	if n > l.size/2 {
		return fmt.Errorf("rewind log: frame of %d bytes", n)
	}
	// Evict what the new frame overwrites, and the oldest entry if the
	// ring of entries is full.
	for l.count > 0 {
		e := l.entries[l.head]
		if l.count < len(l.entries) && e.pos >= l.end+n-l.size {
			break
		}
		l.evictedUS = max(l.evictedUS, e.timeUS)
		l.head = (l.head + 1) % len(l.entries)
		l.count--
	}
	if len(l.pending) == 0 {
		l.pendingPos = l.end
	}
	l.pending = append(l.pending, f.Data...)
	l.entries[(l.head+l.count)%len(l.entries)] = rewindEntry{timeUS: f.TimeUS, pos: l.end, n: int32(n), kind: f.Kind}
	l.count++
	l.end += n
	if len(l.pending) >= pendingFlush {
		return l.flush()
	}
	return nil
}

func (l *rewindLog) flush() error {
	if err := l.writeAt(l.pending, l.pendingPos); err != nil {
		return err
	}
	l.pending = l.pending[:0]
	return nil
}

// writeAt writes b at stream position pos, wrapping at the ring's end.
func (l *rewindLog) writeAt(b []byte, pos int64) error {
	for len(b) > 0 {
		off := pos % l.size
		k := min(int64(len(b)), l.size-off)
		if _, err := l.f.WriteAt(b[:k], off); err != nil {
			return fmt.Errorf("rewind log: %w", err)
		}
		b, pos = b[k:], pos+k
	}
	return nil
}

// read returns the frame of e, valid until the next call.
func (l *rewindLog) read(e rewindEntry) (workload.Frame, error) {
	if e.pos >= l.pendingPos && len(l.pending) > 0 {
		at := e.pos - l.pendingPos
		return workload.Frame{Data: l.pending[at : at+int64(e.n)], TimeUS: e.timeUS, Kind: e.kind}, nil
	}
	if cap(l.buf) < int(e.n) {
		l.buf = make([]byte, e.n)
	}
	l.buf = l.buf[:e.n]
	for b, pos := l.buf, e.pos; len(b) > 0; {
		off := pos % l.size
		k := min(int64(len(b)), l.size-off)
		if _, err := l.f.ReadAt(b[:k], off); err != nil {
			return workload.Frame{}, fmt.Errorf("rewind log: %w", err)
		}
		b, pos = b[k:], pos+k
	}
	return workload.Frame{Data: l.buf, TimeUS: e.timeUS, Kind: e.kind}, nil
}

// since returns the kept frames from the first at or after cursor, in the
// order they were sent, and whether some frame at or after cursor was
// already dropped (a gap the client will not get back).
func (l *rewindLog) since(cursor int64) (entries []rewindEntry, gap bool) {
	first := -1
	for i := range l.count {
		if l.entries[(l.head+i)%len(l.entries)].timeUS >= cursor {
			first = i
			break
		}
	}
	if first < 0 {
		return nil, l.evictedUS >= cursor
	}
	for i := first; i < l.count; i++ {
		entries = append(entries, l.entries[(l.head+i)%len(l.entries)])
	}
	return entries, l.evictedUS >= cursor
}
