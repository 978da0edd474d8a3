package redisstore

import (
	"embed"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed scripts/*.lua
var scripts embed.FS

// scriptOrder lists the parts of the one script, helpers first.
var scriptOrder = []string{
	"arith", "fixed_window", "sliding_window", "token_bucket",
	"gcra", "leaky_bucket", "sliding_log", "take",
}

// source returns the Lua source of the take script.
func source() string {
	var b strings.Builder
	for _, name := range scriptOrder {
		data, err := scripts.ReadFile("scripts/" + name + ".lua")
		if err != nil {
			panic("redisstore: missing embedded script " + name) // a build defect
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

var takeScript = rueidis.NewLuaScript(source())

// Script returns the Lua source of the one script every call runs, for
// operators who preload scripts and for benchmarks that drive it directly.
// Its arguments are documented at the top of scripts/take.lua.
func Script() string { return source() }
