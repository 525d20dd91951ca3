package replay

import (
	"context"
	"io"
	"testing"

	"github.com/atfeeds/appview/workload"
)

type frames []workload.Frame

func (f *frames) Next(context.Context) (workload.Frame, error) {
	if len(*f) == 0 {
		return workload.Frame{}, io.EOF
	}
	x := (*f)[0]
	*f = (*f)[1:]
	return x, nil
}

func TestAfterSkipsFramesTheDatabaseHolds(t *testing.T) {
	src := frames{{TimeUS: 1}, {TimeUS: 5}, {TimeUS: 3}, {TimeUS: 6}, {TimeUS: 4}, {TimeUS: 7}}
	a := After(&src, 5)
	var got []int64
	for {
		f, err := a.Next(context.Background())
		if err != nil {
			break
		}
		got = append(got, f.TimeUS)
	}
	// The first frame past the cursor starts the stream; a later older
	// frame (a duplicate) is passed on as the generator made it.
	if len(got) != 3 || got[0] != 6 || got[1] != 4 || got[2] != 7 {
		t.Fatalf("got %v, want [6 4 7]", got)
	}
}
