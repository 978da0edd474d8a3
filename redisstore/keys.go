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
	var stack [96]byte // most keys: one allocation, the string's
	b := append(stack[:0], s.prefix...)
	b = append(b, '{')
	b = append(b, keyEscaper.Replace(key)...)
	b = append(b, "}:"...)
	b = append(b, limit.Algorithm.Resolved().String()...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(limit.Period/time.Microsecond), 10)
	if limit.Zone != nil {
		b = append(b, ':')
		b = append(b, limit.Zone.String()...)
	}
	return string(b)
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
