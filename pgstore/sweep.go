package pgstore

import (
	"context"
	"fmt"
	"time"
)

// sweepLoop runs a bounded sweep round every sweepEvery until Close,
// each round over the next sweepBlocks blocks of each table, so that a
// full pass over a large table is spread over many rounds.
func (s *Store) sweepLoop() {
	defer s.stopped.Done()
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	var cursor [2]int64 // the next block of state and of quota
	failing := false
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(s.sweepEvery, 10*time.Second))
		var err error
		for i, durable := range []bool{false, true} {
			var next int64
			if next, err = s.sweepRound(ctx, durable, cursor[i]); err != nil {
				break
			}
			cursor[i] = next
		}
		cancel()
		switch {
		case err != nil:
			s.sweepErrs.Add(1)
			if !failing && s.log != nil {
				s.log.Warn("pgstore: sweep failed", "error", err)
			}
			failing = true
		case failing:
			failing = false
			if s.log != nil {
				s.log.Info("pgstore: sweep works again")
			}
		}
	}
}

// SweepErrors returns how many background sweep rounds have failed.
func (s *Store) SweepErrors() uint64 { return s.sweepErrs.Load() }

func (s *Store) sweepRound(ctx context.Context, durable bool, from int64) (int64, error) {
	var next int64
	err := s.pool.QueryRow(ctx, "SELECT "+s.schema+".sweep($1, $2, $3)", durable, from, s.sweepBlocks).Scan(&next)
	if err != nil {
		return from, fmt.Errorf("pgstore: sweep: %w", err)
	}
	return next, nil
}

// Sweep deletes every row back to full from both tables, in rounds of
// Options.SweepBlocks blocks: what the background sweep does over many
// rounds, at once.
func (s *Store) Sweep(ctx context.Context) error {
	for _, durable := range []bool{false, true} {
		from := int64(0)
		for {
			next, err := s.sweepRound(ctx, durable, from)
			if err != nil {
				return err
			}
			if next == 0 {
				break
			}
			from = next
		}
	}
	return nil
}
