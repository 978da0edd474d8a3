package httplimit_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// contentEvents is how many content events the streams below send before
// their usage: one token each, as an LLM streams.
const contentEvents = 2000

// streamUntilGone streams contentEvents events of content, then waits
// for its client to leave before it would send the usage event.
func streamUntilGone(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range contentEvents {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}],\"usage\":null}\n\n", i)
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// readEventsAndLeave reads n events of the answer to a request to url as
// user, and hangs up.
func readEventsAndLeave(t *testing.T, url, user string, n int) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"stream":true}`))
	req.Header.Set("X-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 2 * n { // a data line and a blank line each
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
}

// A client that hangs up after the content of a stream, before its usage
// event, is charged no less than its estimate plus one per event it got,
// or cost.unread when that is more: never only the estimate.
func TestStreamCutBeforeItsUsageIsNotCheaper(t *testing.T) {
	for _, c := range []struct {
		name         string
		unread, want int64
	}{
		{"estimate and events", 0, 500 + contentEvents},
		{"cost.unread", 8000, 8000},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := tokenPolicy()
			p.CostUnread = c.unread
			settled := make(chan httplimit.Settlement, 1)
			srv := chargeServer(t, memstore.New(memstore.Options{}), p, streamUntilGone, func(o *httplimit.Options) {
				o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { settled <- s }
			})
			readEventsAndLeave(t, srv.URL, "ivy", contentEvents)
			if s := <-settled; s.Actual != c.want || s.Err == nil {
				t.Fatalf("a stream cut after %d events settled %+v; want %d", contentEvents, s, c.want)
			}
		})
	}
}

// The same through the limit: 10000 tokens an hour, each stream cut after
// 2000 one-token events is charged 2500 (charged only its 500 estimate,
// 20 such streams would pass), so the 5th request is refused.
func TestCutStreamsUseTheLimit(t *testing.T) {
	p := tokenPolicy()
	p.Limit = sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10000, Period: time.Hour}
	settled := make(chan struct{}, 1)
	srv := chargeServer(t, memstore.New(memstore.Options{}), p, streamUntilGone, func(o *httplimit.Options) {
		o.OnSettle = func(*http.Request, httplimit.Settlement) { settled <- struct{}{} }
	})
	for range 4 {
		readEventsAndLeave(t, srv.URL, "jay", contentEvents)
		<-settled
	}
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("X-User", "jay")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // a stream, were it allowed: not read
	if resp.StatusCode != 429 {
		t.Fatalf("after 4 cut streams of 2000 events: %d, want 429", resp.StatusCode)
	}
}

// A stream that ends without a usage event (the client did not ask for
// one: no stream_options.include_usage) is charged as one cut before it.
func TestStreamWithoutUsageIsChargedItsEvents(t *testing.T) {
	settled := make(chan httplimit.Settlement, 1)
	srv := chargeServer(t, memstore.New(memstore.Options{}), tokenPolicy(), func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 700 {
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}, func(o *httplimit.Options) {
		o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { settled <- s }
	})
	get(t, srv.URL, "X-User", "kim")
	if s := <-settled; s.Actual != 500+701 {
		t.Fatalf("settled %+v; want 1201: the 500 estimate and one per event", s)
	}
}
