// Package jetstream consumes a Jetstream firehose (the JSON "v1 wire" served
// by legacy and v2 Jetstream servers) over a websocket and turns each frame
// into a typed, validated Event.
//
// The package knows nothing about storage: the caller supplies the last
// position it has made durable, and receives events on a bounded channel.
// Upstream data is untrusted, so a malformed frame is dropped, counted and
// logged, never fatal, and never delivered: a frame judged bad does not
// move the caller's cursor (the good frames around it do).
package jetstream
