package workload

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A frame log is a file of generated frames, written once and replayed by
// a fake Jetstream server as fast as its client reads, so that neither
// generation cost nor the whole stream in memory is part of a measurement.
// Each record is: kind (1 byte), time_us (uvarint), length (uvarint), data.

// maxLogFrame bounds a record's length on read, so a corrupt file cannot
// ask for a huge buffer.
const maxLogFrame = 1 << 20

// LogWriter appends frames to a log.
type LogWriter struct {
	w   *bufio.Writer
	hdr [1 + 2*binary.MaxVarintLen64]byte
}

// NewLogWriter writes a log to w; call Flush when done.
func NewLogWriter(w io.Writer) *LogWriter {
	return &LogWriter{w: bufio.NewWriterSize(w, 1<<20)}
}

// Write appends one frame.
func (l *LogWriter) Write(f Frame) error {
	if len(f.Data) > maxLogFrame {
		return fmt.Errorf("write frame log: frame of %d bytes over %d", len(f.Data), maxLogFrame)
	}
	h := l.hdr[:0]
	h = append(h, byte(f.Kind))
	h = binary.AppendUvarint(h, uint64(f.TimeUS))
	h = binary.AppendUvarint(h, uint64(len(f.Data)))
	if _, err := l.w.Write(h); err != nil {
		return fmt.Errorf("write frame log: %w", err)
	}
	if _, err := l.w.Write(f.Data); err != nil {
		return fmt.Errorf("write frame log: %w", err)
	}
	return nil
}

// Flush writes out what is buffered.
func (l *LogWriter) Flush() error {
	if err := l.w.Flush(); err != nil {
		return fmt.Errorf("write frame log: %w", err)
	}
	return nil
}

// LogReader reads a log back, one frame at a time, into a reused buffer.
type LogReader struct {
	r   *bufio.Reader
	buf []byte
}

// NewLogReader reads a log from r.
func NewLogReader(r io.Reader) *LogReader {
	return &LogReader{r: bufio.NewReaderSize(r, 1<<20)}
}

// Next returns the next frame, valid until the next call, or io.EOF at
// the end of the log.
func (l *LogReader) Next() (Frame, error) {
	kind, err := l.r.ReadByte()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("read frame log: %w", err)
	}
	t, err := binary.ReadUvarint(l.r)
	if err != nil {
		return Frame{}, fmt.Errorf("read frame log: %w", unexpected(err))
	}
	n, err := binary.ReadUvarint(l.r)
	if err != nil {
		return Frame{}, fmt.Errorf("read frame log: %w", unexpected(err))
	}
	if n > maxLogFrame || kind >= byte(numKinds) {
		return Frame{}, errors.New("read frame log: corrupt record")
	}
	if cap(l.buf) < int(n) {
		l.buf = make([]byte, n)
	}
	l.buf = l.buf[:n]
	if _, err := io.ReadFull(l.r, l.buf); err != nil {
		return Frame{}, fmt.Errorf("read frame log: %w", unexpected(err))
	}
	return Frame{Data: l.buf, TimeUS: int64(t), Kind: Kind(kind)}, nil
}

// unexpected turns an EOF inside a record into ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
