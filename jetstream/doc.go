// Package jetstream consumes a Jetstream firehose (the JSON "v1 wire" served
// by legacy and v2 Jetstream servers) over a websocket and turns each frame
// into a typed, validated Event.
//
// The package knows nothing about storage: the caller supplies the last
// position it has made durable, and receives events on a bounded channel.
// Upstream data is untrusted, so a malformed frame is dropped and counted,
// never fatal; when a dropped frame still carries a readable time_us it is
// delivered as a KindSkipped event so the caller's cursor can move past it
// (by its time only: a frame judged bad does not set the resume sequence).
package jetstream
