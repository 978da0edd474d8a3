// Command outsider plays a process that reaches a shard member's peer
// listener without being a member: it tries to reset a held client's
// key, charge a victim's key (forced, as a failover, as a hand-off), end
// a hand-off and announce that a member leaves, and prints one line for
// each: "refused: ..." or "ANSWERED: ...". The e2e tests run it.
//
//	outsider -addr PEER -policy P -held KEY -victim KEY -member ADDR [-secret S]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	shardv1 "github.com/sluicehq/sluice/api/shardv1"
)

func main() {
	addr := flag.String("addr", "", "the member's peer listener")
	policy := flag.String("policy", "p", "the policy of the keys: the service keys its state by policy, NUL, key")
	held := flag.String("held", "", "a key held at its limit")
	victim := flag.String("victim", "", "a key not yet used")
	member := flag.String("member", "", "a member's address, to forge its hand-off and leave")
	secret := flag.String("secret", "", "a guessed secret, sent when set")
	rate := flag.Int64("rate", 3, "the keys' limit per hour")
	flag.Parse()
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	call := func(key string, cost int64, flags shardv1.Flag, reset bool) *shardv1.Batch {
		key = *policy + "\x00" + key
		b := &shardv1.Batch{Version: shardv1.Version_VERSION_1, CallSizes: []uint32{1}, Keys: []byte(key), KeyLengths: []uint32{uint32(len(key))},
			Algorithms: []uint32{0}, Rates: []int64{*rate}, PeriodsUs: []int64{time.Hour.Microseconds()}, Bursts: []int64{0},
			Costs: []int64{cost}, Flags: []uint32{uint32(flags)}, NowUnixUs: []int64{0}}
		if reset {
			b.CallResets = []bool{true}
		}
		return b
	}
	for _, a := range []struct {
		what  string
		batch *shardv1.Batch
	}{
		{"reset of the held key", call(*held, 1, 0, true)},
		{"forced charge of the victim's key", call(*victim, *rate, shardv1.Flag_FLAG_FORCE, false)},
		{"failover charge", call(*victim, *rate, shardv1.Flag_FLAG_FAILOVER|shardv1.Flag_FLAG_FORCE, false)},
		{"hand-off", call(*victim, *rate, shardv1.Flag_FLAG_HOP|shardv1.Flag_FLAG_HANDOFF|shardv1.Flag_FLAG_FORCE, false)},
		{"end of a hand-off", &shardv1.Batch{Version: shardv1.Version_VERSION_1, HandedOff: *member}},
		{"leave", &shardv1.Batch{Version: shardv1.Version_VERSION_1, HandedOff: *member, Leaving: true}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if *secret != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "sluice-peer-secret", *secret)
		}
		st, err := shardv1.NewPeerClient(conn).Take(ctx)
		if err == nil {
			st.Send(a.batch) // its error is io.EOF; the call's is Recv's
			_, err = st.Recv()
		}
		cancel()
		if err != nil {
			fmt.Printf("refused: %s: %v\n", a.what, err)
		} else {
			fmt.Printf("ANSWERED: %s\n", a.what)
		}
	}
}
