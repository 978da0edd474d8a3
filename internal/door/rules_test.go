package door_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// answer is a front door's answer to one request, in words common to both
// protocols.
type answer string

const (
	proceed     answer = "proceed"
	invalid     answer = "invalid"
	unavailable answer = "unavailable"
	limited     answer = "limited"
	// shadowDenied follows an answer when a shadow policy would have
	// refused the request.
	shadowDenied answer = ", shadow denied"
)

// rule is one policy as both doors take it: keyed by X-Key (a header, or
// metadata), from one client address.
type rule struct {
	limit       int64 // fixed_window per hour; 0 for concurrency alone
	missing     sluice.MissingKey
	shadow      bool
	concurrency int64
}

// of is r's limit: fixed_window r.limit per hour, or none.
func (r rule) of() sluice.Limit {
	if r.limit == 0 {
		return sluice.Limit{}
	}
	return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: r.limit, Period: time.Hour}
}

// door sends requests through one front door built of rules; key is the
// request's X-Key ("" for none); hold keeps the request in flight (its
// slots held) until the returned function is called.
type door func(key string, hold bool) (answer, func())

func httpDoor(t *testing.T, rules []rule) door {
	resolver, _ := clientip.RemoteAddr(clientip.Options{})
	var policies []httplimit.Policy
	for i, r := range rules {
		policies = append(policies, httplimit.Policy{Name: "p" + string(rune('0'+i)), Key: httplimit.APIKey("X-Key"), Limit: r.of(),
			Missing: r.missing, Shadow: r.shadow, Concurrency: r.concurrency})
	}
	var shadow bool // the last request's
	m, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: policies, ClientIP: resolver,
		OnResult: func(_ *http.Request, res *httplimit.Result) { shadow = res.ShadowDenied }})
	if err != nil {
		t.Fatal(err)
	}
	return func(key string, hold bool) (answer, func()) {
		release := make(chan struct{})
		served := make(chan struct{}, 1)
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served <- struct{}{}
			if hold {
				<-release
			}
		}))
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		if key != "" {
			req.Header.Set("X-Key", key)
		}
		w := httptest.NewRecorder()
		done := make(chan struct{})
		shadow = false
		go func() { h.ServeHTTP(w, req); close(done) }()
		note := func(a answer) answer {
			if shadow {
				return a + shadowDenied
			}
			return a
		}
		select {
		case <-served:
			return note(proceed), func() { close(release); <-done }
		case <-done:
			// Served and returned already (a handler that does not hold):
			// both cases were ready, and select picks either.
			select {
			case <-served:
				return note(proceed), func() {}
			default:
			}
		}
		switch w.Code {
		case 400:
			return note(invalid), func() {}
		case 503:
			return note(unavailable), func() {}
		case 429:
			return note(limited), func() {}
		}
		t.Fatalf("http: status %d", w.Code)
		return "", nil
	}
}

func grpcDoor(t *testing.T, rules []rule) door {
	var policies []grpclimit.Policy
	for i, r := range rules {
		policies = append(policies, grpclimit.Policy{Name: "p" + string(rune('0'+i)), Key: grpclimit.Metadata("x-key"), Limit: r.of(),
			Missing: r.missing, Shadow: r.shadow, Concurrency: r.concurrency})
	}
	var shadow bool // the last request's
	in, err := grpclimit.New(grpclimit.Options{Store: memstore.New(memstore.Options{}), Policies: policies,
		OnShadowDenied: func(string, string) { shadow = true }})
	if err != nil {
		t.Fatal(err)
	}
	unary := in.Unary()
	return func(key string, hold bool) (answer, func()) {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1234}})
		if key != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-key", key))
		}
		release := make(chan struct{})
		served := make(chan struct{}, 1)
		done := make(chan error, 1)
		shadow = false
		note := func(a answer) answer {
			if shadow {
				return a + shadowDenied
			}
			return a
		}
		go func() {
			_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/m"}, func(context.Context, any) (any, error) {
				served <- struct{}{}
				if hold {
					<-release
				}
				return nil, nil
			})
			done <- err
		}()
		select {
		case <-served:
			return note(proceed), func() { close(release); <-done }
		case err := <-done:
			// Served and returned already (a handler that does not hold):
			// both cases were ready, and select picks either.
			select {
			case <-served:
				return note(proceed), func() {}
			default:
			}
			switch status.Code(err) {
			case codes.InvalidArgument:
				return note(invalid), func() {}
			case codes.Unavailable:
				return note(unavailable), func() {}
			case codes.ResourceExhausted:
				return note(limited), func() {}
			}
			t.Fatalf("grpc: %v", err)
		}
		return "", nil
	}
}

// httplimit and grpclimit apply the same rules (package door): a missing
// key by each Missing, shadow or not; an identity past MaxIdentityLen; a
// concurrency slot before the rate, released when a later policy refuses.
func TestEveryDoorAppliesTheSameRules(t *testing.T) {
	long := strings.Repeat("k", sluice.MaxIdentityLen+1)
	for _, tt := range []struct {
		name  string
		rules []rule
		// each request: its key and whether it stays in flight
		keys  []string
		holds []bool
		want  []answer
	}{
		{"missing key, by address", []rule{{limit: 2}}, []string{"", "", ""}, nil, []answer{proceed, proceed, limited}},
		{"missing key, deny", []rule{{limit: 2, missing: sluice.MissingDeny}}, []string{"", "a", "a"}, nil, []answer{invalid, proceed, proceed}},
		{"missing key, skip", []rule{{limit: 1, missing: sluice.MissingSkip}}, []string{"", "", "a", "a"}, nil, []answer{proceed, proceed, proceed, limited}},
		// A shadow policy never refuses, and with its key missing measures
		// the client's address, as enforcing it would.
		{"shadow, missing key", []rule{{limit: 1, shadow: true}, {limit: 3}}, []string{"", "", "", ""}, nil, []answer{proceed, proceed + shadowDenied, proceed + shadowDenied, limited + shadowDenied}},
		{"shadow, missing key, deny", []rule{{limit: 1, shadow: true, missing: sluice.MissingDeny}}, []string{"", ""}, nil, []answer{proceed, proceed}},
		{"identity too long", []rule{{limit: 5}}, []string{long, "a"}, nil, []answer{invalid, proceed}},
		{"concurrency", []rule{{concurrency: 1}}, []string{"a", "a", "b"}, []bool{true, false, false}, []answer{proceed, limited, proceed}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for name, d := range map[string]door{"httplimit": httpDoor(t, tt.rules), "grpclimit": grpcDoor(t, tt.rules)} {
				var release []func()
				for i, key := range tt.keys {
					hold := tt.holds != nil && tt.holds[i]
					got, done := d(key, hold)
					if hold {
						release = append(release, done)
					} else {
						done()
					}
					if got != tt.want[i] {
						t.Errorf("%s: request %d: %s; want %s", name, i, got, tt.want[i])
					}
				}
				for _, f := range release {
					f()
				}
			}
		})
	}
}
