package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/atfeeds/appview/internal/syncbuf"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/appview"
	"github.com/atfeeds/appview/feeds"
)

// rebuildWorld stores five viewers who follow carol, and three posts of
// hers, through listing pages: records and follows without feed items,
// as after a restore that kept only those. Every viewer's feed is empty
// until a rebuild.
func rebuildWorld(t *testing.T) []string {
	env := []string{"APPVIEW_DATABASE_PATH=" + t.TempDir() + "/appview.db"}
	cfg, err := appview.LoadConfigEnv("", env)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, _, err := appview.OpenOrCreateStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	carol := syntax.DID("did:plc:carol")
	for i := range 5 {
		v := syntax.DID(fmt.Sprintf("did:plc:viewer%d", i))
		if _, err := st.RegisterViewer(ctx, v, "following", now); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ApplyListingPage(ctx, &feeds.ListingPage{Account: v, Collection: followNSID,
			Records: []feeds.ListedRecord{{RKey: tidAt(i), Subject: carol, Value: []byte(`{}`)}},
			To:      feeds.Listing{Round: 1, Page: 1, Complete: true}}, now); err != nil {
			t.Fatal(err)
		}
	}
	var posts []feeds.ListedRecord
	for i := range 3 {
		posts = append(posts, feeds.ListedRecord{RKey: tidAt(100 + i), CID: "bafypost", Value: []byte(`{"text":"hi"}`)})
	}
	if _, err := st.ApplyListingPage(ctx, &feeds.ListingPage{Account: carol, Collection: postNSID, Records: posts,
		To: feeds.Listing{Round: 1, Page: 1, Complete: true}}, now); err != nil {
		t.Fatal(err)
	}
	return env
}

// cancelOn is a stderr that cancels the command's context when a line
// containing marker is written: an interruption at a known point.
type cancelOn struct {
	syncbuf.Buffer
	marker string
	cancel context.CancelFunc
	once   sync.Once
}

func (c *cancelOn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(c.marker)) {
		c.once.Do(c.cancel)
	}
	return c.Buffer.Write(p)
}

func TestRebuildInterruptedAndResumed(t *testing.T) {
	env := rebuildWorld(t)
	out, _, err := runCmd(t, env, "cursor", "show")
	if err != nil || !strings.Contains(out, "following: 5 viewers, 0 items") {
		t.Fatalf("before the rebuild:\n%s%v", out, err)
	}

	// Ctrl-C as soon as the first chunk of two viewers is committed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &cancelOn{marker: "state=running done=2 total=5", cancel: cancel}
	err = run(ctx, []string{"rebuild", "--feed", "following", "--chunk", "2", "--progress-every", "1ns"}, env, new(syncbuf.Buffer), stderr)
	if err == nil || !strings.Contains(err.Error(), "rebuild following: interrupted after 2 of 5 viewers; run the same command again to resume") {
		t.Fatalf("interrupted rebuild: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "state=interrupted done=2 total=5") {
		t.Errorf("no final progress line:\n%s", stderr.String())
	}
	out, _, err = runCmd(t, env, "cursor", "show")
	if err != nil || !strings.Contains(out, "following: 5 viewers, 6 items") {
		t.Fatalf("after the interruption, want the first two viewers rebuilt:\n%s%v", out, err)
	}
	if !strings.Contains(out, "rebuild of following interrupted after viewer ") {
		t.Errorf("cursor show does not list the interrupted rebuild:\n%s", out)
	}

	out, logs, err := runCmd(t, env, "rebuild", "--feed", "following", "--chunk", "2")
	if err != nil {
		t.Fatalf("resumed rebuild: %v\n%s", err, logs)
	}
	if want := "rebuilt feed following: 5 viewers, 9 feed items written\n"; out != want {
		t.Errorf("resumed rebuild printed %q, want %q: the three viewers left, not the two done", out, want)
	}
	if !strings.Contains(logs, `msg="resuming an interrupted rebuild" feed=following`) || !strings.Contains(logs, "done=2 total=5") {
		t.Errorf("the resumed run did not say where it resumed:\n%s", logs)
	}
	out, _, err = runCmd(t, env, "cursor", "show")
	if err != nil || !strings.Contains(out, "following: 5 viewers, 15 items") || strings.Contains(out, "rebuild of") {
		t.Fatalf("after the resumed rebuild:\n%s%v", out, err)
	}

	// Finished: the next run starts over, from the first viewer.
	out, logs, err = runCmd(t, env, "rebuild", "--feed", "following")
	if err != nil || out != "rebuilt feed following: 5 viewers, 15 feed items written\n" || strings.Contains(logs, "resuming") {
		t.Errorf("a rebuild after a finished one: %q %v\n%s", out, err, logs)
	}
}

func TestRebuildRejectsBadInput(t *testing.T) {
	env := []string{"APPVIEW_DATABASE_PATH=" + t.TempDir() + "/appview.db"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rebuild"}, "--feed is required"},
		{[]string{"rebuild", "--feed", "nope"}, `rebuild: unknown feed "nope" (configured: following)`},
		{[]string{"rebuild", "--feed", "following", "--chunk", "0"}, "--chunk must be from 1 to 1000"},
		{[]string{"rebuild", "--feed", "following", "--chunk", "1001"}, "--chunk must be from 1 to 1000"},
	} {
		_, _, err := runCmd(t, env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
