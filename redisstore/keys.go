package redisstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

var keyEscaper = strings.NewReplacer(`\`, `\\`, `{`, `\(`, `}`, `\)`)

// redisKey returns the Redis key of key under limit.
func (s *Store) redisKey(key string, limit sluice.Limit) string {
	var b strings.Builder
	esc := keyEscaper.Replace(key)
	b.Grow(len(s.prefix) + len(esc) + 32)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteString(esc)
	b.WriteString("}:")
	b.WriteString(limit.Algorithm.Resolved().String())
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(int64(limit.Period/time.Microsecond), 10))
	return b.String()
}

// slot returns the Redis Cluster slot of a key: CRC16 (XMODEM) of its hash
// tag, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
