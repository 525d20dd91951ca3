package workload

import "time"

// Identifier spelling, appended straight into frame buffers: the generator
// writes a few million of them and should cost far less than the daemon
// that reads them.

const (
	// base32Sortable is the alphabet of TIDs: base32 whose order matches
	// the order of the numbers it encodes.
	base32Sortable = "234567abcdefghijklmnopqrstuvwxyz"
	// base32Lower is the alphabet of did:plc identifiers and of CIDs
	// (RFC 4648, lower case).
	base32Lower = "abcdefghijklmnopqrstuvwxyz234567"
)

// AccountDID is account i's DID: a did:plc of 24 base32 characters, 13
// from a hash of i (so neighbours do not look alike) and 11 encoding i
// itself (so no two accounts collide). It does not depend on the seed, so
// a client process can name viewers from their index alone.
func AccountDID(i int) string { return string(appendDID(nil, i)) }

func appendDID(b []byte, i int) []byte {
	b = append(b, "did:plc:"...)
	h := splitmix64(uint64(i) ^ 0x5eed_d1d5)
	for k := 0; k < 13; k++ {
		b = append(b, base32Lower[h>>59])
		h <<= 5
	}
	v := uint64(i)
	for k := 10; k >= 0; k-- {
		b = append(b, base32Lower[(v>>(5*k))&31])
	}
	return b
}

// appendTID appends the TID (13 characters) of a microsecond time and a
// 10-bit clock id, as syntax.NewTID spells it.
func appendTID(b []byte, us int64, clock uint16) []byte {
	v := uint64(us)<<10 | uint64(clock&0x3ff)
	v &= 1<<63 - 1
	for k := 12; k >= 0; k-- {
		b = append(b, base32Sortable[(v>>(5*k))&31])
	}
	return b
}

// appendCID appends a CIDv1 shaped like a dag-cbor sha-256 one
// ("bafyrei" and 52 base32 characters) derived from h.
func appendCID(b []byte, h uint64) []byte {
	b = append(b, "bafyrei"...)
	var x uint64
	for k := 0; k < 52; k++ {
		if k%12 == 0 {
			x = splitmix64(h + uint64(k))
		}
		b = append(b, base32Lower[x>>59])
		x <<= 5
	}
	return b
}

// appendDatetime appends an atproto datetime with milliseconds.
func appendDatetime(b []byte, us int64) []byte {
	return time.UnixMicro(us).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
}

// splitmix64 is a cheap, well-mixed hash of a 64-bit value.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
