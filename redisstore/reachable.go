package redisstore

import (
	"context"
	"net"
	"strconv"
	"sync"

	"github.com/redis/rueidis"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Reachable reports how many of the store's hash slots have a primary that
// answers PING now, out of how many: 16384 on Cluster, 1 elsewhere. On a
// Cluster whose primary of a third of the slots is down, a probe of one key
// can look healthy while a third of the keys fail; this asks each primary.
// The error says why nothing could be asked (not connected, no node
// answered CLUSTER SLOTS).
func (s *Store) Reachable(ctx context.Context) (up, total int, err error) {
	client, cluster, err := s.conn()
	if err != nil {
		return 0, 1, err
	}
	if !cluster {
		if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
			return 0, 1, err
		}
		return 1, 1, nil
	}
	owners, err := slotOwners(ctx, client)
	if err != nil {
		return 0, clusterSlots, err
	}
	nodes := client.Nodes()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr, slots := range owners {
		wg.Go(func() {
			n, ok := nodes[addr]
			if !ok || n.Do(ctx, n.B().Ping().Build()).Error() != nil {
				return
			}
			mu.Lock()
			up += slots
			mu.Unlock()
		})
	}
	wg.Wait()
	return up, clusterSlots, nil
}

// slotOwners asks the nodes in turn for CLUSTER SLOTS until one answers,
// and returns the number of slots of each primary's address.
func slotOwners(ctx context.Context, client rueidis.Client) (map[string]int, error) {
	var last error
	for _, n := range client.Nodes() {
		ranges, err := n.Do(ctx, n.B().ClusterSlots().Build()).ToArray()
		if err != nil {
			last = err
			continue
		}
		owners := map[string]int{}
		for _, r := range ranges {
			v, err := r.ToArray()
			if err != nil || len(v) < 3 {
				continue
			}
			from, err1 := v[0].AsInt64()
			to, err2 := v[1].AsInt64()
			primary, err3 := v[2].ToArray()
			if err1 != nil || err2 != nil || err3 != nil || len(primary) < 2 {
				continue
			}
			host, _ := primary[0].ToString()
			port, _ := primary[1].AsInt64()
			owners[hostPort(host, port)] += int(to - from + 1)
		}
		return owners, nil
	}
	return nil, last
}

func hostPort(host string, port int64) string {
	return net.JoinHostPort(host, strconv.FormatInt(port, 10))
}
