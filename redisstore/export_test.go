package redisstore

// Slot exposes slot to the external tests, which check it against Redis.
var Slot = slot
