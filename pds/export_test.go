package pds

import "github.com/bluesky-social/indigo/atproto/syntax"

// DecodePageForTest lets the external tests decode a listRecords answer
// the way ListRecords does.
func DecodePageForTest(body []byte, repo, collection string) (Page, error) {
	return decodePage(body, syntax.DID(repo), syntax.NSID(collection), MaxLimit)
}
